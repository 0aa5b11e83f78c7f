// Moving tensor data between host and device through the runtime's DMA
// engine. Device memory is never dereferenced on the host.
#ifndef RBLN_TORCH_CSRC_TENSOR_TRANSFER_H_
#define RBLN_TORCH_CSRC_TENSOR_TRANSFER_H_

#include <ATen/core/Tensor.h>

namespace rbln::torch_backend {

// Elements from element 0 of the view to its last element, inclusive (0 for
// an empty tensor): the storage span a strided view covers.
int64_t SpanElements(const at::Tensor& t);

// A CPU tensor with the same sizes/strides/dtype holding a copy of the bytes
// `device_tensor` spans (one D2H of that span).
at::Tensor DownloadSpan(const at::Tensor& device_tensor);

// Writes the span of `host_span` (as returned by DownloadSpan, possibly
// modified) back to `device_tensor`'s memory (one H2D).
void UploadSpan(const at::Tensor& host_span, const at::Tensor& device_tensor);

// Copies `src` into `dst` where at least one is an rbln tensor; handles
// dtype conversion, broadcasting and strides.
//
// With `non_blocking`, a host<->device copy is queued as an asynchronous
// DMA on the device's current stream exactly when SPEC L1 holds: same
// sizes and dtype, both contiguous, the host tensor's memory comes from the
// RBLN pinned allocator, and for host->device the destination storage is
// still one flat device region (bind_device_memory() and no op use since,
// SPEC L2, L3). Both buffers must stay alive and untouched until the
// stream passed the copy (SPEC L5; the host storage is kept alive by the
// transfer itself, the device storage waits for it before it is freed).
// Every other copy is synchronous and first completes the device's pending
// asynchronous transfers (SPEC L4).
void CopyWithDevice(const at::Tensor& src, const at::Tensor& dst,
                    bool non_blocking = false);

}  // namespace rbln::torch_backend

#endif  // RBLN_TORCH_CSRC_TENSOR_TRANSFER_H_
