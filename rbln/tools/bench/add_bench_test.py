"""Smoke test: the benchmark runs and checks its results (no timing asserted)."""

import add_bench


def test_bench_runs(capsys):
    add_bench.main(["--iters", "2", "--sizes", "4096"])
    out = capsys.readouterr().out
    assert "rbln/cpu" in out
    assert out.count("\n") >= 4


def test_shape_sizes(capsys):
    # "RxC" is that shape: issue 17's 128x128 add is 16384 elements.
    add_bench.main(["--iters", "2", "--sizes", "128x128"])
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[2:]]
    assert [(r[0], r[1]) for r in rows] == [("float16", "16384"), ("bfloat16", "16384")]


if __name__ == "__main__":
    import sys

    import pytest

    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
