"""Smoke test: the benchmark runs and prints one row per dtype; the fused
AdamW step it measures runs no op on the CPU (no timing asserted)."""
# spec: G1

import optim_bench


def test_bench_runs(capsys):
    optim_bench.main(["--layers", "1", "--hidden", "64", "--steps", "1", "--only", "AdamW fused"])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("AdamW fused")]
    assert len(rows) == 2, rows
    assert all(row.split()[3] == "0" for row in rows), rows  # cpu_fallback/step


if __name__ == "__main__":
    import sys

    import pytest

    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
