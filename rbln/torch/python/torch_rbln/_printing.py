"""Printing an rbln tensor formats a CPU copy of it (SPEC D4).

PyTorch's printer computes on the tensor it prints: slices, `abs`, `min`,
`max`, `masked_select`, comparisons, and a conversion to float64
(`torch._tensor_str.tensor_totype`, plus `.float()` for half types). On an
rbln tensor each of those is a device op: a compile on first use, an upload
of host-latest data, and a dtype-converting device copy (the host bounce of
SPEC K3, with its warning) -- so printing would touch the NPU, which D4 rules
out. PyTorch copies xla/lazy/ipu/mtia tensors to the CPU before formatting
for the same reason (`_str_intern`); we do it for rbln where the contents are
formatted, `torch._tensor_str._tensor_str`, which `_str_intern` calls by its
module-global name. Everything else in the text (the `device='rbln:0'`
suffix, dtype, grad_fn, requires_grad, size= of empty tensors) is still
computed by PyTorch from the rbln tensor itself, so the text is what PyTorch
prints today. The copy costs one D2H of device-latest data and nothing for
host-latest or in-sync data.
"""

import torch._tensor_str as _tensor_str_module

from . import _C

_MARK = "_torch_rbln_formats_a_cpu_copy"


def install():
    """Wraps torch._tensor_str._tensor_str once per process."""
    original = _tensor_str_module._tensor_str
    if getattr(original, _MARK, False):
        return

    def _tensor_str(self, indent):
        if self.device.type == "rbln":
            # Named for torch.rbln.set_sync_debug_mode's reports.
            with _C._SyncOpScope("print(tensor) (formats a CPU copy)"):
                self = self.cpu()
        return original(self, indent)

    setattr(_tensor_str, _MARK, True)
    _tensor_str.__wrapped__ = original
    _tensor_str_module._tensor_str = _tensor_str
