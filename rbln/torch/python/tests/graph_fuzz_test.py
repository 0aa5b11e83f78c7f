"""The compiler's differential fuzzer, bounded and with a fixed seed
(issue 15 item 4): random programs compiled on rbln vs ATen on the CPU
(`torch_rbln.testing.graph_fuzz`). A longer run is one command:

  TORCH_RBLN_DISABLE_FALLBACK=compile_error python -m torch_rbln.testing.graph_fuzz --seed 2 --graphs 2000
"""
# spec: J1, P1, P2, P3

import os

os.environ["TORCH_RBLN_DISABLE_FALLBACK"] = "compile_error"

import io  # noqa: E402
import sys  # noqa: E402
import unittest  # noqa: E402

from torch_rbln.testing import graph_fuzz  # noqa: E402

SEED = int(os.environ.get("RBLN_FUZZ_SEED", "1"))
GRAPHS = int(os.environ.get("RBLN_FUZZ_GRAPHS", "60"))


class GraphFuzzTest(unittest.TestCase):
    def test_random_programs_match_the_cpu(self):
        log = io.StringIO()
        counts, failures = graph_fuzz.fuzz(SEED, GRAPHS, log=log)
        sys.stderr.write(log.getvalue())
        print(f"seed {SEED}, {GRAPHS} programs: {counts}", file=sys.stderr)
        self.assertFalse(failures, f"{len(failures)} programs differ from the CPU:\n" +
                         "\n".join(f"{p.reproducer()}\n  -> {m}" for p, m in failures))
        # Programs the compiler cannot take yet are skipped; most must run.
        self.assertGreaterEqual(counts["ok"], 0.8 * GRAPHS, f"too few programs ran: {counts}")

    def test_generator_is_deterministic(self):
        self.assertEqual(graph_fuzz.generate(7).source, graph_fuzz.generate(7).source)
        self.assertNotEqual(graph_fuzz.generate(7).source, graph_fuzz.generate(8).source)


if __name__ == "__main__":
    unittest.main()
