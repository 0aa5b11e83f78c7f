"""Helpers of the model suite: device copies of models and inputs, output
comparison with float16 tolerances, blocked-mode detection, timings and the
per-mode results table."""

import collections
import json
import os
import time

import torch

from blockers import Blocked

DEV = "rbln:0"


def counters():
    return torch.rbln.counters()


def delta(before, after, key):
    return after.get(key, 0) - before.get(key, 0)


def to_device(inputs, dtype=torch.float16, device=DEV):
    """Floating inputs in `dtype`, everything on `device`."""
    return {k: (v.to(dtype) if v.is_floating_point() else v).to(device) for k, v in inputs.items()}


def logits(output):
    return output.logits


def tied_groups(model):
    """Names of parameters that are one Parameter object (tied weights),
    as groups of two or more."""
    by_id = collections.defaultdict(list)
    for name, p in model.named_parameters(remove_duplicate=False):
        by_id[id(p)].append(name)
    return [names for names in by_id.values() if len(names) > 1]


def assert_still_tied(model, groups):
    """spec: B4 -- each tied group is still one Parameter with one storage."""
    params = dict(model.named_parameters(remove_duplicate=False))
    for names in groups:
        first = params[names[0]]
        for name in names[1:]:
            assert params[name] is first, f"{name} is no longer {names[0]} after .to()"
        assert first.untyped_storage().data_ptr() == params[names[-1]].untyped_storage().data_ptr()


def assert_close_fp16(got, want, what="output"):
    """float16 results against the float32 CPU reference: elementwise within
    1% of the reference's largest magnitude (plus 1% relative)."""
    got = got.detach().cpu().float()
    want = want.detach().cpu().float()
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    scale = max(1.0, want.abs().max().item())
    torch.testing.assert_close(got, want, atol=1e-2 * scale, rtol=1e-2, msg=lambda m: f"{what}: {m}")


def blocked_on_missing_kernels(fn):
    """Runs fn(); failures that mean "the rbln compiler or an eager kernel
    lacks an op" (a compile failure with the compile_error fallback
    disabled, NotImplementedError of an op without an rbln kernel) become
    `Blocked`, which the blocked (model, mode)s expect. Anything else
    propagates as a real failure."""
    from torch_rbln import _dynamo as rbln_dynamo

    failures_before = len(rbln_dynamo.compile_failures())
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 -- classified below
        text = f"{type(e).__name__}: {e}"
        if len(rbln_dynamo.compile_failures()) > failures_before:
            name, error = rbln_dynamo.compile_failures()[-1]
            raise Blocked(f"graph {name} does not compile: {type(error).__name__}: "
                          f"{str(error).splitlines()[0]}") from e
        if isinstance(e, NotImplementedError) and "not implemented" in str(e):
            raise Blocked(text.splitlines()[0]) from e
        raise


def fallback_ops(before, after):
    """"op xN, ..." of the ops that ran through the CPU fallback between two
    counter snapshots (dispatch/cpu_fallback/<op>)."""
    prefix = "dispatch/cpu_fallback/"
    ops = {k[len(prefix):]: after[k] - before.get(k, 0) for k in after
           if k.startswith(prefix) and after[k] != before.get(k, 0)}
    return ", ".join(f"{op.replace('aten::', '')} x{n}" for op, n in sorted(ops.items()))


def timed(fn, sync=True):
    """(result, seconds) of fn(), waiting for the device."""
    start = time.perf_counter()
    out = fn()
    if sync:
        torch.rbln.synchronize()
    return out, time.perf_counter() - start


def best_of(fn, runs=3):
    """The fastest of `runs` calls of fn() (the machine is shared)."""
    return min(timed(fn)[1] for _ in range(runs))


_ALL_RESULTS = []


class Results:
    """Per-mode measurements: a table in pytest's terminal summary (through
    `ResultsPlugin`, which the test files' __main__ installs) and
    $TEST_UNDECLARED_OUTPUTS_DIR/models_<mode>.json."""

    def __init__(self, mode, columns):
        self.mode = mode
        self.columns = columns
        self.rows = {}
        _ALL_RESULTS.append(self)

    def add(self, model, **values):
        self.rows[model] = values

    def table(self) -> str:
        header = ["model"] + list(self.columns)
        lines = [" | ".join(header), " | ".join("---" for _ in header)]
        for model, values in self.rows.items():
            cells = [model]
            for c in self.columns:
                v = values.get(c, "")
                cells.append(f"{v:.4g}" if isinstance(v, float) else str(v))
            lines.append(" | ".join(cells))
        return "\n".join(lines)

    def write(self, write_line=print):
        if not self.rows:
            return
        write_line(f"== model suite, mode {self.mode} (timings on a shared machine: direction only)")
        for line in self.table().split("\n"):
            write_line(line)
        out_dir = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR")
        if out_dir:
            with open(os.path.join(out_dir, f"models_{self.mode}.json"), "w") as f:
                json.dump(self.rows, f, indent=1, sort_keys=True)


class ResultsPlugin:
    """Prints every Results table at the end of the pytest run (captured
    output of passing tests is not shown)."""

    def pytest_terminal_summary(self, terminalreporter):
        for results in _ALL_RESULTS:
            results.write(terminalreporter.write_line)
