// What the caching allocators did, as it happens: the events behind memory
// histories and snapshots (torch.rbln.memory._record_memory_history).
//
// The runtime knows nothing of who allocates. A caller that wants to know
// passes an AllocationContext with an allocation (StorageManager::Create,
// PhysicalMemory::AllocatePhysical): an opaque pointer the runtime keeps with
// the block, hands back in that block's events and in snapshots
// (BlockInfo::context), and releases with the block. The PyTorch layer puts
// the Python stack of the tensor's creation there.
#ifndef RBLN_RUNTIME_ALLOCATION_OBSERVER_H_
#define RBLN_RUNTIME_ALLOCATION_OBSERVER_H_

#include <cstdint>
#include <memory>

namespace rbln::runtime {

using AllocationContext = std::shared_ptr<const void>;

struct AllocationEvent {
  enum class Action {
    kAlloc,         // A block was handed out.
    kFree,          // A block went back to the cache.
    kSegmentAlloc,  // The allocator took a segment from the chiplet's heap.
    kSegmentFree,   // ... and gave one back (empty_cache, or to retry).
    kOom,           // An allocation failed; `address` is 0.
  };
  Action action;
  int npu = 0;
  int chiplet = 0;
  uint64_t address = 0;    // Physical device address of the block/segment.
  uint64_t size = 0;       // Bytes of the block/segment; kOom: requested.
  uint64_t requested = 0;  // kAlloc/kFree: the bytes asked for.
  uint64_t device_free = 0;  // kOom: bytes still free in the chiplet's heap.
  // kAlloc/kFree: the context the block was allocated with (may be null).
  const AllocationContext* context = nullptr;
};

// Receives every event synchronously, in the allocating or freeing thread,
// while the chiplet's allocator lock is held: implementations must be quick,
// must not block on other locks that runtime callers may hold, and must not
// call back into the runtime.
class AllocationObserver {
 public:
  virtual ~AllocationObserver() = default;
  virtual void OnAllocationEvent(const AllocationEvent& event) = 0;
};

}  // namespace rbln::runtime

#endif  // RBLN_RUNTIME_ALLOCATION_OBSERVER_H_
