"""torch.autocast("rbln") follows CUDA's autocast policy; GradScaler("rbln")
trains; torch.compile(backend="rbln") keeps autocast regions."""
# spec: none -- torch.cuda parity (issue 18); SPEC has no autocast items.

import sys

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

import autocast_policy

aten = torch.ops.aten
LOW = (torch.float16, torch.bfloat16)
POLICIES = autocast_policy.policy_lists()


def _t(*shape, dtype=torch.float32):
    return torch.randn(*shape, device="rbln", dtype=dtype)


def _long(*shape, high=2):
    return torch.randint(0, high, shape, device="rbln")


# One call per listed (op, overload), in terms of input dtype `d`. Inputs of
# lower_precision_fp ops come in float32 and must leave in the autocast dtype;
# inputs of fp32 ops come in the autocast dtype and must leave in float32.
_C3 = ([1, 1], [0, 0], [1, 1])
SAMPLES = {
    ("_convolution", "deprecated"): lambda d: aten._convolution.deprecated(
        _t(1, 3, 8, 8, dtype=d), _t(4, 3, 3, 3, dtype=d), None, *_C3, False, [0, 0], 1, False, False, True),
    ("_convolution", None): lambda d: aten._convolution(
        _t(1, 3, 8, 8, dtype=d), _t(4, 3, 3, 3, dtype=d), None, *_C3, False, [0, 0], 1, False, False, True, True),
    ("conv1d", None): lambda d: aten.conv1d(_t(1, 3, 8, dtype=d), _t(4, 3, 3, dtype=d)),
    ("conv2d", None): lambda d: aten.conv2d(_t(1, 3, 8, 8, dtype=d), _t(4, 3, 3, 3, dtype=d)),
    ("conv3d", None): lambda d: aten.conv3d(_t(1, 3, 4, 4, 4, dtype=d), _t(2, 3, 3, 3, 3, dtype=d)),
    ("conv_tbc", None): lambda d: aten.conv_tbc(_t(5, 1, 3, dtype=d), _t(3, 3, 4, dtype=d), _t(4, dtype=d)),
    ("conv_transpose1d", None): lambda d: aten.conv_transpose1d(_t(1, 3, 8, dtype=d), _t(3, 4, 3, dtype=d)),
    ("conv_transpose2d", "input"): lambda d: aten.conv_transpose2d.input(
        _t(1, 3, 8, 8, dtype=d), _t(3, 4, 3, 3, dtype=d)),
    ("conv_transpose3d", "input"): lambda d: aten.conv_transpose3d.input(
        _t(1, 3, 4, 4, 4, dtype=d), _t(3, 2, 3, 3, 3, dtype=d)),
    ("convolution", None): lambda d: aten.convolution(
        _t(1, 3, 8, 8, dtype=d), _t(4, 3, 3, 3, dtype=d), None, *_C3, False, [0, 0], 1),
    ("prelu", None): lambda d: aten.prelu(_t(3, 4, dtype=d), _t(1, dtype=d)),
    ("addmm", None): lambda d: aten.addmm(_t(3, 5, dtype=d), _t(3, 4, dtype=d), _t(4, 5, dtype=d)),
    ("addmv", None): lambda d: aten.addmv(_t(3, dtype=d), _t(3, 4, dtype=d), _t(4, dtype=d)),
    ("addr", None): lambda d: aten.addr(_t(3, 4, dtype=d), _t(3, dtype=d), _t(4, dtype=d)),
    ("matmul", None): lambda d: aten.matmul(_t(3, 4, dtype=d), _t(4, 5, dtype=d)),
    ("einsum", None): lambda d: aten.einsum("ij,jk->ik", [_t(3, 4, dtype=d), _t(4, 5, dtype=d)]),
    ("mm", None): lambda d: aten.mm(_t(3, 4, dtype=d), _t(4, 5, dtype=d)),
    ("mv", None): lambda d: aten.mv(_t(3, 4, dtype=d), _t(4, dtype=d)),
    ("linalg_vecdot", None): lambda d: aten.linalg_vecdot(_t(3, 4, dtype=d), _t(3, 4, dtype=d)),
    ("linear", None): lambda d: aten.linear(_t(3, 4, dtype=d), _t(5, 4, dtype=d), _t(5, dtype=d)),
    ("addbmm", None): lambda d: aten.addbmm(_t(3, 5, dtype=d), _t(2, 3, 4, dtype=d), _t(2, 4, 5, dtype=d)),
    ("baddbmm", None): lambda d: aten.baddbmm(_t(2, 3, 5, dtype=d), _t(2, 3, 4, dtype=d), _t(2, 4, 5, dtype=d)),
    ("bmm", None): lambda d: aten.bmm(_t(2, 3, 4, dtype=d), _t(2, 4, 5, dtype=d)),
    ("chain_matmul", None): lambda d: aten.chain_matmul([_t(3, 4, dtype=d), _t(4, 5, dtype=d), _t(5, 2, dtype=d)]),
    ("linalg_multi_dot", None): lambda d: aten.linalg_multi_dot(
        [_t(3, 4, dtype=d), _t(4, 5, dtype=d), _t(5, 2, dtype=d)]),
    ("_thnn_fused_lstm_cell", None): lambda d: aten._thnn_fused_lstm_cell(
        _t(2, 20, dtype=d), _t(2, 20, dtype=d), _t(2, 5, dtype=d), _t(20, dtype=d), _t(20, dtype=d))[0],
    ("_thnn_fused_gru_cell", None): lambda d: aten._thnn_fused_gru_cell(
        _t(2, 15, dtype=d), _t(2, 15, dtype=d), _t(2, 5, dtype=d), _t(15, dtype=d), _t(15, dtype=d))[0],
    ("lstm_cell", None): lambda d: aten.lstm_cell(
        _t(2, 4, dtype=d), [_t(2, 5, dtype=d), _t(2, 5, dtype=d)], _t(20, 4, dtype=d), _t(20, 5, dtype=d),
        _t(20, dtype=d), _t(20, dtype=d))[0],
    ("gru_cell", None): lambda d: aten.gru_cell(
        _t(2, 4, dtype=d), _t(2, 5, dtype=d), _t(15, 4, dtype=d), _t(15, 5, dtype=d), _t(15, dtype=d), _t(15, dtype=d)),
    ("rnn_tanh_cell", None): lambda d: aten.rnn_tanh_cell(
        _t(2, 4, dtype=d), _t(2, 5, dtype=d), _t(5, 4, dtype=d), _t(5, 5, dtype=d), _t(5, dtype=d), _t(5, dtype=d)),
    ("rnn_relu_cell", None): lambda d: aten.rnn_relu_cell(
        _t(2, 4, dtype=d), _t(2, 5, dtype=d), _t(5, 4, dtype=d), _t(5, 5, dtype=d), _t(5, dtype=d), _t(5, dtype=d)),
    ("_scaled_dot_product_flash_attention", None): lambda d: aten._scaled_dot_product_flash_attention(
        _t(1, 2, 8, 16, dtype=d), _t(1, 2, 8, 16, dtype=d), _t(1, 2, 8, 16, dtype=d))[0],
    ("scaled_dot_product_attention", None): lambda d: aten.scaled_dot_product_attention(
        _t(1, 2, 8, 16, dtype=d), _t(1, 2, 8, 16, dtype=d), _t(1, 2, 8, 16, dtype=d)),
    # fp32
    **{
        (name, None): (lambda name: lambda d: getattr(aten, name)(_t(3, 4, dtype=d)))(name)
        for name in ("acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p",
                     "reciprocal", "rsqrt", "sinh", "tan", "softplus", "nuclear_norm", "pdist")
    },
    ("pow", "Tensor_Scalar"): lambda d: aten.pow.Tensor_Scalar(_t(3, 4, dtype=d), 2.0),
    ("pow", "Tensor_Tensor"): lambda d: aten.pow.Tensor_Tensor(_t(3, 4, dtype=d), _t(3, 4, dtype=d)),
    ("pow", "Scalar"): lambda d: aten.pow.Scalar(2.0, _t(3, 4, dtype=d)),
    ("layer_norm", None): lambda d: aten.layer_norm(_t(3, 4, dtype=d), [4]),
    ("native_layer_norm", None): lambda d: aten.native_layer_norm(
        _t(3, 4, dtype=d), [4], _t(4, dtype=d), _t(4, dtype=d), 1e-5)[0],
    ("rms_norm", None): lambda d: aten.rms_norm(_t(3, 4, dtype=d), [4]),
    ("group_norm", None): lambda d: aten.group_norm(_t(2, 4, 3, dtype=d), 2),
    ("frobenius_norm", "dim"): lambda d: aten.frobenius_norm.dim(_t(3, 4, dtype=d), [0, 1]),
    ("nuclear_norm", "dim"): lambda d: aten.nuclear_norm.dim(_t(3, 4, dtype=d), [0, 1]),
    ("cosine_similarity", None): lambda d: aten.cosine_similarity(_t(3, 4, dtype=d), _t(3, 4, dtype=d)),
    ("poisson_nll_loss", None): lambda d: aten.poisson_nll_loss(
        _t(3, 4, dtype=d), _t(3, 4, dtype=d), True, False, 1e-8, 1),
    ("cosine_embedding_loss", None): lambda d: aten.cosine_embedding_loss(
        _t(3, 4, dtype=d), _t(3, 4, dtype=d), _t(3, dtype=d)),
    ("nll_loss", None): lambda d: aten.nll_loss(_t(3, 5, dtype=d), _long(3, high=5)),
    ("nll_loss2d", None): lambda d: aten.nll_loss2d(_t(1, 5, 2, 2, dtype=d), _long(1, 2, 2, high=5)),
    ("hinge_embedding_loss", None): lambda d: aten.hinge_embedding_loss(_t(3, 4, dtype=d), _t(3, 4, dtype=d)),
    ("kl_div", None): lambda d: aten.kl_div(_t(3, 4, dtype=d), _t(3, 4, dtype=d)),
    **{
        (name, None): (lambda name: lambda d: getattr(aten, name)(_t(3, 4, dtype=d), _t(3, 4, dtype=d)))(name)
        for name in ("l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss", "soft_margin_loss",
                     "binary_cross_entropy_with_logits", "dist", "cdist")
    },
    ("margin_ranking_loss", None): lambda d: aten.margin_ranking_loss(
        _t(3, dtype=d), _t(3, dtype=d), _t(3, dtype=d)),
    ("multilabel_margin_loss", None): lambda d: aten.multilabel_margin_loss(_t(3, 4, dtype=d), _long(3, 4, high=4)),
    ("triplet_margin_loss", None): lambda d: aten.triplet_margin_loss(
        _t(3, 4, dtype=d), _t(3, 4, dtype=d), _t(3, 4, dtype=d)),
    ("multi_margin_loss", None): lambda d: aten.multi_margin_loss(_t(3, 4, dtype=d), _long(3, high=4)),
    ("renorm", None): lambda d: aten.renorm(_t(3, 4, dtype=d), 2, 0, 1.0),
    ("logsumexp", None): lambda d: aten.logsumexp(_t(3, 4, dtype=d), [1]),
    ("upsample_nearest1d", None): lambda d: aten.upsample_nearest1d(_t(1, 2, 4, dtype=d), [8]),
    ("_upsample_nearest_exact1d", None): lambda d: aten._upsample_nearest_exact1d(_t(1, 2, 4, dtype=d), [8]),
    ("upsample_nearest2d", None): lambda d: aten.upsample_nearest2d(_t(1, 2, 4, 4, dtype=d), [8, 8]),
    ("_upsample_nearest_exact2d", None): lambda d: aten._upsample_nearest_exact2d(_t(1, 2, 4, 4, dtype=d), [8, 8]),
    ("upsample_nearest3d", None): lambda d: aten.upsample_nearest3d(_t(1, 2, 2, 2, 2, dtype=d), [4, 4, 4]),
    ("_upsample_nearest_exact3d", None): lambda d: aten._upsample_nearest_exact3d(
        _t(1, 2, 2, 2, 2, dtype=d), [4, 4, 4]),
    ("upsample_linear1d", None): lambda d: aten.upsample_linear1d(_t(1, 2, 4, dtype=d), [8], False),
    ("upsample_bilinear2d", None): lambda d: aten.upsample_bilinear2d(_t(1, 2, 4, 4, dtype=d), [8, 8], False),
    ("_upsample_bilinear2d_aa", None): lambda d: aten._upsample_bilinear2d_aa(
        _t(1, 2, 4, 4, dtype=d), [8, 8], False),
    ("upsample_trilinear3d", None): lambda d: aten.upsample_trilinear3d(
        _t(1, 2, 2, 2, 2, dtype=d), [4, 4, 4], False),
    ("upsample_bicubic2d", None): lambda d: aten.upsample_bicubic2d(_t(1, 2, 4, 4, dtype=d), [8, 8], False),
    ("_upsample_bicubic2d_aa", None): lambda d: aten._upsample_bicubic2d_aa(_t(1, 2, 4, 4, dtype=d), [8, 8], False),
    # fp32_set_opt_dtype
    ("prod", None): lambda d: aten.prod(_t(3, 4, dtype=d)),
    ("prod", "dim_int"): lambda d: aten.prod.dim_int(_t(3, 4, dtype=d), 1),
    ("softmax", "int"): lambda d: aten.softmax.int(_t(3, 4, dtype=d), 1),
    ("log_softmax", "int"): lambda d: aten.log_softmax.int(_t(3, 4, dtype=d), 1),
    ("cumprod", None): lambda d: aten.cumprod(_t(3, 4, dtype=d), 1),
    ("cumsum", None): lambda d: aten.cumsum(_t(3, 4, dtype=d), 1),
    ("linalg_vector_norm", None): lambda d: aten.linalg_vector_norm(_t(3, 4, dtype=d)),
    ("linalg_matrix_norm", None): lambda d: aten.linalg_matrix_norm(_t(3, 4, dtype=d), 1),
    ("linalg_matrix_norm", "str_ord"): lambda d: aten.linalg_matrix_norm.str_ord(_t(3, 4, dtype=d)),
    ("sum", None): lambda d: aten.sum(_t(3, 4, dtype=d)),
    ("sum", "dim_IntList"): lambda d: aten.sum.dim_IntList(_t(3, 4, dtype=d), [1]),
    # fp32_append_dtype
    ("norm", "Scalar"): lambda d: aten.norm.Scalar(_t(3, 4, dtype=d), 2),
    ("norm", "ScalarOpt_dim"): lambda d: aten.norm.ScalarOpt_dim(_t(3, 4, dtype=d), 2, [1]),
    # promote: one input in the autocast dtype `d`, the others in float32.
    ("addcdiv", None): lambda d: aten.addcdiv(_t(3), _t(3, dtype=d), _t(3)),
    ("addcmul", None): lambda d: aten.addcmul(_t(3), _t(3, dtype=d), _t(3)),
    ("atan2", None): lambda d: aten.atan2(_t(3, dtype=d), _t(3)),
    ("bilinear", None): lambda d: aten.bilinear(_t(3, 4, dtype=d), _t(3, 5), _t(6, 4, 5), _t(6)),
    ("cross", None): lambda d: aten.cross(_t(3, 3, dtype=d), _t(3, 3)),
    ("dot", None): lambda d: aten.dot(_t(3, dtype=d), _t(3)),
    ("vdot", None): lambda d: aten.vdot(_t(3, dtype=d), _t(3)),
    ("grid_sampler", None): lambda d: aten.grid_sampler(_t(1, 2, 4, 4, dtype=d), _t(1, 3, 3, 2), 0, 0, False),
    ("index_put", None): lambda d: aten.index_put(_t(5), [_long(2, high=5)], _t(2, dtype=d)),
    ("tensordot", None): lambda d: aten.tensordot(_t(3, 4, dtype=d), _t(4, 5), [1], [0]),
    ("scatter_add", None): lambda d: aten.scatter_add(_t(5), 0, _long(2, high=5), _t(2, dtype=d)),
}


def _cases():
    for policy, ops in POLICIES.items():
        for op in ops:
            yield pytest.param(policy, op, id=f"{policy}-{op[0]}{'.' + op[1] if op[1] else ''}")


def test_every_policy_op_has_a_sample():
    listed = {op for ops in POLICIES.values() for op in ops}
    assert len(listed) > 100, POLICIES  # The header parsed.
    assert listed == set(SAMPLES), (listed ^ set(SAMPLES))


class _Stop(Exception):
    pass


class _FirstKernelInputs(TorchDispatchMode):
    """Records the floating-point inputs of the first op that reaches the
    kernels below autocast (past the sample's factories, which fill their
    tensors in place, device queries and autocast's own casts), then
    stops."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        dtypes = {t.dtype for t in tree_leaves((args, kwargs))
                  if isinstance(t, torch.Tensor) and t.is_floating_point()}
        if (not dtypes or func.namespace != "aten" or func._schema.is_mutable
                or func == aten._to_copy.default):
            return func(*args, **(kwargs or {}))
        self.dtypes = dtypes
        raise _Stop


@pytest.mark.parametrize("policy,op", list(_cases()))
def test_output_dtype_follows_cuda_policy(policy, op):
    # Fake rbln tensors: the autocast kernels decide the dtypes before any
    # device kernel runs, so every listed op is checked, also ones whose rbln
    # kernel is missing (convolutions, fused RNN cells).
    sample = SAMPLES[op]
    with FakeTensorMode():
        for dtype in LOW:
            in_dtype, expected = (torch.float32, dtype) if policy == "lower_precision_fp" else (dtype, torch.float32)
            try:
                with torch.autocast("rbln", dtype=dtype):
                    out = sample(in_dtype)
            except NotImplementedError as e:
                # No Meta kernel (the fused GRU cell): check what its kernels
                # receive instead of what they return.
                assert "Meta" in str(e), e
                recorder = _FirstKernelInputs()
                with pytest.raises(_Stop), recorder, torch.autocast("rbln", dtype=dtype):
                    sample(in_dtype)
                assert recorder.dtypes == {expected}, (op, dtype, recorder.dtypes)
                continue
            assert out.device.type == "rbln"
            assert out.dtype == expected, (op, dtype, out.dtype)


def test_defaults_and_fallthrough():
    assert torch.amp.is_autocast_available("rbln")
    assert torch.get_autocast_dtype("rbln") == torch.float16  # CUDA's default.
    x, w = _t(4, 64), _t(64, 64)
    with torch.autocast("rbln"):
        assert torch.is_autocast_enabled("rbln")
        y = x @ w
        # Ops in no list fall through to the rbln kernels unchanged.
        r = torch.relu(y)
        v = y.view(64, 4).t()
        s = (x + x).sum(dim=1, dtype=torch.float64)  # An explicit dtype wins.
    assert y.dtype == r.dtype == v.dtype == torch.float16
    assert s.dtype == torch.float64
    assert (x @ w).dtype == torch.float32  # Outside the region.
    with torch.rbln.amp.autocast(dtype=torch.bfloat16):
        assert (x @ w).dtype == torch.bfloat16
    with pytest.raises(RuntimeError, match="unsafe to autocast"):
        with torch.autocast("rbln"):
            torch.nn.functional.binary_cross_entropy(torch.rand(3, device="rbln"), torch.rand(3, device="rbln"))


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_eager_values_match_cpu_under_the_cuda_policy(dtype):
    # Ops with rbln kernels, run for real: the value is the op computed in
    # the dtype the CUDA policy picks (inputs cast on the CPU), within the
    # dtype's tolerance.
    torch.manual_seed(0)
    a, b = torch.randn(8, 64), torch.randn(64, 64)
    q = torch.randn(1, 2, 32, 64)
    h = torch.randn(8, 64).to(dtype)
    target = torch.randint(0, 64, (8,))
    cases = [
        ("mm", lambda t: t[0] @ t[1], (a, b), dtype),
        ("linear", lambda t: torch.nn.functional.linear(t[0], t[1], t[2]), (a, b, b[0]), dtype),
        ("bmm", lambda t: torch.bmm(t[0], t[1]), (a.view(2, 4, 64), b.view(2, 32, 64).transpose(1, 2)), dtype),
        ("sdpa", lambda t: torch.nn.functional.scaled_dot_product_attention(*t), (q, q * 0.5, q), dtype),
        ("softmax", lambda t: torch.softmax(t[0], -1), (h,), torch.float32),
        ("log_softmax", lambda t: torch.log_softmax(t[0], -1), (h,), torch.float32),
        ("layer_norm", lambda t: torch.nn.functional.layer_norm(t[0], (64,)), (h,), torch.float32),
        ("exp", lambda t: torch.exp(t[0]), (h,), torch.float32),
        ("sum", lambda t: t[0].sum(-1), (h,), torch.float32),
        ("cross_entropy", lambda t: torch.nn.functional.cross_entropy(t[0], t[1]), (h, target), torch.float32),
        ("mse_loss", lambda t: torch.nn.functional.mse_loss(t[0], t[1]), (h, h.flip(0)), torch.float32),
    ]
    tol = {torch.float16: 1e-2, torch.bfloat16: 4e-2, torch.float32: 1e-3}
    for name, fn, args, expected in cases:
        with torch.autocast("rbln", dtype=dtype):
            out = fn([t.to("rbln") for t in args])
        assert out.device.type == "rbln" and out.dtype == expected, (name, out.dtype)
        ref = fn([t.to(expected) if t.is_floating_point() else t for t in args])
        torch.testing.assert_close(out.cpu(), ref, atol=tol[expected], rtol=tol[expected], msg=name)


def test_compile_keeps_autocast_regions():
    def step(x, w):
        with torch.autocast("rbln", dtype=torch.bfloat16):
            y = x @ w
            z = torch.softmax(y, dim=-1)
        return y, z, (x @ w)

    x, w = torch.randn(64, 64), torch.randn(64, 64)
    before = torch.rbln.counters()
    y, z, plain = torch.compile(step, backend="rbln", dynamic=False)(x.to("rbln"), w.to("rbln"))
    after = torch.rbln.counters()
    assert after.get("fallback/compile_error", 0) == before.get("fallback/compile_error", 0)
    assert y.device.type == "rbln"
    assert (y.dtype, z.dtype, plain.dtype) == (torch.bfloat16, torch.float32, torch.float32)
    ey, ez, eplain = step(x.to("rbln"), w.to("rbln"))
    torch.testing.assert_close(y.cpu(), ey.cpu(), atol=4e-2, rtol=4e-2)
    torch.testing.assert_close(z.cpu(), ez.cpu(), atol=1e-3, rtol=1e-2)
    torch.testing.assert_close(plain.cpu(), x @ w, atol=1e-3, rtol=1e-3)
    # The casts are ops of the captured graph, compiled with it: x and w to
    # bfloat16 for the region's mm, y back to float32 for its softmax.
    ops = torch.rbln.compiled_programs()[-1].inspect()["ops"]
    assert ops.get("_to_copy", 0) == 3 and ops.get("mm", 0) == 2, ops


def _scaled_step(model, opt, scaler, x, device):
    opt.zero_grad()
    with torch.autocast(device, dtype=torch.bfloat16):
        loss = model(x).float().square().mean()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    return loss.item()


def test_grad_scaler_trains_and_skips_inf_steps():
    torch.manual_seed(0)
    cpu_model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64))
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64))
    model.load_state_dict(cpu_model.state_dict())
    model.to("rbln")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    cpu_opt = torch.optim.SGD(cpu_model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("rbln", init_scale=1024.0)
    cpu_scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    x = torch.randn(16, 64)
    for _ in range(3):
        loss = _scaled_step(model, opt, scaler, x.to("rbln"), "rbln")
        cpu_loss = _scaled_step(cpu_model, cpu_opt, cpu_scaler, x, "cpu")
        assert abs(loss - cpu_loss) < 2e-2 * max(1.0, abs(cpu_loss)), (loss, cpu_loss)
    assert scaler.get_scale() == cpu_scaler.get_scale() == 1024.0
    assert scaler._scale.device.type == "rbln"

    # An inf gradient: the step is skipped, the scale backs off, and the
    # found_inf tensors GradScaler made stay on the device.
    before = [p.detach().cpu().clone() for p in model.parameters()]
    opt.zero_grad()
    with torch.autocast("rbln", dtype=torch.bfloat16):
        loss = model(x.to("rbln")).float().mean()
    scaler.scale(loss).backward()
    first = next(model.parameters())
    first.grad = first.grad.cpu().fill_(float("inf")).to("rbln")
    scaler.unscale_(opt)
    found = scaler._per_optimizer_states[id(opt)]["found_inf_per_device"]
    assert [t.device.type for t in found.values()] == ["rbln"]
    assert sum(t.item() for t in found.values()) == 1.0
    scaler.step(opt)
    scaler.update()
    assert scaler.get_scale() == 512.0
    for p, b in zip(model.parameters(), before):
        assert torch.equal(p.detach().cpu(), b)
    legacy = torch.rbln.amp.GradScaler(init_scale=8.0)
    assert legacy._device == "rbln" and legacy.get_scale() == 8.0


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
