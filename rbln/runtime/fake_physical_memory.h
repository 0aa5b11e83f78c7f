// Test support: PhysicalMemory over one DeviceMemory with a heap per chiplet,
// blocks always on the chiplet named by `next_chiplet`.
#ifndef RBLN_RUNTIME_FAKE_PHYSICAL_MEMORY_H_
#define RBLN_RUNTIME_FAKE_PHYSICAL_MEMORY_H_

#include <memory>
#include <vector>

#include "rbln/runtime/address_space.h"
#include "rbln/runtime/chiplet_heap.h"
#include "rbln/runtime/device_memory.h"
#include "rbln/runtime/dma_engine.h"
#include "rbln/runtime/physical_memory.h"

namespace rbln::runtime {

class FakePhysicalMemory : public PhysicalMemory {
 public:
  explicit FakePhysicalMemory(int chiplets = 2, uint64_t per_chiplet = 1 << 20)
      : memory_(*DeviceMemory::Create(0, chiplets, per_chiplet)),
        space_({memory_.get()}),
        dma_(&space_) {
    for (int c = 0; c < chiplets; ++c) {
      heaps_.push_back(std::make_unique<ChipletHeap>(per_chiplet, 4096));
    }
  }

  absl::StatusOr<DeviceAllocation> AllocatePhysical(int npu, uint64_t nbytes, int chiplet,
                                                    AllocationContext /*context*/) override {
    const int c = chiplet == kAnyChiplet ? next_chiplet : chiplet;
    absl::StatusOr<uint64_t> offset = heaps_[c]->Allocate(nbytes);
    if (!offset.ok()) return offset.status();
    ++allocations;
    return DeviceAllocation{memory_->chiplet_base(c) + *offset, npu, c,
                            heaps_[c]->BlockSize(*offset)};
  }
  absl::Status FreePhysical(const DeviceAllocation& block) override {
    ++frees;
    return heaps_[block.chiplet]->Free(block.address -
                                       memory_->chiplet_base(block.chiplet));
  }
  absl::StatusOr<void*> HostView(const DeviceAllocation& block) override {
    return memory_->Translate(block.address, block.size);
  }

  DmaEngine* dma() { return &dma_; }
  uint64_t used(int chiplet) const { return heaps_[chiplet]->used_bytes(); }

  int next_chiplet = 0;
  int allocations = 0;
  int frees = 0;

 private:
  std::unique_ptr<DeviceMemory> memory_;
  AddressSpace space_;
  DmaEngine dma_;
  std::vector<std::unique_ptr<ChipletHeap>> heaps_;
};

}  // namespace rbln::runtime

#endif  // RBLN_RUNTIME_FAKE_PHYSICAL_MEMORY_H_
