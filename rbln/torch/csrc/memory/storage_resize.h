// Growing an rbln storage: new device block, device-to-device copy of the old
// bytes, swap. (ATen's CPU resize would memcpy through device addresses.)
#ifndef RBLN_TORCH_CSRC_STORAGE_RESIZE_H_
#define RBLN_TORCH_CSRC_STORAGE_RESIZE_H_

#include <c10/core/Storage.h>

namespace rbln::torch_backend {

void ResizeStorageBytes(const c10::Storage& storage, size_t new_bytes);

}  // namespace rbln::torch_backend

#endif  // RBLN_TORCH_CSRC_STORAGE_RESIZE_H_
