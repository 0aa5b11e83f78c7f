// Dtype conversions between rbln tensors (`x.half()`, `x.float()`,
// `x.to(torch.bfloat16)`, `dst.copy_(src)` across dtypes) without the host
// bounce of SPEC K3. Between the floating dtypes (float16, bfloat16,
// float32) the conversion happens where the source's latest bytes are:
//   - a device-latest or in-sync source is converted on the device by a
//     compiled cast program (the compiler's to_dtype op) that reads the
//     source in place -- a view through its storage span, replayed as the
//     program's first node (SPEC K2's machinery) -- and writes a contiguous
//     destination in place (a strided one through a temporary and the DMA
//     engine's strided copy);
//   - a host-latest source (a lazy tensor no device op has used yet, e.g.
//     the parameters right after `model.to("rbln")`) is converted in host
//     memory, so no transfer happens at all: the destination stays
//     host-latest until its first device use uploads it (SPEC D1, D2).
// Conversions to or from integer and bool dtypes keep K3's bounce, as the
// seed measures it (SPEC N4's int32 -> float16 line).
#ifndef RBLN_TORCH_CSRC_DISPATCH_DEVICE_CAST_H_
#define RBLN_TORCH_CSRC_DISPATCH_DEVICE_CAST_H_

#include <ATen/core/Tensor.h>

namespace rbln::torch_backend {

// Is a conversion from `from` to `to` one TryConvertWithoutBounce takes?
bool ConvertsWithoutBounce(c10::ScalarType from, c10::ScalarType to);

// Copies `src` into `dst` (rbln tensors of one device, different dtypes,
// `src` broadcastable to `dst`) without the host bounce and returns true;
// returns false, having done nothing, when the dtypes, devices or an
// overlap between the two rule it out (the caller then bounces).
bool TryConvertWithoutBounce(const at::Tensor& src, const at::Tensor& dst);

}  // namespace rbln::torch_backend

#endif  // RBLN_TORCH_CSRC_DISPATCH_DEVICE_CAST_H_
