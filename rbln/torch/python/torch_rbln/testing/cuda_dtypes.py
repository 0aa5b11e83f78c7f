"""The ops CUDA runs in a dtype the CPU kernel rejects, and what rbln does
with each (issue 30).

rbln should accept what CUDA accepts: model code branches on
`device.type != "cpu"` and then relies on CUDA's dtypes (transformers' MoE
experts count tokens per expert with `torch.histc` on int32 ids everywhere
but on the CPU), and the CPU fallback cannot run what the CPU kernel
rejects. The list is PyTorch's own: every OpInfo entry
(`torch.testing._internal.common_methods_invocations.op_db`) with a dtype
in `supported_dtypes("cuda")` but not in `supported_dtypes("cpu")`.

Per (entry, dtype) the first `SAMPLES` sample inputs run
  * on the CPU, to see whether its kernel really rejects them (OpInfo's CPU
    lists lag behind ATen for a few entries);
  * on rbln, eagerly and through `torch.compile(backend="rbln",
    fullgraph=True, options={"host_ops": "none"})` with the compile_error
    fallback disabled, against a reference: CUDA's kernel written out where
    its arithmetic differs from an upcast (`cuda_histc`: integer bins), else
    the op on the CPU with the inputs upcast (half types to float32, bool to
    int64) and the result cast to the dtype the op gives off the CPU (its
    meta kernel's, which follows CUDA's).

Statuses:
  done           rbln runs it, eagerly and compiled, and matches;
  cpu runs it    the CPU kernel takes the dtype too (OpInfo's CPU list is
                 stale): the CPU fallback runs it, nothing is missing;
  not on device  with the reason (`NOT_ON_DEVICE`): no complex types, no
                 FFT, a CUDA-only kernel, random numbers;
  open           anything else, with what failed (eager and compiled).

`docs/cuda-dtypes.md` holds the table; `cuda_dtypes_test.py` checks it
against this walk, and regenerates it with RBLN_CUDA_DTYPES_UPDATE=1:

    RBLN_CUDA_DTYPES_UPDATE=1 bazel run //rbln/torch/python/tests:cuda_dtypes_test
    python -m torch_rbln.testing.cuda_dtypes [--only histc]
"""

import argparse
import dataclasses
import os
import sys

import torch
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

from .opinfo_compile import _compare, _summary, _to, entry_name, tolerance

SAMPLES = 4

_COMPLEX = ("complex dtype: the device has no complex types (the IR's dtypes are real), so "
            "complex tensors stay on the CPU")
_FFT = ("FFT: the compiler has no FFT (no pocketfft/MKL on the device), and half-precision "
        "FFTs are a cuFFT feature the CPU's MKL/pocketfft lack")
_CUDA_KERNEL = ("a CUDA-only kernel (FlashAttention / memory-efficient attention): no CPU "
                "kernel in any dtype; rbln's attention is scaled_dot_product_attention's "
                "overrideable backend (compiled attention), which models reach through "
                "F.scaled_dot_product_attention")
_RNG = ("random numbers: rrelu's training mode draws its slopes from the generator; rbln "
        "draws on the host with the CPU's algorithm (README, RNG), whose rrelu has no float16 "
        "kernel")

# (entry, dtype family) -> why rbln does not run it on the device. Families:
# "complex" (every complex dtype), or a dtype name.
NOT_ON_DEVICE = {
    **{(name, "complex"): _COMPLEX for name in (
        "acos", "acosh", "angle", "asin", "asinh", "atan", "atanh", "cos", "cosh",
        "div.no_rounding_mode", "exp", "lerp", "log", "logaddexp", "nanmean", "nansum",
        "pow", "prod", "rsqrt", "sigmoid", "sin", "sinh", "sqrt", "sum", "tan", "tanh",
        "trace", "true_divide")},
    **{(f"fft.{kind}", family): _FFT
       for kind in ("fft", "fft2", "fftn", "hfft", "hfft2", "hfftn", "ifft", "ifft2", "ifftn",
                    "ihfft", "ihfft2", "ihfftn", "irfft", "irfft2", "irfftn", "rfft", "rfft2",
                    "rfftn")
       for family in ("complex", "float16")},
    ("torch.ops.aten._flash_attention_forward", "float16"): _CUDA_KERNEL,
    ("torch.ops.aten._efficient_attention_forward", "float16"): _CUDA_KERNEL,
    ("torch.ops.aten._efficient_attention_forward", "float32"): _CUDA_KERNEL,
    ("nn.functional.rrelu", "float16"): _RNG,
}

STATUSES = ("done", "cpu runs it", "not on device", "open")


def dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def family(dtype) -> str:
    return "complex" if dtype.is_complex else dtype_name(dtype)


@dataclasses.dataclass
class Result:
    entry: str
    dtype: str
    status: str
    note: str = ""


def cuda_only_dtypes(names=None):
    """[(entry name, op, dtype)] of every OpInfo dtype CUDA takes and the CPU
    does not (by OpInfo's declarations), in op_db's order."""
    from torch.testing._internal.common_methods_invocations import op_db

    out = []
    for op in op_db:
        name = entry_name(op)
        if names is not None and name not in names:
            continue
        extra = set(op.supported_dtypes("cuda")) - set(op.supported_dtypes("cpu"))
        for dtype in sorted(extra, key=str):
            out.append((name, op, dtype))
    return out


def cuda_histc(x, bins=100, min=0, max=0):
    """CUDA's histc of an integer tensor (aten/src/ATen/native/cuda/
    SummaryOps.cu): bounds are the Scalars truncated to int64 (or the data's
    [min, max] when equal), widened by 1 on both sides when still equal;
    an element v in [lo, hi] counts in bin (v - lo) * bins / (hi - lo) in
    int64 arithmetic, the last bin taking v == hi; counts in x's dtype."""
    lo, hi = int(min), int(max)  # Scalar::to<int64_t>: truncation toward zero
    if lo == hi and x.numel() > 0:
        lo, hi = int(x.min()), int(x.max())
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    if not lo < hi:
        raise RuntimeError("max must be larger than min")
    v = x.reshape(-1).to(torch.int64)
    v = v[(v >= lo) & (v <= hi)]
    b = torch.div((v - lo) * bins, hi - lo, rounding_mode="trunc")
    b = torch.where(b == bins, bins - 1, b)
    return torch.bincount(b, minlength=bins).to(x.dtype)


# Entries whose CUDA kernel computes differently from the op on upcast inputs.
REFERENCES = {"histc": cuda_histc}


def _upcast(x):
    if not isinstance(x, torch.Tensor):
        return x
    if x.dtype in (torch.float16, torch.bfloat16):
        return x.float()
    if x.dtype == torch.bool:
        return x.long()
    return x


def _meta(x):
    return x.to("meta") if isinstance(x, torch.Tensor) else x


def reference(name, op, sample):
    """The result CUDA gives for `sample` (see the module docstring)."""
    args = (sample.input,) + tuple(sample.args)
    if name in REFERENCES:
        return REFERENCES[name](*args, **sample.kwargs)
    meta = op(*tree_map(_meta, args), **tree_map(_meta, sample.kwargs))
    got = op(*tree_map(_upcast, args), **tree_map(_upcast, sample.kwargs))
    return tree_map(lambda m, g: g.to(m.dtype) if isinstance(g, torch.Tensor) else g, meta, got)


def _call(fn, call):
    inp, args, kwargs = call
    return fn(inp, *args, **kwargs)


def _cpu_call(sample):
    return (sample.input, tuple(sample.args), dict(sample.kwargs))


def _rbln_call(sample):
    flat, spec = tree_flatten(_cpu_call(sample))
    return tree_unflatten([_to("rbln", x) for x in flat], spec)


def _compiled(op):
    def fn(inp, *args, **kwargs):
        return op(inp, *args, **kwargs)

    return torch.compile(fn, backend="rbln", dynamic=False, fullgraph=True,
                         options={"host_ops": "none"})


def _cpu_rejected(op, samples):
    """[(sample, the CPU's error)] of the samples the CPU kernel refuses."""
    out = []
    for sample in samples:
        try:
            _call(op, _cpu_call(sample))
        except Exception as e:  # noqa: BLE001 -- the CPU's verdict
            out.append((sample, _summary(e)))
    return out


def _run_on_rbln(name, op, dtype, rejected):
    """What failed when rbln ran the samples the CPU rejects, eagerly and
    compiled, against the reference (empty: nothing)."""
    failures = []
    for mode in ("eager", "compiled"):
        torch._dynamo.reset()
        fn = op if mode == "eager" else _compiled(op)
        for i, (sample, _) in enumerate(rejected):
            try:
                want = reference(name, op, sample)
            except Exception as e:  # noqa: BLE001 -- CUDA raises too: rbln must as well
                want = e
            try:
                got = tree_map(lambda x: x.cpu() if isinstance(x, torch.Tensor) else x,
                               _call(fn, _rbln_call(sample)))
            except Exception as e:  # noqa: BLE001
                if not isinstance(want, Exception):
                    failures.append(f"{mode}: {_summary(e)}")
                    break
                continue
            if isinstance(want, Exception):
                failures.append(f"{mode}: sample {i} runs where CUDA raises {_summary(want)}")
                break
            diff = _compare(want, got, tolerance(name, dtype))
            if diff:
                failures.append(f"{mode}: sample {i}: {diff}")
                break
    torch._dynamo.reset()
    return failures


def run_one(name, op, dtype, samples=SAMPLES) -> Result:
    dt = dtype_name(dtype)
    try:
        cases = list(op.sample_inputs("cpu", dtype))[:samples]
    except Exception as e:  # noqa: BLE001
        return Result(name, dt, "open", f"sample_inputs raised {_summary(e)}")
    rejected = _cpu_rejected(op, cases)
    if not rejected:
        return Result(name, dt, "cpu runs it")
    why = NOT_ON_DEVICE.get((name, family(dtype)))
    if why:
        return Result(name, dt, "not on device", why)
    failures = _run_on_rbln(name, op, dtype, rejected)
    if failures:
        return Result(name, dt, "open", "; ".join(failures))
    return Result(name, dt, "done", f"the CPU raises {rejected[0][1]}")


def walk(names=None, samples=SAMPLES):
    return [run_one(name, op, dtype, samples) for name, op, dtype in cuda_only_dtypes(names)]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="entry names")
    parser.add_argument("--samples", type=int, default=SAMPLES)
    args = parser.parse_args(argv)
    os.environ.setdefault("TORCH_RBLN_DISABLE_FALLBACK", "compile_error")
    for r in walk(set(args.only) if args.only else None, args.samples):
        print(f"{r.entry}\t{r.dtype}\t{r.status}\t{r.note}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
