// The simulated NPU runtime of this process: the NPUs of the device profile,
// their memory and per-chiplet heaps, the DMA engine and the executor.
//
// Placement: an allocation lives on one chiplet, the one with the most free
// memory at the time (ties: lowest index), so small tensors spread over the
// card. The error of a failed allocation names the NPU, the chiplet, the size
// requested and what is free there (SPEC E7).
#ifndef RBLN_RUNTIME_RUNTIME_H_
#define RBLN_RUNTIME_RUNTIME_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "rbln/core/device_profile.h"
#include "rbln/runtime/address_space.h"
#include "rbln/runtime/chiplet_heap.h"
#include "rbln/runtime/device_memory.h"
#include "rbln/runtime/dma_engine.h"
#include "rbln/runtime/executor.h"

namespace rbln::runtime {

struct DeviceAllocation {
  uintptr_t address = 0;
  int npu = 0;
  int chiplet = 0;
  uint64_t size = 0;  // Rounded to the allocation unit.
};

class Runtime {
 public:
  // The process-wide runtime, made from the environment's device profile at
  // the first call. A bad environment is reported by every call.
  static absl::StatusOr<Runtime*> Get();

  static absl::StatusOr<std::unique_ptr<Runtime>> Create(
      const DeviceProfile& profile);

  const DeviceProfile& profile() const { return profile_; }
  int num_npus() const { return profile_.num_npus; }

  // OutOfRange with the valid range when `npu` is not an NPU of this process.
  absl::Status CheckNpuIndex(int npu) const;

  absl::StatusOr<DeviceAllocation> Allocate(int npu, uint64_t nbytes);
  absl::Status Free(uintptr_t address);

  uint64_t UsedBytes(int npu, int chiplet) const;
  uint64_t FreeBytes(int npu, int chiplet) const;

  DmaEngine& dma() { return dma_; }
  Executor& executor() { return executor_; }
  const AddressSpace& address_space() const { return address_space_; }

 private:
  struct Npu {
    std::unique_ptr<DeviceMemory> memory;
    std::vector<std::unique_ptr<ChipletHeap>> chiplets;
  };

  Runtime(const DeviceProfile& profile, std::vector<Npu> npus);
  static std::vector<const DeviceMemory*> Memories(const std::vector<Npu>& npus);

  const DeviceProfile profile_;
  const std::vector<Npu> npus_;
  const AddressSpace address_space_;
  DmaEngine dma_;
  Executor executor_;
};

}  // namespace rbln::runtime

#endif  // RBLN_RUNTIME_RUNTIME_H_
