// fill_/zero_ of a tensor whose storage's latest bytes are on the device
// (SPEC G1): the compiler's fill_strided op writes the scalar into the
// view's box in device memory, in place, so neither a download nor an
// upload happens. A lazy storage (host-latest, or no device memory yet)
// keeps the host fill: filling it on the device would first upload bytes
// that are about to be overwritten (SPEC D1, D4).
#ifndef RBLN_TORCH_CSRC_DISPATCH_DEVICE_FILL_H_
#define RBLN_TORCH_CSRC_DISPATCH_DEVICE_FILL_H_

#include <ATen/core/Tensor.h>

namespace rbln::torch_backend {

// Fills `self` (an rbln tensor with elements) with `value` on the device and
// returns true when its storage is device-latest or in sync and its dtype is
// a compiled-kernel dtype; returns false, having done nothing, otherwise
// (the caller fills on the host).
bool TryFillOnDevice(const at::Tensor& self, const at::Scalar& value);

}  // namespace rbln::torch_backend

#endif  // RBLN_TORCH_CSRC_DISPATCH_DEVICE_FILL_H_
