#include "rbln/runtime/address_space.h"

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace rbln::runtime {

absl::StatusOr<const DeviceMemory*> AddressSpace::Owner(uintptr_t address,
                                                        uint64_t nbytes) const {
  for (const DeviceMemory* npu : npus_) {
    if (npu->Contains(address, nbytes)) return npu;
  }
  return absl::NotFoundError(absl::StrFormat(
      "rbln: 0x%x (+%d bytes) is not device memory of any NPU", address,
      nbytes));
}

absl::StatusOr<void*> AddressSpace::Translate(uintptr_t address,
                                              uint64_t nbytes) const {
  absl::StatusOr<const DeviceMemory*> npu = Owner(address, nbytes);
  if (!npu.ok()) return npu.status();
  return (*npu)->Translate(address, nbytes);
}

}  // namespace rbln::runtime
