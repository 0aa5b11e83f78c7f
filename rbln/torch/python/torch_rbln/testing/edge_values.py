"""Edge-case values for differential tests (issue 28 item 2): rows of
zeros, constants and negative zeros, values near a dtype's range limits,
subnormals, tiny and huge magnitudes, +-inf and NaN, and every pair of
special values for binary ops. Deterministic for a seed.

`edge_rows` and `edge_pairs` make the inputs of `edge_cases`; `sprinkle`
puts special values into the graph fuzzer's random inputs."""

import torch

# Row kinds of `edge_rows`, in order: each a row of the result.
ROW_KINDS = (
    "zeros", "constant", "negative_zeros", "near_max", "subnormal", "tiny", "huge",
    "one_nan", "one_inf", "one_neg_inf", "normal", "mixed_magnitudes",
)


def finite_extremes(dtype):
    """(largest finite, smallest normal, smallest subnormal) of `dtype`."""
    info = torch.finfo(dtype)
    subnormal = info.smallest_normal * info.eps  # 2^(emin - mantissa bits)
    return info.max, info.smallest_normal, subnormal


def special_values(dtype):
    """Scalars every binary op meets paired with each other."""
    big, normal, sub = finite_extremes(dtype)
    return [0.0, -0.0, 1.0, -1.0, 2.5, float("inf"), float("-inf"), float("nan"),
            big, -big, normal, sub, -sub, 1e-12, 3.0]


def _signs(n, gen):
    return torch.where(torch.rand(n, generator=gen) < 0.5, -1.0, 1.0).double()


def edge_rows(width, dtype, seed=0, same_sign_extremes=False):
    """A [len(ROW_KINDS), width] tensor of `dtype`, one row per ROW_KINDS
    entry. With `same_sign_extremes` the near-max and huge rows are positive:
    sums over them overflow in every order (an order-dependent overflow --
    max + max - max -- is no difference between two correct programs)."""
    gen = torch.Generator().manual_seed(seed)
    big, normal, sub = finite_extremes(dtype)
    rows = []
    for kind in ROW_KINDS:
        u = torch.rand(width, generator=gen).double()
        signs = torch.ones(width).double() if same_sign_extremes else _signs(width, gen)
        if kind == "zeros":
            r = torch.zeros(width).double()
        elif kind == "constant":
            r = torch.full((width,), 3.0).double()
        elif kind == "negative_zeros":
            r = torch.full((width,), -0.0).double()
        elif kind == "near_max":
            r = signs * big * (0.5 + 0.5 * u)
            r[0] = big
        elif kind == "subnormal":
            # Subnormals of this dtype (multiples of the smallest), and the
            # smallest normal, both signs.
            steps = torch.randint(1, 64, (width,), generator=gen).double()
            r = _signs(width, gen) * sub * steps
            r[1] = normal
            r[2] = -sub
        elif kind == "tiny":
            r = _signs(width, gen) * normal * (1 + 1000 * u)
        elif kind == "huge":
            # Squares near the largest float; a row whose squares sum past
            # the float32 range is left out of `same_sign_extremes` rows
            # (norms and variances of it overflow float32, and the CPU's
            # result then depends on the row's width: NaN or 0).
            root = big ** 0.5 if not same_sign_extremes else min(big, 3.4e38 / width) ** 0.5 / 2
            r = signs * root * (1 + u)
        elif kind in ("one_nan", "one_inf", "one_neg_inf"):
            r = torch.randn(width, generator=gen).double()
            r[(seed * 7 + len(kind)) % width] = {"one_nan": float("nan"), "one_inf": float("inf"),
                                                 "one_neg_inf": float("-inf")}[kind]
        elif kind == "normal":
            r = torch.randn(width, generator=gen).double()
        else:  # mixed_magnitudes
            r = torch.randn(width, generator=gen).double() * torch.where(
                u < 0.5, big ** 0.5, normal * 4)
        rows.append(r)
    return torch.stack(rows).to(dtype)


def edge_pairs(width, dtype, seed=0):
    """(a, b), each [rows, width]: every pair of `special_values` meets in
    some position, followed by the rows of `edge_rows` against a shuffled
    copy (specials against normals, zeros against infinities, ...)."""
    values = special_values(dtype)
    pairs = [(x, y) for x in values for y in values]
    n_rows = -(-len(pairs) // width)
    a = torch.ones(n_rows * width).double()
    b = torch.ones(n_rows * width).double()
    for i, (x, y) in enumerate(pairs):
        a[i], b[i] = x, y
    grid_a = a.reshape(n_rows, width).to(dtype)
    grid_b = b.reshape(n_rows, width).to(dtype)
    rows = edge_rows(width, dtype, seed)
    gen = torch.Generator().manual_seed(seed + 1)
    shuffled = rows[torch.randperm(rows.shape[0], generator=gen)]
    shuffled = shuffled[:, torch.randperm(width, generator=gen)]
    return torch.cat([grid_a, rows]), torch.cat([grid_b, shuffled])


def sprinkle(t, gen, fraction=0.05):
    """`t` with a `fraction` of its elements (at least one) replaced by
    special values of its dtype, drawn with `gen`."""
    if not t.is_floating_point() or t.numel() == 0:
        return t
    values = torch.tensor(special_values(t.dtype), dtype=torch.float64)
    flat = t.reshape(-1).double().clone()
    count = max(1, int(fraction * flat.numel()))
    where = torch.randint(0, flat.numel(), (count,), generator=gen)
    flat[where] = values[torch.randint(0, len(values), (count,), generator=gen)]
    return flat.reshape(t.shape).to(t.dtype)


def int_edge_rows(width, dtype, seed=0):
    """[6, width] integers of `dtype` around the wrap-around points: the
    minimum and maximum, +-1, 0, values whose products overflow."""
    info = torch.iinfo(dtype)
    gen = torch.Generator().manual_seed(seed)
    rand = torch.randint(-1000, 1000, (width,), generator=gen, dtype=torch.int64)
    rows = [
        torch.full((width,), info.max, dtype=torch.int64),
        torch.full((width,), info.min, dtype=torch.int64),
        torch.where(rand > 0, info.max - rand.abs(), info.min + rand.abs()),
        torch.full((width,), 1 << (info.bits // 2), dtype=torch.int64) + rand.abs(),
        rand,
        torch.tensor([0, 1, -1] * (width // 3) + [0] * (width % 3), dtype=torch.int64),
    ]
    return torch.stack(rows).to(dtype)
