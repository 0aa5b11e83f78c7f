"""What the model step calls cost and whether they stayed on the device:
per call, the backend's counters before and after (torch.rbln.counters())
and Dynamo's graph compiles. After warm-up a compile or a CPU fallback is a
warning in the log (the serving tests look for none) and is counted in
`snapshot()`, which the worker returns to `LLM.collective_rpc("rbln_stats")`.
With VLLM_RBLN_EXPLAIN=1 each call after warm-up also runs under
torch.rbln.explain(): its verdicts are counted and the report of the first
call that is not clean is logged.
"""

import contextlib
import logging
import os
import time

import torch

logger = logging.getLogger("vllm.rbln")

# Counters that must stay still in a warm step (torch.rbln.explain() names them).
COMPILES = ("graph/compiles", "compiler/compiles", "dispatch/recompile", "dynamo/graphs")
FALLBACKS = ("dispatch/cpu_fallback", "graph/cpu_fallback", "graph/host_ops",
             "graph/compile_errors")


def _counters() -> dict:
    values = torch.rbln.counters()
    out = {k: values.get(k, 0) for k in COMPILES + FALLBACKS}
    out["dynamo/graphs"] = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    return out


class StepStats:
    def __init__(self):
        self.warm = False
        self.calls = {}  # buckets.Call -> calls after warm-up
        self.seconds = {}  # buckets.Call -> seconds in those calls
        self.after_warm_up = dict.fromkeys(COMPILES + FALLBACKS, 0)
        self.warm_up = dict.fromkeys(COMPILES + FALLBACKS, 0)
        self.steps = 0  # After warm-up; one call each (buckets.py).
        # Steps whose call held decode tokens and prompt tokens together.
        self.mixed_steps = 0
        self.explain = os.environ.get("VLLM_RBLN_EXPLAIN", "0") == "1"
        self.verdicts = {}  # explain() verdict -> calls
        # Host copies of the weights freed after warm-up (model_runner).
        self.host_copies_freed_bytes = 0

    def warmed_up(self) -> None:
        self.warm = True

    def count_step(self, mixed: bool) -> None:
        self.steps += 1
        self.mixed_steps += mixed

    @contextlib.contextmanager
    def call(self, shape, warm_up: bool = False):
        region = None
        if self.explain and self.warm and not warm_up:
            region = torch.rbln.explain()
            region.__enter__()
        before = _counters()
        start = time.perf_counter()
        yield
        elapsed = time.perf_counter() - start
        if region is not None:
            region.__exit__(None, None, None)
            verdict = region.verdict()
            if verdict != "clean" and not any(v != "clean" for v in self.verdicts):
                logger.warning("rbln: step shape %s is not clean:\n%s", shape, region.report())
            self.verdicts[verdict] = self.verdicts.get(verdict, 0) + 1
        after = _counters()
        delta = {k: after[k] - before[k] for k in before}
        total = self.after_warm_up if self.warm and not warm_up else self.warm_up
        for k, v in delta.items():
            total[k] += v
        if self.warm and not warm_up:
            self.calls[shape] = self.calls.get(shape, 0) + 1
            self.seconds[shape] = self.seconds.get(shape, 0.0) + elapsed
            compiled = {k: delta[k] for k in COMPILES if delta[k]}
            if compiled:
                logger.warning("rbln: step shape %s compiled after warm-up: %s", shape, compiled)
        fallbacks = {k: delta[k] for k in FALLBACKS if delta[k]}
        if fallbacks:
            logger.warning("rbln: step shape %s ran work on the CPU: %s", shape, fallbacks)

    def snapshot(self) -> dict:
        return {
            "warm": self.warm,
            "warm_up": dict(self.warm_up),
            "after_warm_up": dict(self.after_warm_up),
            "steps": self.steps,
            # Work items the paged-attention kernel ran (request x kv head
            # per layer and call): zero would mean the compiler's slow
            # element-wise lowering of the op ran instead.
            "paged_attention_items": torch.rbln.counters().get(
                "compiler/paged_attention/items", 0),
            "mixed_steps": self.mixed_steps,
            "host_copies_freed_bytes": self.host_copies_freed_bytes,
            "explain_verdicts": dict(self.verdicts),
            "calls": {_name(shape): n for shape, n in sorted(self.calls.items())},
            "ms_per_call": {_name(shape): 1e3 * self.seconds[shape] / n
                            for shape, n in sorted(self.calls.items())},
        }


def _name(call) -> str:
    """"T/R": a call of T token rows and R logits rows (buckets.Call)."""
    return f"{call.tokens}/{call.rows}"
