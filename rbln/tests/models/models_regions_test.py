"""Model suite with the repeated layers marked as nested compile regions
(torch.rbln.mark_repeated_layers): each float16 model compiled for rbln
gives the float32 CPU output, as in models_compile_test, with the regions'
calls inlined by the backend. Models whose layers Dynamo cannot capture
whole as a region (PyTorch's limits, named in the marks) are strict
expected failures, so a PyTorch that lifts them turns them red."""
# spec: J1, J7

import os
import sys

os.environ.setdefault("TORCH_RBLN_DISABLE_FALLBACK", "compile_error")

import pytest  # noqa: E402
import torch  # noqa: E402
import torch._dynamo  # noqa: E402
import transformers  # noqa: E402

import model_zoo  # noqa: E402
from suite_util import assert_close_fp16, logits, to_device  # noqa: E402

transformers.logging.set_verbosity_error()

# PyTorch 2.13 / transformers 5.24: what Dynamo says when the layer is a region.
NOT_CAPTURED = {
    "gptj": "a graph break inside the layer (UncapturedHigherOrderOpError)",
    "t5": "a graph break inside the layer (UncapturedHigherOrderOpError)",
    "mistral": "the layer returns an alias of an intermediate (InternalTorchDynamoError)",
}


def _params():
    out = []
    for p in model_zoo.params(model_zoo.COMPILED):
        (spec,) = p.values
        marks = list(p.marks)
        if spec.name in NOT_CAPTURED and not marks:
            marks.append(pytest.mark.xfail(strict=True, reason=NOT_CAPTURED[spec.name]))
        out.append(pytest.param(spec, id=spec.name, marks=marks))
    return out


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("spec", _params())
def test_marked_layers_compile_to_the_cpu_output(spec):
    spec.check_blockers(model_zoo.COMPILED)
    model = spec.make()
    inputs = spec.example()
    with torch.no_grad():
        want = logits(model(**inputs))
    dev = model.half().to("rbln")
    assert torch.rbln.mark_repeated_layers(dev) >= 2
    f = torch.compile(dev, backend="rbln", dynamic=False)
    with torch.no_grad():
        out = logits(f(**to_device(inputs)))
    assert_close_fp16(out, want, f"{spec.name} logits (marked layers)")
    # Dynamo inlines regions it traced for one call only (no reuse: e.g.
    # ResNet's stages differ in shape); the others reach the backend.
    assert all(g.inspect()["host_ops"] == [] for g in torch.rbln.compiled_programs())


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
