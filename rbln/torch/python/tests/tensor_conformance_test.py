"""rbln tensors behave like CPU tensors outside the kernels: printing,
torch.save/torch.load with every map_location form, the generated methods,
autograd through compiled ops and through the CPU fallback, and errors."""
# spec: G1, I1, I3, D4

import io
import re
import sys

import pytest
import torch
from torch import nn

SUFFIX = re.compile(r",\s*device='rbln:0'")


def without_device(text):
    """`text` without the device suffix, whitespace collapsed (the suffix
    makes the line that carries the dtype wrap differently)."""
    return " ".join(SUFFIX.sub("", text).split())


def reprs():
    gen = torch.Generator().manual_seed(0)
    return {
        "float16 2-D": torch.tensor([[1.5, -2.0], [3.25, 4.0]], dtype=torch.float16),
        "bfloat16": torch.randn(3, 5, generator=gen).bfloat16(),
        "float32 summarized": torch.randn(100, 100, generator=gen),
        "int64": torch.arange(7),
        "bool 0-dim": torch.tensor(True),
        "empty": torch.empty(0, 3, dtype=torch.float16),
        "non-contiguous": torch.randn(4, 6, generator=gen).half().t(),
    }


@pytest.mark.parametrize("name", list(reprs()))
def test_repr_matches_cpu_apart_from_the_device(name):
    cpu = reprs()[name]
    dev = cpu.to("rbln")
    if name == "non-contiguous":
        dev = cpu.t().contiguous().to("rbln").t()
    text = repr(dev)
    assert SUFFIX.search(text), text
    assert without_device(text) == " ".join(repr(cpu).split())
    assert text.replace("device='rbln:0'", "") != text and str(dev) == text


def test_repr_of_a_tensor_that_requires_grad():
    cpu = torch.ones(2, 2, dtype=torch.float16, requires_grad=True)
    dev = cpu.detach().to("rbln").requires_grad_()
    assert without_device(repr(dev)) == " ".join(repr(cpu).split())


def printed_cases():
    """rbln tensors whose text printing must not change: dtypes the printer
    formats differently, 0-dim, empty, summarized, views, autograd."""
    gen = torch.Generator().manual_seed(4)
    cases = {
        "float16": torch.tensor([[1.5, -2.0], [3.25, 4.0]], dtype=torch.float16),
        "float16 wide range": torch.tensor([1e-4, 3e4, 1.0], dtype=torch.float16),
        "float16 large values": torch.randn(3, 7, generator=gen).half() * 1000,
        "bfloat16": torch.randn(3, 5, generator=gen).bfloat16(),
        "float32": torch.randn(4, 3, generator=gen),
        "float32 nan/inf": torch.tensor([1.0, float("nan"), float("inf"), -float("inf")]),
        "float32 summarized": torch.randn(100, 100, generator=gen),
        "float16 summarized 1-D": torch.arange(2000, dtype=torch.float16),
        "int64": torch.arange(7),
        "int32": torch.arange(12, dtype=torch.int32).reshape(3, 4),
        "int64 summarized": torch.arange(5000).reshape(50, 100),
        "int8": torch.tensor([-3, 4], dtype=torch.int8),
        "bool": torch.tensor([True, False, True]),
        "bool 0-dim": torch.tensor(True),
        "float16 0-dim": torch.tensor(2.5, dtype=torch.float16),
        "empty float16": torch.empty(0, 3, dtype=torch.float16),
        "empty float32": torch.empty(0),
    }
    out = {name: t.to("rbln") for name, t in cases.items()}
    base = torch.randn(4, 6, generator=gen).half().to("rbln")
    out["view transposed"] = base.t()
    out["view sliced"] = base[1:3, ::2]
    out["view expanded"] = base[0].expand(3, 6)
    leaf = torch.ones(2, 2, dtype=torch.float16).to("rbln").requires_grad_()
    out["requires_grad"] = leaf
    out["grad_fn"] = leaf * 2
    device_latest = torch.ones(4, 64, dtype=torch.float16, device="rbln")
    out["device-latest"] = device_latest + device_latest
    return out


def with_pytorchs_own_printer(fn):
    """Runs fn() with PyTorch's unwrapped tensor formatter (which computes on
    the rbln tensor itself): the text torch_rbln must keep."""
    wrapped = torch._tensor_str._tensor_str
    torch._tensor_str._tensor_str = wrapped.__wrapped__
    try:
        return fn()
    finally:
        torch._tensor_str._tensor_str = wrapped


@pytest.mark.parametrize("name", list(printed_cases()))
def test_printing_formats_a_cpu_copy_with_the_same_text(name):
    # spec: D4 -- the text is exactly what PyTorch's printer gives when it
    # computes on the rbln tensor (device suffix, dtype, wrapping, summary).
    t = printed_cases()[name]
    expected = with_pytorchs_own_printer(lambda: (repr(t), str(t)))
    assert (repr(t), str(t)) == expected
    assert "device='rbln:0'" in expected[0]


def test_printing_runs_no_device_op():
    # spec: D4, K3 -- printing compiles nothing, runs no program, bounces
    # nothing through the host; host-latest data crosses nowhere, and
    # device-latest data costs one D2H (the CPU copy being formatted).
    host_latest = torch.randn(64, 64).half().to("rbln")
    device_latest = torch.ones(64, 64, dtype=torch.float16, device="rbln")
    device_latest = device_latest + device_latest
    watched = ("compiler/compiles", "runtime/executions", "runtime/host_bounce_copies",
               "dispatch/cpu_fallback", "runtime/dma_h2d_copies", "runtime/dma_d2h_copies")

    def delta(fn):
        before = torch.rbln.counters()
        fn()
        after = torch.rbln.counters()
        return {k: after.get(k, 0) - before.get(k, 0) for k in watched}

    nothing = dict.fromkeys(watched, 0)
    assert delta(lambda: repr(host_latest)) == nothing
    assert torch.rbln._storage_info(host_latest)["state"] == "host-latest"
    assert delta(lambda: repr(device_latest[:, :8])) == dict(nothing, **{"runtime/dma_d2h_copies": 1})
    assert delta(lambda: str(device_latest)) == nothing  # in sync now
    assert delta(lambda: print(torch.tensor(1.5, dtype=torch.bfloat16).to("rbln"))) == nothing


def saved(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf


@pytest.mark.parametrize(
    "map_location, expected, expected_for_cpu_tensor",
    [
        (None, "rbln", "cpu"),
        ("cpu", "cpu", "cpu"),
        ("rbln", "rbln", "rbln"),
        (torch.device("rbln:0"), "rbln", "rbln"),
        ({"rbln:0": "cpu"}, "cpu", "cpu"),
        (lambda storage, location: storage, "cpu", "cpu"),
        (lambda storage, location: storage.rbln(), "rbln", "rbln"),
    ],
    ids=["none", "cpu", "rbln", "device", "dict", "function", "function-to-rbln"],
)
def test_save_load_round_trip(map_location, expected, expected_for_cpu_tensor):
    x = torch.randn(8, 64).half()
    base = x.to("rbln")
    state = {"x": base, "view": base[2:4], "cpu": x}
    buf = saved(state)
    buf.seek(0)
    loaded = torch.load(buf, map_location=map_location)
    assert loaded["x"].device.type == expected
    assert loaded["x"].dtype == torch.float16
    assert torch.equal(loaded["x"].cpu(), x)
    assert torch.equal(loaded["view"].cpu(), x[2:4])
    # Views keep sharing storage with their base across the round trip.
    assert loaded["view"].storage_offset() == 2 * 64
    assert loaded["view"].untyped_storage().data_ptr() == loaded["x"].untyped_storage().data_ptr()
    assert loaded["cpu"].device.type == expected_for_cpu_tensor
    assert torch.equal(loaded["cpu"].cpu(), x)


def test_module_state_dict_round_trip():
    torch.manual_seed(0)
    model = nn.Linear(64, 64).half().to("rbln")
    buf = saved(model.state_dict())
    buf.seek(0)
    clone = nn.Linear(64, 64).half().to("rbln")
    clone.load_state_dict(torch.load(buf))
    x = torch.randn(4, 64).half().to("rbln")
    assert torch.equal(model(x).cpu(), clone(x).cpu())


def test_generated_methods():
    # torch.utils.generate_methods_for_privateuse1_backend: .rbln(), is_rbln.
    cpu = torch.ones(3)
    dev = cpu.rbln()
    assert dev.device == torch.device("rbln:0") and dev.is_rbln and not cpu.is_rbln
    assert cpu.rbln(0).is_rbln
    assert torch.equal(dev.cpu(), cpu)
    model = nn.Linear(4, 4).rbln()
    assert all(p.is_rbln for p in model.parameters())
    assert cpu.untyped_storage().rbln().device.type == "rbln"


def mlp(dtype, seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 64)).to(dtype)


def gradients(model, x, target):
    model.zero_grad()
    nn.functional.mse_loss(model(x).float(), target).backward()
    return {n: p.grad for n, p in model.named_parameters()}


def test_autograd_through_compiled_ops_float16():
    # Linear (addmm), relu and their backwards (mm, threshold_backward on
    # its fast host path) on float16: gradients equal the CPU's within fp16
    # tolerance.
    cpu_model = mlp(torch.float16)
    dev_model = mlp(torch.float16).to("rbln")
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(64, 128, generator=gen).half()
    target = torch.randn(64, 64, generator=gen)
    before = torch.rbln.counters().get("dispatch/compiled_runs", 0)
    got = gradients(dev_model, x.to("rbln"), target.to("rbln"))
    assert torch.rbln.counters().get("dispatch/compiled_runs", 0) > before
    expected = gradients(cpu_model, x, target)
    for name in expected:
        assert got[name].device.type == "rbln"
        torch.testing.assert_close(got[name].cpu(), expected[name], atol=2e-3, rtol=2e-2, msg=name)


def test_autograd_through_the_fallback_float32():
    # float32 fails the dtype check: every op runs on the CPU fallback, and
    # the gradients are the CPU's.
    cpu_model = mlp(torch.float32)
    dev_model = mlp(torch.float32).to("rbln")
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(16, 128, generator=gen)
    target = torch.randn(16, 64, generator=gen)
    before = torch.rbln.counters().get("dispatch/cpu_fallback", 0)
    got = gradients(dev_model, x.to("rbln"), target.to("rbln"))
    assert torch.rbln.counters().get("dispatch/cpu_fallback", 0) > before
    expected = gradients(cpu_model, x, target)
    for name in expected:
        torch.testing.assert_close(got[name].cpu(), expected[name], atol=1e-5, rtol=1e-5, msg=name)


def test_training_steps_match_cpu():
    cpu_model, dev_model = mlp(torch.float32), mlp(torch.float32).to("rbln")
    opts = [torch.optim.Adam(m.parameters(), lr=1e-2) for m in (cpu_model, dev_model)]
    gen = torch.Generator().manual_seed(3)
    for _ in range(3):
        x, target = torch.randn(8, 128, generator=gen), torch.randn(8, 64, generator=gen)
        for model, opt, dev in zip((cpu_model, dev_model), opts, ("cpu", "rbln")):
            opt.zero_grad()
            nn.functional.mse_loss(model(x.to(dev)), target.to(dev)).backward()
            opt.step()
    for (name, a), b in zip(dev_model.named_parameters(), cpu_model.parameters()):
        torch.testing.assert_close(a.detach().cpu(), b.detach(), atol=1e-5, rtol=1e-5, msg=name)


ERRORS = {
    # Ops the CPU does not support for the dtype.
    "cholesky float16": lambda d: torch.linalg.cholesky(torch.eye(64, dtype=torch.float16, device=d)),
    # Invalid inputs of compiled ops.
    "mm shape mismatch": lambda d: torch.ones(64, 64, dtype=torch.float16, device=d)
    @ torch.ones(128, 64, dtype=torch.float16, device=d),
    "add broadcast mismatch": lambda d: torch.ones(64, 64, dtype=torch.float16, device=d)
    + torch.ones(128, 64, dtype=torch.float16, device=d),
    "index_select out of range": lambda d: torch.ones(64, 64, dtype=torch.float16, device=d).index_select(
        0, torch.tensor([70], device=d)),
    "cat dim out of range": lambda d: torch.cat([torch.ones(2, 64, device=d)] * 2, dim=3),
    "softmax bad dim": lambda d: torch.ones(64, 64, dtype=torch.float16, device=d).softmax(dim=2),
    # Invalid inputs of a fallback op and of a pinned op.
    "sin on bad out dtype": lambda d: torch.sin(torch.ones(4, device=d), out=torch.ones(4, dtype=torch.long, device=d)),
    "tril of 1-D": lambda d: torch.tril(torch.ones(4, device=d)),
}


@pytest.mark.parametrize("name", list(ERRORS))
def test_invalid_calls_raise_the_cpu_error_type(name):
    # spec: I1
    fn = ERRORS[name]
    with pytest.raises(Exception) as cpu_error:
        fn("cpu")
    with pytest.raises(Exception) as rbln_error:
        fn("rbln")
    assert type(rbln_error.value) is type(cpu_error.value), (cpu_error.value, rbln_error.value)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
