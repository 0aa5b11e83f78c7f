"""torch-rbln: PyTorch backend for the (simulated) RBLN NPU, device "rbln".

`import torch` is enough: torch's `torch.backends` entry point imports this
package, which registers the device, `torch.rbln` and the tensor methods.
"""

__version__ = "0.1.0"


def _autoload():
    # The `torch.backends` entry point. Importing the package did the work;
    # this must exist before `import torch`, which may import us re-entrantly.
    pass


import torch  # noqa: E402

from . import _C  # noqa: E402  (static registrations run here)
from . import rbln as _rbln  # noqa: E402


def _user_source_location() -> str:
    """file.py:LINE(func) <- ... of the innermost frames outside torch, for
    the fallback log (SPEC I4)."""
    import os
    import sys

    torch_dir = os.path.dirname(torch.__file__)
    here = os.path.dirname(__file__)
    frame = sys._getframe(1)
    parts = []
    while frame is not None and len(parts) < 2:
        path = frame.f_code.co_filename
        if not path.startswith((torch_dir, here)) and not path.startswith("<frozen"):
            parts.append(f"{os.path.basename(path)}:{frame.f_lineno}({frame.f_code.co_name})")
        frame = frame.f_back
    return " <- ".join(parts)


_C._set_source_location_provider(_user_source_location)

if getattr(torch, "rbln", None) is None:
    torch.utils.rename_privateuse1_backend("rbln")
    torch._register_device_module("rbln", _rbln)
    torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)

# print(rbln_tensor) formats a CPU copy: no device ops (SPEC D4).
from . import _printing  # noqa: E402

_printing.install()

# torch.distributed backend "rbln-ccl" for rbln tensors (SPEC A8).
from . import distributed as _distributed  # noqa: E402

_distributed.register()

# torch.optim's foreach ops and fused Adam/AdamW as compiled programs (issue 29).
from . import _optim_kernels  # noqa: E402

_optim_kernels.register()

# Integer histc as CUDA computes it, on the device (issue 30; the CPU rejects it).
from . import _device_only_ops  # noqa: E402

_device_only_ops.register()

# torch._grouped_mm (MoE experts) as a device program in eager mode (issue 30).
from . import _grouped_mm  # noqa: E402

_grouped_mm.register()

# vLLM serving's paged attention as one op the compiler lowers to a kernel
# reading the KV cache in place (issue 31).
from . import _paged_attention  # noqa: E402,F401
# rbln::grouped_mm_mxfp4: grouped GEMMs on MXFP4 weights (gpt-oss's experts).
from . import _mxfp4  # noqa: E402,F401
