"""Bucket shapes and how a scheduler step is cut into calls (buckets.py)."""
# spec: J2

import sys

import pytest

from vllm_rbln.buckets import Buckets, Call, order


def test_shapes_are_powers_of_two_up_to_the_limits():
    b = Buckets(max_num_seqs=12, max_prefill=100, table_blocks=24, min_prefill=16)
    assert b.decode == [1, 2, 4, 8, 12]
    assert b.prefill == [16, 32, 64, 100]
    assert b.decode_tables == [4, 8, 16, 24]
    assert b.shapes() == [(d, 1, nb) for d in (1, 2, 4, 8, 12) for nb in (4, 8, 16, 24)] + [
        (1, 16, 24), (1, 32, 24), (1, 64, 24), (1, 100, 24)]


def test_decodes_share_one_call_and_prefills_run_alone():
    b = Buckets(max_num_seqs=8, max_prefill=64, table_blocks=32)
    # Decodes read the context bucket of their longest context; prefills
    # the whole table.
    assert b.plan([1, 5, 1, 1, 64, 1], [3, 2, 9, 1, 4, 2]) == [
        Call(4, 1, (0, 2, 3, 5), 16),
        Call(1, 16, (1,), 32),
        Call(1, 64, (4,), 32),
    ]
    assert b.plan([1], [1]) == [Call(1, 1, (0,), 4)]
    assert b.plan([1], [32]) == [Call(1, 1, (0,), 32)]
    assert b.plan([2], [1]) == [Call(1, 16, (0,), 32)]


def test_more_decodes_than_the_largest_batch_take_several_calls():
    b = Buckets(max_num_seqs=2, max_prefill=16, table_blocks=8)
    assert b.plan([1, 1, 1], [1, 6, 2]) == [Call(2, 1, (0, 1), 8), Call(1, 1, (2,), 4)]


def test_a_longer_chunk_or_context_than_the_largest_bucket_is_an_error():
    b = Buckets(max_num_seqs=4, max_prefill=64, table_blocks=8)
    with pytest.raises(ValueError, match="prefill chunk of 65 exceeds the largest bucket 64"):
        b.plan([65], [5])
    with pytest.raises(ValueError, match="context of blocks 9 exceeds the largest bucket 8"):
        b.plan([1], [9])


def test_limits_below_the_first_power_are_kept():
    assert Buckets(max_num_seqs=1, max_prefill=8, table_blocks=2).shapes() == [
        (1, 1, 2), (1, 8, 2)]
    with pytest.raises(ValueError, match="must be positive"):
        Buckets(max_num_seqs=0, max_prefill=8, table_blocks=2)


def test_a_call_filling_a_block_runs_before_the_calls_reading_it():
    # Request 0 hits block 7, which request 2 fills in the same step (vLLM
    # cached it when it scheduled request 2); request 1 decodes on its own.
    calls = [Call(1, 16, (0,), 4), Call(1, 1, (1,), 4), Call(1, 32, (2,), 4)]
    writes = [{9}, {4}, {7, 8}]
    reads = [{7}, {3, 4}, set()]
    assert order(calls, writes, reads) == [calls[1], calls[2], calls[0]]
    # Without shared blocks the plan's order stays.
    assert order(calls, [{9}, {4}, {8}], [set(), {3}, set()]) == calls


def test_calls_that_fill_each_others_blocks_are_an_error():
    calls = [Call(1, 16, (0,), 4), Call(1, 16, (1,), 4)]
    with pytest.raises(RuntimeError, match="a cycle"):
        order(calls, [{1}, {2}], [{2}, {1}])


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
