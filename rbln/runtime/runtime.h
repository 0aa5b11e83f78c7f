// The simulated NPU runtime of this process: the NPUs of the device profile,
// their memory and per-chiplet heaps, the DMA engine and the executor.
//
// Placement: a storage's physical block lives on one chiplet, the one with
// the most free memory when the block is acquired (ties: lowest index), so
// tensors spread over the card by load. The error of a failed allocation
// names the NPU, the chiplet, the size requested and what is free there
// (SPEC E7). Users only see virtual addresses (StorageManager).
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
#include "rbln/runtime/physical_memory.h"
#include "rbln/runtime/virtual_storage.h"

namespace rbln::runtime {

struct RuntimeOptions {
  // Acquire physical memory when a storage is created (SPEC D1).
  bool eager_malloc = false;
};

class Runtime : public PhysicalMemory {
 public:
  // The process-wide runtime, made from the environment's device profile at
  // the first call. A bad environment is reported by every call.
  static absl::StatusOr<Runtime*> Get();

  // TORCH_RBLN_EAGER_MALLOC is read here, once.
  static absl::StatusOr<RuntimeOptions> OptionsFromEnvironment();

  static absl::StatusOr<std::unique_ptr<Runtime>> Create(
      const DeviceProfile& profile, RuntimeOptions options = {});

  const DeviceProfile& profile() const { return profile_; }
  int num_npus() const { return profile_.num_npus; }

  // OutOfRange with the valid range when `npu` is not an NPU of this process.
  absl::Status CheckNpuIndex(int npu) const;

  // PhysicalMemory.
  absl::StatusOr<DeviceAllocation> AllocatePhysical(int npu,
                                                    uint64_t nbytes) override;
  absl::Status FreePhysical(const DeviceAllocation& block) override;
  absl::StatusOr<void*> HostView(const DeviceAllocation& block) override;

  uint64_t UsedBytes(int npu, int chiplet) const;
  uint64_t FreeBytes(int npu, int chiplet) const;

  StorageManager& storage() { return storage_; }
  DmaEngine& dma() { return dma_; }
  Executor& executor() { return executor_; }
  const AddressSpace& address_space() const { return address_space_; }

 private:
  struct Npu {
    std::unique_ptr<DeviceMemory> memory;
    std::vector<std::unique_ptr<ChipletHeap>> chiplets;
  };

  Runtime(const DeviceProfile& profile, RuntimeOptions options,
          std::vector<Npu> npus);
  static std::vector<const DeviceMemory*> Memories(const std::vector<Npu>& npus);

  const DeviceProfile profile_;
  const std::vector<Npu> npus_;
  const AddressSpace address_space_;
  DmaEngine dma_;
  StorageManager storage_;
  Executor executor_;
};

}  // namespace rbln::runtime

#endif  // RBLN_RUNTIME_RUNTIME_H_
