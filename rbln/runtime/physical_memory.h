// Physical device memory as the storage layer sees it: blocks on one chiplet
// of one NPU and their host-accessible backing. The Runtime implements it.
#ifndef RBLN_RUNTIME_PHYSICAL_MEMORY_H_
#define RBLN_RUNTIME_PHYSICAL_MEMORY_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "rbln/runtime/allocation_observer.h"

namespace rbln::runtime {

struct DeviceAllocation {
  uintptr_t address = 0;  // Physical device address (never shown to users).
  int npu = 0;
  int chiplet = 0;
  uint64_t size = 0;  // Rounded to the allocation unit.
};

class PhysicalMemory {
 public:
  virtual ~PhysicalMemory() = default;
  // A block on `chiplet`, or on a chiplet of the implementation's choosing
  // when `chiplet` is kAnyChiplet. `context` says who the block is for
  // (allocation_observer.h; null for runtime-internal memory).
  static constexpr int kAnyChiplet = -1;
  virtual absl::StatusOr<DeviceAllocation> AllocatePhysical(int npu, uint64_t nbytes,
                                                            int chiplet,
                                                            AllocationContext context) = 0;
  virtual absl::Status FreePhysical(const DeviceAllocation& block) = 0;
  // The host-accessible view of a block, for the DMA engine and executor.
  virtual absl::StatusOr<void*> HostView(const DeviceAllocation& block) = 0;
  // Counts `block` as memory of a cached compiled program (reserved, not
  // allocated) or back as the user's (SPEC E2). Implementations without
  // statistics need not track it.
  virtual absl::Status SetProgramOwned(const DeviceAllocation& /*block*/, bool /*owned*/) {
    return absl::OkStatus();
  }
};

}  // namespace rbln::runtime

#endif  // RBLN_RUNTIME_PHYSICAL_MEMORY_H_
