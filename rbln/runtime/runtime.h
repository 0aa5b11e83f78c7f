// The simulated NPU runtime of this process: the NPUs of the device profile,
// their memory and per-chiplet heaps, the DMA engine and the executor.
//
// Physical memory: each chiplet has a heap and a caching allocator on top
// (SPEC E1, E5). Placement: a storage's physical block lives on one chiplet,
// the one with the fewest allocated bytes when the block is acquired (ties:
// lowest index), so tensors spread over the card by load. A block never
// spans chiplets, so a storage larger than free memory on its chiplet fails
// even when the card as a whole has room; the error names the NPU, the
// chiplet, the size requested and what is free there and in total (SPEC E7).
// Users only see virtual addresses (StorageManager).
#ifndef RBLN_RUNTIME_RUNTIME_H_
#define RBLN_RUNTIME_RUNTIME_H_

#include <cstdint>
#include <memory>
#include <vector>

#include <functional>
#include <map>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "rbln/core/device_profile.h"
#include "rbln/runtime/caching_allocator.h"
#include "rbln/runtime/address_space.h"
#include "rbln/runtime/chiplet_heap.h"
#include "rbln/runtime/device_memory.h"
#include "rbln/runtime/device_stream.h"
#include "rbln/runtime/dma_engine.h"
#include "rbln/runtime/executor.h"
#include "rbln/runtime/physical_memory.h"
#include "rbln/runtime/stats_publisher.h"
#include "rbln/runtime/virtual_storage.h"

namespace rbln::runtime {

struct RuntimeOptions {
  // Acquire physical memory when a storage is created (SPEC D1).
  bool eager_malloc = false;
  // Publish per-chiplet statistics for rbln-smi (the process-wide runtime).
  bool publish_stats = false;
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
  absl::StatusOr<DeviceAllocation> AllocatePhysical(int npu, uint64_t nbytes, int chiplet,
                                                    AllocationContext context) override;
  absl::Status FreePhysical(const DeviceAllocation& block) override;
  absl::StatusOr<void*> HostView(const DeviceAllocation& block) override;
  absl::Status SetProgramOwned(const DeviceAllocation& block, bool owned) override;

  // Device memory reserved from / still free in a chiplet's heap.
  uint64_t UsedBytes(int npu, int chiplet) const;
  uint64_t FreeBytes(int npu, int chiplet) const;

  // Caching-allocator statistics of one chiplet, and of a whole NPU with its
  // exact concurrent peaks (not the sum of the chiplets' peaks).
  AllocatorStats ChipletStats(int npu, int chiplet) const;
  AllocatorStats NpuStats(int npu) const ABSL_LOCKS_EXCLUDED(totals_mu_);
  std::vector<SegmentInfo> ChipletSnapshot(int npu, int chiplet) const;
  // Device address of a chiplet's first byte: segment and block offsets of
  // ChipletSnapshot() are relative to it; AllocationEvent addresses are not.
  uintptr_t ChipletBase(int npu, int chiplet) const;
  void ResetPeakStats(int npu) ABSL_LOCKS_EXCLUDED(totals_mu_);
  void ResetAccumulatedStats(int npu) ABSL_LOCKS_EXCLUDED(totals_mu_);

  // Returns cached blocks of every chiplet to the heaps, then runs every
  // registered cache dropper (SPEC E1: the warm cache of compiled programs
  // and the view-recipe cache are owned by layers above the runtime).
  void EmptyCache() ABSL_LOCKS_EXCLUDED(totals_mu_, droppers_mu_);
  void RegisterCacheDropper(std::function<void()> dropper)
      ABSL_LOCKS_EXCLUDED(droppers_mu_);

  // Limits every chiplet of `npu` to `fraction` [0, 1] of its memory for this
  // process's caching allocators (set_per_process_memory_fraction): an
  // allocation that would reserve more fails as an OOM that says so.
  // InvalidArgument outside [0, 1].
  absl::Status SetMemoryFraction(int npu, double fraction);
  double MemoryFraction(int npu) const;

  // Nanoseconds this process's programs ran on a chiplet since the runtime
  // was made (published for rbln-smi as busy_ns; torch.rbln.utilization).
  int64_t BusyNs(int npu, int chiplet) const;

  // Sends every allocator event of every chiplet to `observer` (not owned;
  // null stops them). See allocation_observer.h for what it may do.
  void SetAllocationObserver(AllocationObserver* observer);

  // The stream `id` of NPU `npu` (0 is the default stream), made at its
  // first use and alive as long as the runtime (SPEC M1, M2).
  DeviceStream& Stream(int npu, int64_t id) ABSL_LOCKS_EXCLUDED(streams_mu_);
  // Blocks until every stream of `npu` finished its queued work (async
  // transfers, fences, event markers), then returns blocks held back by
  // record_stream (SPEC M3). Returns the first error a stream kept.
  absl::Status SynchronizeNpu(int npu) ABSL_LOCKS_EXCLUDED(streams_mu_);
  // Does any stream of `npu` still have queued work?
  bool NpuBusy(int npu) const ABSL_LOCKS_EXCLUDED(streams_mu_);

  StorageManager& storage() { return storage_; }
  DmaEngine& dma() { return dma_; }
  Executor& executor() { return executor_; }
  const AddressSpace& address_space() const { return address_space_; }

 private:
  struct Npu {
    std::unique_ptr<DeviceMemory> memory;
    std::vector<std::unique_ptr<ChipletHeap>> chiplets;
    std::vector<std::unique_ptr<ChipletCachingAllocator>> caches;
  };

  // Recomputes an NPU's totals after a change: currents and sums from the
  // chiplets, peaks as the running maximum of the total current.
  // Refreshes the NPU totals after chiplet `chiplet` changed (every chiplet
  // when -1); only a changed chiplet's allocator is locked and published.
  void UpdateTotals(int npu, int chiplet = -1) ABSL_LOCKS_EXCLUDED(totals_mu_);

  Runtime(const DeviceProfile& profile, RuntimeOptions options,
          std::vector<Npu> npus);
  static std::vector<const DeviceMemory*> Memories(const std::vector<Npu>& npus);

  const DeviceProfile profile_;
  const std::vector<Npu> npus_;
  const AddressSpace address_space_;
  DmaEngine dma_;
  StorageManager storage_;
  Executor executor_;

  mutable absl::Mutex totals_mu_;
  std::vector<AllocatorStats> totals_ ABSL_GUARDED_BY(totals_mu_);
  // The last statistics read from each chiplet's allocator, per NPU.
  std::vector<std::vector<AllocatorStats>> chiplet_stats_ ABSL_GUARDED_BY(totals_mu_);
  // Null unless options.publish_stats; published under totals_mu_ so the
  // last write is the latest state.
  std::unique_ptr<StatsPublisher> publisher_ ABSL_GUARDED_BY(totals_mu_);
  std::vector<double> memory_fractions_ ABSL_GUARDED_BY(totals_mu_);
  // By npu * chiplets_per_npu + chiplet.
  std::vector<int64_t> busy_ns_ ABSL_GUARDED_BY(totals_mu_);
  absl::Mutex droppers_mu_;
  std::vector<std::function<void()>> droppers_ ABSL_GUARDED_BY(droppers_mu_);
  // Last member: streams stop (draining their tasks, which use dma_ and
  // storage_) before anything else is destroyed.
  mutable absl::Mutex streams_mu_;
  std::map<std::pair<int, int64_t>, std::unique_ptr<DeviceStream>> streams_
      ABSL_GUARDED_BY(streams_mu_);
};

}  // namespace rbln::runtime

#endif  // RBLN_RUNTIME_RUNTIME_H_
