"""Model suite, eager mode: each transformers model's float16 forward on rbln
equals the float32 CPU forward (same float16-rounded weights) within float16
tolerance, and tied weights stay tied on `.to("rbln")`."""
# spec: G1, B4, D8

import sys

import pytest
import torch
import transformers

import model_zoo
from suite_util import (DEV, Results, ResultsPlugin, assert_close_fp16, assert_still_tied,
                        best_of, blocked_on_missing_kernels, counters, fallback_ops, logits,
                        tied_groups, timed, to_device)

transformers.logging.set_verbosity_error()
RESULTS = Results(model_zoo.EAGER, ["first_s", "warm_ms", "cpu_ms", "rbln_over_cpu",
                                    "max_abs_err", "cpu_fallback_ops"])


@pytest.mark.parametrize("spec", model_zoo.params(model_zoo.EAGER))
def test_eager_forward_matches_cpu(spec):
    spec.check_blockers(model_zoo.EAGER)
    model = spec.make()
    inputs = spec.example()
    with torch.no_grad():
        want = logits(model(**inputs))
        cpu_ms = best_of(lambda: model(**inputs)) * 1e3
    groups = tied_groups(model)
    dev = model.half().to(DEV)
    assert_still_tied(dev, groups)
    dev_inputs = to_device(inputs)
    c0 = counters()
    with torch.no_grad():
        out, first = timed(lambda: blocked_on_missing_kernels(lambda: logits(dev(**dev_inputs))))
        c1 = counters()
        warm = best_of(lambda: dev(**dev_inputs))
    assert out.device == torch.device(DEV) and out.dtype == torch.float16
    assert_close_fp16(out, want, f"{spec.name} logits")
    RESULTS.add(spec.name, first_s=first, warm_ms=warm * 1e3, cpu_ms=cpu_ms,
                rbln_over_cpu=warm * 1e3 / cpu_ms,
                max_abs_err=(out.cpu().float() - want).abs().max().item(),
                cpu_fallback_ops=fallback_ops(c0, c1))


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"], plugins=[ResultsPlugin()]))
