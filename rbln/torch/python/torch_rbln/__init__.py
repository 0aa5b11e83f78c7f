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

if getattr(torch, "rbln", None) is None:
    torch.utils.rename_privateuse1_backend("rbln")
    torch._register_device_module("rbln", _rbln)
    torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)
