// Moving tensor data between host and device through the runtime's DMA
// engine. Device memory is never dereferenced on the host.
#ifndef RBLN_TORCH_CSRC_TENSOR_TRANSFER_H_
#define RBLN_TORCH_CSRC_TENSOR_TRANSFER_H_

#include <ATen/core/Tensor.h>

namespace rbln::torch_backend {

// A CPU tensor with the same sizes/strides/dtype holding a copy of the bytes
// `device_tensor` spans (one D2H of that span).
at::Tensor DownloadSpan(const at::Tensor& device_tensor);

// Writes the span of `host_span` (as returned by DownloadSpan, possibly
// modified) back to `device_tensor`'s memory (one H2D).
void UploadSpan(const at::Tensor& host_span, const at::Tensor& device_tensor);

// Copies `src` into `dst` where at least one is an rbln tensor; handles
// dtype conversion, broadcasting and strides.
void CopyWithDevice(const at::Tensor& src, const at::Tensor& dst);

}  // namespace rbln::torch_backend

#endif  // RBLN_TORCH_CSRC_TENSOR_TRANSFER_H_
