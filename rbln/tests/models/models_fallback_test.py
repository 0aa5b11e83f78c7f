"""Model suite, default-settings fallback: a transformers model on rbln whose
graph has an op the rbln compiler lacks (a custom op, so that the test keeps
its meaning as the compiler grows) compiles with default settings and runs
on the CPU with a warning, not an exception -- the issue's
"L['self']._modules['transformer']._modules['wte']._parameters['weight'] is
not an argument and stays on rbln:0" case. Parameters and buffers are read
through CPU copies kept across calls, and the fallback is an explain()
signal."""
# spec: I2, I3, I6, J6, N3

import sys
import warnings

import pytest
import torch
import torch._dynamo
import transformers

import model_zoo
from suite_util import DEV, assert_close_fp16, counters, delta, logits, to_device
from torch_rbln import _dynamo as rbln_dynamo

transformers.logging.set_verbosity_error()


@torch.library.custom_op("rbln_models_test::twice", mutates_args=())
def twice(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@twice.register_fake
def _(x):
    return torch.empty_like(x)


class ThroughCustomOp(torch.nn.Module):
    """`inner`, then x * 2 by the custom op and * 0.5 (exact in float16)."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return twice(self.inner(x)) * 0.5


def test_gpt2_with_an_op_the_compiler_lacks_runs_on_the_cpu_with_a_warning():
    spec = model_zoo.SPECS["gpt2"]
    model = spec.make()
    inputs = spec.example()
    with torch.no_grad():
        want = logits(model(**inputs))
    model.transformer.ln_f = ThroughCustomOp(model.transformer.ln_f)
    dev = model.half().to(DEV)
    assert dev.lm_head.weight is dev.transformer.wte.weight
    f = torch.compile(dev, backend="rbln", dynamic=False)
    dev_inputs = to_device(inputs)
    n_inputs = len(list(dev.parameters())) + len(list(dev.buffers()))
    torch._dynamo.reset()
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        c0 = counters()
        out = logits(f(**dev_inputs))
        c1 = counters()
        with torch.rbln.explain() as warm:
            again = logits(f(**dev_inputs))
        c2 = counters()
    assert out.device == torch.device(DEV)
    assert_close_fp16(out, want, "gpt2 logits through the compile_error fallback")
    assert torch.equal(again.cpu(), out.cpu())
    mine = [str(w.message) for w in caught if "compile_error fallback" in str(w.message)]
    assert len(mine) == 1 and "['twice']" in mine[0], mine
    ((name, error),) = rbln_dynamo.compile_failures()
    assert isinstance(error, NotImplementedError)
    assert delta(c0, c1, "graph/cpu_fallback") == 1 and delta(c0, c1, "graph/runs") == 0
    # Every parameter and buffer (the tied wte/lm_head once) is downloaded at
    # the first call and reused at the second.
    assert 0 < delta(c0, c1, "graph/host_copies/downloaded") <= n_inputs
    assert delta(c1, c2, "graph/host_copies/downloaded") == 0
    assert delta(c1, c2, "graph/host_copies/reused") == delta(c0, c1, "graph/host_copies/downloaded")
    d = warm.to_dict()
    assert d["signals"]["dispatch/cpu_fallback"]["why"] == {f"graph {name}: compile_error": 1}
    ids = dev_inputs["input_ids"]
    assert d["runtime"]["v2h"]["bytes"] == ids.numel() * ids.element_size()


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
