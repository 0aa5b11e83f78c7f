"""Bucket shapes and the call of a scheduler step (buckets.py)."""
# spec: J2

import sys

import pytest

from vllm_rbln.buckets import Buckets, Call


def test_shapes_are_powers_of_two_up_to_the_token_budget():
    b = Buckets(max_num_seqs=12, max_tokens=100)
    assert b.tokens == [1, 2, 4, 8, 16, 32, 64, 100]
    # Logits rows: one per request, at most max_num_seqs.
    assert b.shapes() == [Call(1, 1), Call(2, 2), Call(4, 4), Call(8, 8), Call(16, 12),
                          Call(32, 12), Call(64, 12), Call(100, 12)]


def test_a_step_is_one_call_of_all_its_tokens():
    b = Buckets(max_num_seqs=8, max_tokens=64)
    # Decodes, a chunk of a prompt and a prompt together: 1+5+1+1+40+1 tokens.
    assert b.plan([1, 5, 1, 1, 40, 1]) == Call(64, 8)
    assert b.plan([1]) == Call(1, 1)
    assert b.plan([1, 1, 1]) == Call(4, 4)
    assert b.plan([2]) == Call(2, 2)
    assert b.plan([64]) == Call(64, 8)


def test_a_step_beyond_the_budget_is_an_error():
    b = Buckets(max_num_seqs=4, max_tokens=64)
    with pytest.raises(ValueError, match="a step of 65 tokens exceeds the largest bucket 64"):
        b.plan([60, 5])
    with pytest.raises(ValueError, match="a step of 5 requests exceeds max_num_seqs=4"):
        b.plan([1] * 5)


def test_limits_below_the_first_power_are_kept():
    assert Buckets(max_num_seqs=1, max_tokens=3).shapes() == [Call(1, 1), Call(2, 1), Call(3, 1)]
    with pytest.raises(ValueError, match="must be positive"):
        Buckets(max_num_seqs=0, max_tokens=8)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
