"""Smoke test of the model benchmark (no timing asserted): a zoo model's warm
variants run and compare with the CPU, a cold first call in a fresh process
reports the per-phase compile breakdown, and a model that does not compile
is reported with its reason instead of crashing the run."""

import model_bench


def test_warm_variants_of_a_zoo_model():
    results = model_bench.warm("zoo:bloom", 0, quick=True, iters=1)
    assert set(results) == set(model_bench.VARIANTS), results
    for label in ("rbln fp16", "cpu eager fp32"):
        assert results[label].get("ms", 0) > 0, results
    assert "max |diff| vs cpu fp32" in results["rbln fp16"]["note"], results


def test_first_call_reports_phases_and_segments():
    r = model_bench.first_call("opt", "rbln fp16", 4, quick=True, timeout=600)
    assert "error" not in r, r
    assert r["first_call_ms"] > 0, r
    assert r["phases"]["compile"] > 0 and r["phases"]["dynamo_capture"] > 0, r
    # Four identical decoder layers: fewer distinct segments than segments.
    assert r["compiler"]["unique_segments"] < r["compiler"]["segments"], r


def test_unknown_model_is_an_error_naming_the_choices():
    try:
        model_bench.build("zoo:nope", 0, quick=True)
    except ValueError as e:
        assert "zoo:gpt2" in str(e)
    else:
        raise AssertionError("no error for an unknown model")


if __name__ == "__main__":
    import sys

    import pytest

    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
