"""The edge-case differential test (issue 28 item 2), eager and compiled,
float16/bfloat16/float32 and int32/int64, against the CPU: constant and zero
rows, eps 1e-12 and 1e-5, values near the range limits, subnormals, +-inf
and NaN, empty and size-1 dims, negative zero, integer wrap-around
(`torch_rbln.testing.edge_cases`). Seeded; RBLN_EDGE_LONG=1 runs the long
mode (more seeds, a width off the vector length and a wide one, every
program split over the chiplets):

  RBLN_EDGE_LONG=1 bazel test //rbln/torch/python/tests:edge_cases_test --test_env=RBLN_EDGE_LONG

Below the sweep, one regression test per finding it made."""
# spec: G1, H2, J1, P3

from torch_rbln.testing.edge_cases import configure_environment, long_mode

configure_environment(long_mode())

import io  # noqa: E402
import sys  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from torch_rbln.testing import edge_cases, edge_values  # noqa: E402

SEEDS, WIDTHS = edge_cases.plan(edge_cases.long_mode())


@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_edge_cases_match_the_cpu(mode):
    log = io.StringIO()
    outcomes = edge_cases.run((mode,), SEEDS, WIDTHS, log=log)
    print(edge_cases.summary(outcomes), file=sys.stderr)
    for case, where in edge_cases.deviations(outcomes).items():
        print(f"CPU deviates from float64, rbln does not: {case}: {', '.join(where)}",
              file=sys.stderr)
    failures = [o for o in outcomes if o.status == "fail"]
    assert not failures, f"{len(failures)} of {len(outcomes)} cases differ:\n{log.getvalue()}"
    # The sweep reaches the device: eager half cases run compiled kernels.
    on_device = [o for o in outcomes if o.status in ("pass", "f64")]
    assert len(on_device) > 0.4 * len(outcomes), edge_cases.summary(outcomes)


def test_edge_values_cover_every_kind():
    rows = edge_values.edge_rows(64, torch.float16)
    assert torch.equal(rows[2].view(torch.int16), torch.full((64,), -0x8000, dtype=torch.int16))
    assert rows[3].abs().max() == 65504 and rows[4].abs().min() > 0
    assert (rows[4].abs() < torch.finfo(torch.float16).smallest_normal).any()
    assert rows.isnan().sum() == 1 and rows.isposinf().sum() == 1 and rows.isneginf().sum() == 1
    a, b = edge_values.edge_pairs(64, torch.bfloat16)
    values = edge_values.special_values(torch.bfloat16)
    assert a.shape == b.shape and a.numel() >= len(values) ** 2
    again = [edge_values.edge_rows(64, torch.float32, seed=3).view(torch.int32)
             for _ in range(2)]
    assert torch.equal(*again)


def compiled(fn):
    torch._dynamo.reset()
    return torch.compile(fn, backend="rbln", fullgraph=True, dynamic=False)


# -- regressions: what the sweep found -----------------------------------------------


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_std_of_values_near_the_float_limit_is_finite(dtype):
    # Found by the sweep: std decomposed to sqrt(var) rounded var (~2e75) to
    # float32 first: inf. ATen takes the square root in double; so does the
    # compiler's std now.
    # (The CPU's own float32 std of this one row is inf too -- of the same
    # row among others, 4.7e37: its kernels differ by shape.)
    x = edge_values.edge_rows(64, dtype, same_sign_extremes=True)[3:4]  # near max
    want = x.double().std(-1).to(dtype)
    assert torch.isfinite(want).all()
    got = compiled(lambda x: (x.std(-1), torch.std_mean(x, -1)[0]))(x.to("rbln"))
    for g in got:
        torch.testing.assert_close(g.cpu(), want, rtol=1e-2, atol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_prod_of_half_types_accumulates_in_float32(dtype):
    # Found by the sweep: prod rounded every partial product to the half
    # type (3^64 in bfloat16 came out 5% low; 64 factors of mixed magnitude
    # underflowed to 0 in float16). Now opmath, as CUDA: float32, rounded
    # once -- the float64 product rounded. (The CPU's own half prod still
    # rounds every step, in a vectorized order.)
    rows = edge_values.edge_rows(64, dtype, same_sign_extremes=True)
    x = torch.stack([rows[1], rows[11]])  # 3.0 everywhere; mixed magnitudes
    want = x.double().prod(-1).to(dtype)
    got = compiled(lambda x: x.prod(-1))(x.to("rbln")).cpu()
    assert torch.equal(got, want), (got, want)


def test_batch_norm_of_float32_near_the_limit_is_finite():
    # Found by the sweep: compiled batch norm summed float32 statistics in
    # float32, so a channel of values near 3.4e38 overflowed to NaN. The
    # statistics now accumulate in f64 (ATen's acc_type for float32) and
    # the output is the float64 result. (The CPU's own output there is 0:
    # its variance, ~2e75, is stored as float32 inf, so invstd is 0.)
    x = edge_values.edge_rows(64, torch.float32, same_sign_extremes=True)
    x = x.reshape(1, x.shape[0], 64)
    fn = lambda x: F.batch_norm(x, None, None, training=True, eps=1e-5)  # noqa: E731
    want = fn(x.double()).float()
    assert torch.isfinite(want[0, 3]).all() and (want[0, 3] != 0).any()
    got = compiled(fn)(x.to("rbln")).cpu()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4, equal_nan=True)


@pytest.mark.parametrize("mode", ["eager", "compiled"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_gelu_of_inf_is_inf(mode, dtype):
    # A CPU deviation the sweep reports: PyTorch's vectorized CPU gelu gives
    # NaN for +inf (its scalar path and float64 give +inf); rbln gives +inf.
    x = torch.tensor([float("inf"), float("-inf"), 3.0] + [1.0] * 61, dtype=dtype)
    fn = F.gelu if mode == "eager" else compiled(F.gelu)
    got = fn(x.to("rbln")).cpu()
    assert got[0] == float("inf") and got[1].isnan() and got[2] == F.gelu(x[2:3])[0]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
