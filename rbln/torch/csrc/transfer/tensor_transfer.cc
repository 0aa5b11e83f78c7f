#include "rbln/torch/csrc/transfer/tensor_transfer.h"

#include <ATen/ATen.h>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "rbln/core/counters.h"
#include "rbln/torch/csrc/device_state.h"
#include "rbln/torch/csrc/fallback_policy.h"
#include "rbln/torch/csrc/memory/pinned_host_allocator.h"
#include "rbln/torch/csrc/profiler/explain_signals.h"
#include "rbln/torch/csrc/streams/streams.h"
#include "rbln/torch/csrc/streams/sync_debug.h"

namespace rbln::torch_backend {
namespace {

bool SameLayout(const at::Tensor& a, const at::Tensor& b) {
  return a.scalar_type() == b.scalar_type() && a.sizes() == b.sizes() &&
         a.strides() == b.strides() && a.is_non_overlapping_and_dense();
}

uintptr_t Address(const at::Tensor& t) {
  return reinterpret_cast<uintptr_t>(t.data_ptr());
}

Counter* HostBounceCounter() {
  static Counter* c = CounterRegistry::Global().Get("runtime/host_bounce_copies");
  return c;
}

// Bytes from element 0 of the view to its last element.
int64_t SpanBytes(const at::Tensor& t) { return SpanElements(t) * t.itemsize(); }

// Queues `src` -> `dst` as an asynchronous DMA when SPEC L1 allows it;
// returns false (having done nothing) when it does not.
bool TryCopyAsync(const at::Tensor& src, const at::Tensor& dst) {
  const bool src_dev = !src.is_cpu(), dst_dev = !dst.is_cpu();
  if (src_dev == dst_dev) return false;  // Device copies run inline.
  if (src.scalar_type() != dst.scalar_type() || src.sizes() != dst.sizes() ||
      !src.is_contiguous() || !dst.is_contiguous()) {
    return false;
  }
  const at::Tensor& host = src_dev ? dst : src;
  const at::Tensor& device = src_dev ? src : dst;
  if (!IsPinnedHostPtr(host.data_ptr())) return false;
  runtime::DeviceStream& stream =
      RuntimeStream(CurrentStream(device.device().index()));
  // The transfer owns a reference to the host storage until it finished.
  auto keep_alive = std::make_shared<c10::Storage>(host.storage());
  runtime::StorageManager& storage = RuntimeOrThrow().storage();
  const absl::StatusOr<bool> started =
      src_dev ? storage.ReadToHostAsync(dst.data_ptr(), Address(src), dst.nbytes(),
                                        stream, std::move(keep_alive))
              : storage.WriteFromHostAsync(Address(dst), src.data_ptr(), dst.nbytes(),
                                           stream, std::move(keep_alive));
  if (!started.ok()) ThrowIfErrorOn(device.device(), started.status());
  return *started;
}

// SPEC L4: a synchronous host copy first completes the device's pending
// asynchronous transfers (they may use the same host buffers).
void CompletePendingTransfers(const at::Tensor& device_tensor) {
  const c10::DeviceIndex device = device_tensor.device().index();
  if (RuntimeOrThrow().NpuBusy(PhysicalNpu(device))) {
    CheckSynchronize("a synchronous copy (it waits for pending non_blocking copies)",
                     device_tensor.device());
    SynchronizeDeviceStreams(device);
  }
}

// A CPU tensor with `device_tensor`'s sizes, strides and dtype holding the
// device's bytes of its span: a device read (a host-latest storage is
// uploaded first) and one D2H DMA, as the source of a device copy.
at::Tensor ReadSpanFromDevice(const at::Tensor& device_tensor) {
  at::Tensor flat = at::empty({SpanElements(device_tensor)},
                              device_tensor.options().device(at::kCPU));
  if (flat.numel() > 0) {
    CheckHostRead(Address(device_tensor), flat.nbytes(), /*always_device=*/true);
    ThrowIfErrorOn(device_tensor.device(),
                   RuntimeOrThrow().storage().ReadFromDevice(
                       flat.data_ptr(), Address(device_tensor), flat.nbytes()));
  }
  return flat.as_strided(device_tensor.sizes(), device_tensor.strides(), 0);
}

}  // namespace

int64_t SpanElements(const at::Tensor& t) {
  if (t.numel() == 0) return 0;
  int64_t last = 0;
  for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
  return last + 1;
}

at::Tensor DownloadSpan(const at::Tensor& device_tensor) {
  at::Tensor flat = at::empty({SpanElements(device_tensor)},
                              device_tensor.options().device(at::kCPU));
  if (flat.numel() > 0) {
    CheckHostRead(Address(device_tensor), flat.nbytes());
    ThrowIfError(RuntimeOrThrow().storage().ReadToHost(
        flat.data_ptr(), Address(device_tensor), flat.nbytes()));
  }
  return flat.as_strided(device_tensor.sizes(), device_tensor.strides(), 0);
}

void UploadSpan(const at::Tensor& host_span, const at::Tensor& device_tensor) {
  const int64_t n = SpanElements(device_tensor);
  if (n == 0) return;
  ThrowIfError(RuntimeOrThrow().storage().WriteFromHost(
      Address(device_tensor), host_span.data_ptr(), n * device_tensor.itemsize()));
}

void CopyWithDevice(const at::Tensor& src, const at::Tensor& dst,
                    bool non_blocking) {
  if (dst.numel() == 0) return;
  runtime::StorageManager& storage = RuntimeOrThrow().storage();
  const bool src_dev = !src.is_cpu(), dst_dev = !dst.is_cpu();
  if (non_blocking && TryCopyAsync(src, dst)) return;
  if (src_dev != dst_dev) CompletePendingTransfers(src_dev ? src : dst);
  if (src_dev && !dst_dev) {  // D2H
    if (SameLayout(src, dst)) {
      CheckHostRead(Address(src), dst.nbytes());
      ThrowIfError(storage.ReadToHost(dst.data_ptr(), Address(src), dst.nbytes()));
    } else {
      const_cast<at::Tensor&>(dst).copy_(DownloadSpan(src));
    }
    return;
  }
  if (!src_dev && dst_dev) {  // H2D
    if (SameLayout(src, dst)) {
      ThrowIfError(storage.WriteFromHost(Address(dst), src.data_ptr(), dst.nbytes()));
    } else {
      // Read-modify-write of the destination's span keeps the bytes between
      // strided elements intact.
      at::Tensor span = dst.is_contiguous()
                            ? at::empty(dst.sizes(), dst.options().device(at::kCPU))
                            : DownloadSpan(dst);
      span.copy_(src);
      UploadSpan(span, dst);
    }
    return;
  }
  // D2D, also between logical devices: one storage manager owns every NPU of
  // the process, so its DMA engine copies between them without the host.
  if (SameLayout(src, dst)) {
    ThrowIfErrorOn(dst.device(),
                   storage.CopyOnDevice(Address(dst), Address(src), dst.nbytes()));
    return;
  }
  // Same dtype, any strides (views, broadcasts): the DMA engine's strided
  // descriptors copy on the device (SPEC K2).
  if (src.scalar_type() == dst.scalar_type() && !src.is_complex()) {
    const at::Tensor from = src.expand_as(dst);
    const absl::Status copied = storage.CopyStridedOnDevice(
        Address(dst), dst.strides(), Address(from), from.strides(), dst.sizes(),
        dst.itemsize());
    if (copied.ok()) return;
    if (copied.code() != absl::StatusCode::kFailedPrecondition) {
      ThrowIfErrorOn(dst.device(), copied);
    }
    // The engine cannot do this copy (overlapping ranges: a tensor copied
    // into a view of itself): the strided_copy_error fallback bounces it
    // through the host, unless TORCH_RBLN_DISABLE_FALLBACK forbids it (SPEC I6).
    CheckFallbackAllowed(
        FallbackCategory::kStridedCopyError, "aten::copy_",
        absl::StrFormat("copying a %s tensor of shape [%s] and strides [%s] into a %s "
                        "tensor of shape [%s] and strides [%s] on %s: the device's "
                        "strided-copy engine cannot do it: %s; copy from src.clone() "
                        "to keep it on the device",
                        c10::toString(src.scalar_type()), absl::StrJoin(src.sizes(), ", "),
                        absl::StrJoin(src.strides(), ", "), c10::toString(dst.scalar_type()),
                        absl::StrJoin(dst.sizes(), ", "), absl::StrJoin(dst.strides(), ", "),
                        dst.device().str(), copied.message()));
  }
  // Converting copies (and overlapping ones) bounce through the host
  // (SPEC K3's host_bounce). Like every device copy they copy device data:
  // the source is read from device memory by a real D2H DMA (a host-latest
  // source is uploaded first, as for the DMA engine's copies), converted on
  // the host, and written into the destination as a host write (a lazy
  // destination stays host-latest until its first device use).
  TORCH_WARN_ONCE(
      "rbln: copying a ", src.scalar_type(), " tensor of shape ", src.sizes(),
      " into a ", dst.scalar_type(), " tensor of shape ", dst.sizes(),
      " on the device went through host memory (device->host->device), because "
      "it converts the dtype or the two views overlap. This is slow; to avoid "
      "it, convert dtypes on the CPU before uploading (or after downloading) "
      "and copy between non-overlapping tensors (e.g. from src.contiguous()). "
      "Shown once per process; explain() counts every such copy as host_bounce.");
  HostBounceCounter()->Increment();
  FireHostBounce(SpanBytes(src));
  const at::Tensor host_src = ReadSpanFromDevice(src);
  // A destination with gaps between its elements keeps the gap bytes: read
  // its span first. A dense one is overwritten whole.
  at::Tensor host_dst =
      dst.is_non_overlapping_and_dense()
          ? at::empty_strided(dst.sizes(), dst.strides(), dst.options().device(at::kCPU))
          : DownloadSpan(dst);
  host_dst.copy_(host_src);
  UploadSpan(host_dst, dst);
}

}  // namespace rbln::torch_backend
