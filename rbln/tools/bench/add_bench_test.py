"""Smoke test: the benchmark runs and checks its results (no timing asserted)."""

import add_bench


def test_bench_runs(capsys):
    add_bench.main(["--iters", "2", "--sizes", "4096"])
    out = capsys.readouterr().out
    assert "rbln/cpu" in out
    assert out.count("\n") >= 4


if __name__ == "__main__":
    import sys

    import pytest

    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
