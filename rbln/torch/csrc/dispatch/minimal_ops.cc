// Ops with their own rbln implementation (SPEC G1): factories, views,
// resize, copies and scalar reads. They move metadata or call the runtime;
// none of them dereferences device memory on the host.
#include <ATen/EmptyTensor.h>
#include <ATen/ATen.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_local_scalar_dense_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_cpu_dispatch.h>
#include <ATen/ops/set_cpu_dispatch.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "rbln/torch/csrc/device_state.h"
#include "rbln/torch/csrc/dispatch/device_cast.h"
#include "rbln/torch/csrc/dispatch/device_fill.h"
#include "rbln/torch/csrc/memory/device_allocator.h"
#include "rbln/torch/csrc/memory/storage_resize.h"
#include "rbln/torch/csrc/streams/sync_debug.h"
#include "rbln/torch/csrc/transfer/tensor_transfer.h"

namespace rbln::torch_backend {
namespace {

constexpr c10::DispatchKeySet kRblnKeys(c10::DispatchKey::PrivateUse1);

// The device of an rbln factory call, after checking what rbln can make.
c10::Device CheckedFactoryDevice(std::optional<c10::Device> device,
                                 std::optional<c10::Layout> layout,
                                 std::optional<bool> pin_memory) {
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided,
              "rbln: only strided tensors are supported");
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory),
              "rbln: only CPU tensors can be pinned");
  c10::Device dev = c10::device_or_default(device);
  TORCH_CHECK(dev.type() == c10::DeviceType::PrivateUse1,
              "rbln: expected an rbln device, got ", dev);
  if (!dev.has_index()) dev = c10::Device(dev.type(), CurrentDevice());
  CheckDeviceIndex(dev.index());
  return dev;
}

at::Tensor EmptyMemoryFormat(c10::IntArrayRef size,
                             std::optional<c10::ScalarType> dtype,
                             std::optional<c10::Layout> layout,
                             std::optional<c10::Device> device,
                             std::optional<bool> pin_memory,
                             std::optional<c10::MemoryFormat> memory_format) {
  const c10::Device dev = CheckedFactoryDevice(device, layout, pin_memory);
  const c10::DeviceGuard guard(dev);
  return at::detail::empty_generic(size, GetDeviceAllocator(), kRblnKeys,
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor EmptyStrided(c10::IntArrayRef size, c10::IntArrayRef stride,
                        std::optional<c10::ScalarType> dtype,
                        std::optional<c10::Layout> layout,
                        std::optional<c10::Device> device,
                        std::optional<bool> pin_memory) {
  const c10::Device dev = CheckedFactoryDevice(device, layout, pin_memory);
  const c10::DeviceGuard guard(dev);
  return at::detail::empty_strided_generic(size, stride, GetDeviceAllocator(),
                                           kRblnKeys, c10::dtype_or_default(dtype));
}

at::Tensor AsStrided(const at::Tensor& self, c10::SymIntArrayRef size,
                     c10::SymIntArrayRef stride,
                     std::optional<c10::SymInt> storage_offset) {
  return at::cpu::as_strided_symint(self, size, stride, std::move(storage_offset));
}

at::Tensor View(const at::Tensor& self, c10::SymIntArrayRef size) {
  return at::native::view(self, C10_AS_INTARRAYREF_SLOW(size));
}

at::Tensor ReshapeAlias(const at::Tensor& self, c10::SymIntArrayRef size,
                        c10::SymIntArrayRef stride) {
  return at::native::_reshape_alias(self, C10_AS_INTARRAYREF_SLOW(size),
                                    C10_AS_INTARRAYREF_SLOW(stride));
}

// unfold has backend kernels rather than a composite one; ATen's native
// kernel only computes sizes and strides and calls as_strided (SPEC K1).
at::Tensor Unfold(const at::Tensor& self, int64_t dimension, int64_t size, int64_t step) {
  return at::native::unfold(self, dimension, size, step);
}

const at::Tensor& Resize(const at::Tensor& self, c10::SymIntArrayRef size,
                         std::optional<at::MemoryFormat> memory_format) {
  c10::TensorImpl* impl = self.unsafeGetTensorImpl();
  const c10::IntArrayRef sizes = C10_AS_INTARRAYREF_SLOW(size);
  if (self.sizes() == sizes && !memory_format) return self;
  impl->set_sizes_contiguous(sizes);
  if (memory_format) impl->empty_tensor_restride(*memory_format);
  const size_t needed = at::detail::computeStorageNbytes(
      self.sizes(), self.strides(), self.itemsize(), self.storage_offset());
  if (needed > self.storage().nbytes()) ResizeStorageBytes(self.storage(), needed);
  return self;
}

// Dtype conversions between rbln tensors avoid the host bounce where
// device_cast.h allows; every other copy is the runtime's.
void Copy(const at::Tensor& src, const at::Tensor& dst, bool non_blocking = false) {
  if (TryConvertWithoutBounce(src, dst)) return;
  CopyWithDevice(src, dst, non_blocking);
}

at::Tensor CopyFrom(const at::Tensor& self, const at::Tensor& dst,
                    bool non_blocking) {
  Copy(self, dst, non_blocking);
  return dst;
}

at::Tensor CopyFromAndResize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.sizes() != self.sizes()) {
    if (dst.is_cpu()) {
      at::native::resize_(dst, self.sizes(), std::nullopt);
    } else {
      Resize(dst, c10::fromIntArrayRefSlow(self.sizes()), std::nullopt);
    }
  }
  Copy(self, dst);
  return dst;
}

at::Scalar LocalScalarDense(const at::Tensor& self) {
  const SyncOpScope scope("aten::_local_scalar_dense", " (Tensor.item())");
  return at::native::_local_scalar_dense_cpu(DownloadSpan(self));
}

// fill_ and zero_ of a storage whose latest bytes are on the device run on
// the device (device_fill.h). Otherwise they write through the host copy: a
// tensor made by torch.ones/zeros/full is host work that touches no device
// memory until a device op uses it (SPEC D1, D4).
at::Tensor& FillScalar(at::Tensor& self, const at::Scalar& value) {
  if (self.numel() == 0) return self;
  if (TryFillOnDevice(self, value)) return self;
  if (self.is_non_overlapping_and_dense()) {
    at::Tensor host = at::empty(self.sizes(), self.options().device(at::kCPU));
    host.fill_(value);
    CopyWithDevice(host, self);
    return self;
  }
  // A view with gaps or repeated elements (x[:, ::2], an expand): fill its
  // span's host copy through the same view, as the CPU's fill_ allows
  // either, keeping the bytes between its elements.
  at::Tensor span = DownloadSpan(self);
  span.fill_(value);
  UploadSpan(span, self);
  return self;
}

at::Tensor& Zero(at::Tensor& self) { return FillScalar(self, 0); }

// `Module._apply` (behind `.to()`, `.half()`) and `Tensor.data = ...` ask
// this before moving a parameter in place. TensorImpl's own answer counts
// only CPU, CUDA and the other built-in backends as dense, so between CPU
// and rbln `.to("rbln")` would make a new Parameter per module and untie
// shared weights (lm_head / embeddings). A dense CPU and a dense rbln tensor
// are both plain TensorImpls, so shallow_copy_from between them is sound:
// the Parameter objects are kept, as on CUDA.
bool HasCompatibleShallowCopyType(const at::Tensor& self,
                                  const at::Tensor& from) {
  auto dense_cpu_or_rbln = [](const at::Tensor& t) {
    return t.layout() == c10::Layout::Strided &&
           (t.key_set().has(c10::DispatchKey::CPU) ||
            t.key_set().has(c10::DispatchKey::PrivateUse1));
  };
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(
             from.key_set()) ||
         (dense_cpu_or_rbln(self) && dense_cpu_or_rbln(from));
}

at::Tensor& SetSourceTensor(at::Tensor& self, const at::Tensor& source) {
  return at::native::set_tensor_(self, source);
}

at::Tensor& SetSourceStorage(at::Tensor& self, at::Storage source) {
  return at::native::set_(self, source);
}

at::Tensor& SetSourceStorageOffset(at::Tensor& self, at::Storage storage,
                                   int64_t offset, c10::IntArrayRef size,
                                   c10::IntArrayRef stride) {
  return at::cpu::set_(self, storage, offset, size, stride);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", EmptyMemoryFormat);
  m.impl("empty_strided", EmptyStrided);
  m.impl("as_strided", AsStrided);
  m.impl("view", View);
  m.impl("_reshape_alias", ReshapeAlias);
  m.impl("unfold", Unfold);
  m.impl("resize_", Resize);
  m.impl("_copy_from", CopyFrom);
  m.impl("_copy_from_and_resize", CopyFromAndResize);
  m.impl("_local_scalar_dense", LocalScalarDense);
  m.impl("fill_.Scalar", FillScalar);
  m.impl("zero_", Zero);
  m.impl("set_.source_Tensor", SetSourceTensor);
  m.impl("set_.source_Storage", SetSourceStorage);
  m.impl("set_.source_Storage_storage_offset", SetSourceStorageOffset);
  m.impl("_has_compatible_shallow_copy_type", HasCompatibleShallowCopyType);
}

}  // namespace
}  // namespace rbln::torch_backend
