// The device address space of all simulated NPUs: which NPU owns an address,
// and the host-accessible view of it for the DMA engine and the executor.
#ifndef RBLN_RUNTIME_ADDRESS_SPACE_H_
#define RBLN_RUNTIME_ADDRESS_SPACE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "rbln/runtime/device_memory.h"

namespace rbln::runtime {

class AddressSpace {
 public:
  explicit AddressSpace(std::vector<const DeviceMemory*> npus)
      : npus_(std::move(npus)) {}

  // The NPU holding [address, address + nbytes), or NotFound.
  absl::StatusOr<const DeviceMemory*> Owner(uintptr_t address,
                                            uint64_t nbytes) const;
  // Host-accessible view of a device range (never handed to user code).
  absl::StatusOr<void*> Translate(uintptr_t address, uint64_t nbytes) const;

 private:
  std::vector<const DeviceMemory*> npus_;
};

}  // namespace rbln::runtime

#endif  // RBLN_RUNTIME_ADDRESS_SPACE_H_
