"""Eager convolutions on rbln: ATen's convolution reaches
convolution_overrideable / convolution_backward_overrideable on PrivateUse1,
which run as compiled kernels when the pre-dispatch checks pass and on the
CPU otherwise (the CPU has no kernel of the overrideable ops, so the fallback
calls the CPU's convolution). Forward and backward equal the CPU's."""
# spec: G1, H1, H3, I3

import sys

import pytest
import torch
import torch.nn.functional as F

import rbln_test_util

DEV = "rbln:0"
DTYPES = [torch.float16, torch.bfloat16, torch.float32]
TOL = {
    torch.float16: dict(atol=2e-2, rtol=2e-2),
    torch.bfloat16: dict(atol=8e-2, rtol=8e-2),
    torch.float32: dict(atol=1e-4, rtol=1e-4),
}

CONVS = [
    ("conv1d", (2, 4, 9), (6, 2, 3), dict(stride=2, padding=1, groups=2)),
    ("conv2d", (2, 3, 8, 7), (4, 3, 3, 2), dict(stride=(2, 1), padding=(1, 0), dilation=(1, 2))),
    ("conv2d", (1, 4, 6, 6), (4, 1, 3, 3), dict(padding="same", groups=4)),
    ("conv3d", (1, 2, 4, 5, 4), (3, 2, 2, 3, 2), dict(padding=1)),
    ("conv_transpose1d", (1, 4, 5), (4, 3, 3), dict(stride=2, padding=1, output_padding=1)),
    ("conv_transpose2d", (2, 4, 3, 4), (4, 2, 3, 2), dict(stride=2, groups=2)),
    ("conv_transpose3d", (1, 2, 2, 3, 2), (2, 3, 2, 2, 2), dict(stride=2)),
]


def counters_delta(fn):
    before = torch.rbln.counters()
    result = fn()
    after = torch.rbln.counters()
    return result, {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}


def forward_backward(fn, x, w, b, device):
    x, w, b = (t.detach().to(device).requires_grad_() for t in (x, w, b))
    out = fn(x, w, b)
    out.float().square().sum().backward()
    return [t.detach().cpu() for t in (out, x.grad, w.grad, b.grad)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CONVS, ids=[f"{c[0]}-{i}" for i, c in enumerate(CONVS)])
def test_convolution_forward_and_backward_equal_the_cpu(dtype, case):
    name, xs, ws, kwargs = case
    fn = getattr(F, name)
    torch.manual_seed(0)
    x, w = torch.randn(xs, dtype=dtype), torch.randn(ws, dtype=dtype)
    out_channels = ws[1] * kwargs.get("groups", 1) if "transpose" in name else ws[0]
    b = torch.randn(out_channels, dtype=dtype)
    call = lambda x, w, b: fn(x, w, b, **kwargs)  # noqa: E731
    expected = forward_backward(call, x, w, b, "cpu")
    got, d = counters_delta(lambda: forward_backward(call, x, w, b, DEV))
    # The kernel's last dim is not a multiple of 64: the wrapper's
    # alignment check sends both ops to the CPU (SPEC H3).
    assert d.get("dispatch/cpu_fallback/aten::convolution_overrideable") == 1, d
    assert d.get("dispatch/cpu_fallback/aten::convolution_backward_overrideable") == 1, d
    for e, g in zip(expected, got):
        torch.testing.assert_close(g, e, **TOL[dtype])


def test_no_bias_and_partial_gradients():
    # An input that needs no gradient: output_mask [False, True, True].
    torch.manual_seed(0)
    x, w = torch.randn(1, 2, 5, 5), torch.randn(3, 2, 3, 3)
    wd = w.to(DEV).requires_grad_()
    out = F.conv2d(x.to(DEV), wd, padding=1)
    out.sum().backward()
    wc = w.clone().requires_grad_()
    F.conv2d(x, wc, padding=1).sum().backward()
    torch.testing.assert_close(out.cpu(), F.conv2d(x, w, padding=1))
    torch.testing.assert_close(wd.grad.cpu(), wc.grad)


def test_small_cnn_trains_in_eager():
    torch.manual_seed(0)

    def make():
        torch.manual_seed(1)
        return torch.nn.Sequential(
            torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(4, 8, 3), torch.nn.ReLU(), torch.nn.Flatten(),
            torch.nn.Linear(8 * 2 * 2, 3))

    x, y = torch.randn(8, 1, 8, 8), torch.randint(0, 3, (8,))
    losses = {}
    for device in ("cpu", DEV):
        model = make().to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        history = []
        for _ in range(5):
            opt.zero_grad()
            loss = F.cross_entropy(model(x.to(device)), y.to(device))
            loss.backward()
            opt.step()
            history.append(loss.item())
        losses[device] = history
    assert losses[DEV][-1] < losses[DEV][0]
    torch.testing.assert_close(torch.tensor(losses[DEV]), torch.tensor(losses["cpu"]),
                               atol=1e-4, rtol=1e-4)


def test_compiled_kernel_when_the_checks_pass():
    # TORCH_RBLN_DEPLOY=ON skips the pre-dispatch checks (SPEC H2): both ops
    # run as compiled kernels, the second call from the warm cache.
    code = r"""
import torch, torch.nn.functional as F
torch.manual_seed(0)
cases = [
    (F.conv2d, (2, 3, 6, 7), (4, 3, 3, 2), dict(stride=(2, 1), padding=1)),
    (F.conv_transpose2d, (2, 3, 4, 5), (3, 4, 3, 2), dict(stride=2, padding=(1, 0))),
]
for dtype in (torch.float16, torch.bfloat16, torch.float32):
    tol = dict(atol=1e-4, rtol=1e-4) if dtype == torch.float32 else dict(atol=8e-2, rtol=8e-2)
    for fn, xs, ws, kwargs in cases:
        x, w, b = torch.randn(xs, dtype=dtype), torch.randn(ws, dtype=dtype), torch.randn(4, dtype=dtype)
        xc, wc, bc = (t.clone().requires_grad_() for t in (x, w, b))
        out = fn(xc, wc, bc, **kwargs)
        out.float().square().sum().backward()
        xd, wd, bd = (t.to("rbln").requires_grad_() for t in (x, w, b))
        before = torch.rbln.counters()
        outd = fn(xd, wd, bd, **kwargs)
        outd.float().square().sum().backward()
        after = torch.rbln.counters()
        d = {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}
        assert "dispatch/cpu_fallback/aten::convolution_overrideable" not in d, d
        assert "dispatch/cpu_fallback/aten::convolution_backward_overrideable" not in d, d
        for e, g in zip((out, xc.grad, wc.grad, bc.grad), (outd, xd.grad, wd.grad, bd.grad)):
            torch.testing.assert_close(g.cpu(), e.detach(), **tol)
x, w = torch.randn(1, 2, 5, 5), torch.randn(3, 2, 3, 3)
xd, wd = x.to("rbln"), w.to("rbln")
F.conv2d(xd, wd)
before = torch.rbln.counters()
F.conv2d(xd, wd)
after = torch.rbln.counters()
assert after.get("dispatch/warm_hits", 0) - before.get("dispatch/warm_hits", 0) == 1
print("OK")
"""
    r = rbln_test_util.run_python(code, {"TORCH_RBLN_DEPLOY": "ON"}, timeout=600)
    assert r.returncode == 0 and "OK" in r.stdout, r.stdout + r.stderr


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
