"""torch.rbln.set_sync_debug_mode: warns about or refuses host-device
synchronizations, naming the op and the user's line; silent when nothing
waits for the device."""
# spec: none -- torch.cuda parity (issue 18); the per-call twin of explain() (N).

import re
import sys
import warnings

import pytest
import torch


HERE = r"sync_debug_test\.py:\d+"


@pytest.fixture
def mode():
    yield torch.rbln.set_sync_debug_mode
    torch.rbln.set_sync_debug_mode("default")


def _half(n=64):
    # float16: float32 arithmetic runs on the host (SPEC D4).
    return torch.randn(n, n, dtype=torch.float16).to("rbln")


def _device_latest(n=64):
    x = _half(n)
    return x + x  # A compiled-kernel result: its bytes are on the device only.


def _reports(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return [str(w.message) for w in caught if "host-device synchronization" in str(w.message)]


def test_mode_values(mode):
    assert torch.rbln.get_sync_debug_mode() == 0
    mode("warn")
    assert torch.rbln.get_sync_debug_mode() == 1
    mode(2)
    assert torch.rbln.get_sync_debug_mode() == 2
    mode("default")
    assert torch.rbln.get_sync_debug_mode() == 0
    with pytest.raises(RuntimeError, match="expected one of `default`, `warn`, `error`"):
        mode("loud")


def test_error_on_item_of_device_data(mode):
    y = _device_latest()
    mode("error")
    with pytest.raises(RuntimeError, match=rf"aten::_local_scalar_dense \(Tensor.item\(\)\) reads .* at {HERE}"):
        y[0, 0].item()
    mode("default")
    assert y[0, 0].item() == y.cpu()[0, 0].item()


def test_warn_names_each_kind_of_sync(mode):
    y = _device_latest()
    mode("warn")
    cases = {
        "cpu": (lambda: y.cpu(), r"aten::_copy_from|device-to-host copy"),
        "print": (lambda: str(_device_latest()), r"print\(tensor\)"),
        "data-dependent op": (lambda: torch.nonzero(_device_latest() > 0), r"aten::nonzero \(runs on the CPU\)"),
        "nan/inf check": (lambda: _device_latest() * y, r"aten::mul \(pre-dispatch NaN/Inf check\)"),
        "synchronize": (lambda: torch.rbln.synchronize(), r"torch\.rbln\.synchronize\(\) waits for rbln:0"),
        # Integer conversions still go through the host (float ones run on the device).
        "host bounce": (lambda: _device_latest().to(torch.int32), r"device data on the host"),
    }
    for name, (fn, pattern) in cases.items():
        reports = _reports(fn)
        named = [r for r in reports if re.search(pattern, r)]
        assert named, (name, reports)
        assert re.search(HERE, named[0]), (name, named)


def test_reads_of_host_data_are_silent(mode):
    mode("error")
    x = torch.ones(64, 64, device="rbln")  # Host-latest: no device op wrote it.
    assert x[0, 0].item() == 1.0
    assert torch.equal(x.cpu(), torch.ones(64, 64))
    y = _half()
    z = y * y  # Uploads y: in sync, its host copy is current.
    assert torch.equal(y.cpu(), y.cpu())
    del z


def test_warm_compiled_op_loop_is_silent(mode):
    x, y = _half(), _half()
    step = torch.compile(lambda a, b: (a * b + a).relu(), backend="rbln", dynamic=False)
    out = step(x, y)  # Compile and warm up.
    z = x * y
    mode("error")
    for _ in range(10):
        z = x * y  # Warm compiled kernel; x, y in sync: the check reads the host copies.
        out = step(out, y)  # Graph inputs are not checked (H8): device-resident all along.
    with pytest.raises(RuntimeError, match="host-device synchronization"):
        out.cpu()
    mode("default")
    torch.testing.assert_close(z.cpu(), x.cpu() * y.cpu())


# A warm eager loop with the pre-dispatch checks off (TORCH_RBLN_DEPLOY=ON)
# is checked in a fresh process by cuda_parity_test.py's
# test_in_a_fresh_process.


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
