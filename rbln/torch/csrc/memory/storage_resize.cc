#include "rbln/torch/csrc/memory/storage_resize.h"

#include <algorithm>
#include <vector>

#include <c10/core/DeviceGuard.h>
#include <c10/core/StorageImpl.h>

#include "rbln/torch/csrc/device_state.h"

namespace rbln::torch_backend {

void ResizeStorageBytes(const c10::Storage& storage, size_t new_bytes) {
  c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
  TORCH_CHECK(impl->resizable(), "rbln: trying to resize storage that is not resizable");
  const size_t old_bytes = impl->nbytes();
  if (new_bytes == old_bytes) return;
  c10::DeviceGuard guard(impl->data_ptr().device());
  c10::DataPtr fresh = impl->allocator()->allocate(new_bytes);
  const size_t keep = std::min(old_bytes, new_bytes);
  if (keep > 0) {
    runtime::StorageManager& storage = RuntimeOrThrow().storage();
    const uintptr_t from = reinterpret_cast<uintptr_t>(impl->data());
    const uintptr_t to = reinterpret_cast<uintptr_t>(fresh.get());
    absl::StatusOr<runtime::StorageInfo> info = storage.Info(from);
    if (!info.ok()) ThrowStatus(info.status());
    if (info->state == runtime::DataState::kDeviceLatest) {
      ThrowIfError(storage.CopyOnDevice(to, from, keep));
    } else if (info->state != runtime::DataState::kEmpty) {
      // The latest bytes are on the host: keep them there (no device use).
      std::vector<char> bytes(keep);
      ThrowIfError(storage.ReadToHost(bytes.data(), from, keep));
      ThrowIfError(storage.WriteFromHost(to, bytes.data(), keep));
    }
  }
  impl->set_data_ptr_noswap(std::move(fresh));
  impl->set_nbytes(new_bytes);
}

}  // namespace rbln::torch_backend
