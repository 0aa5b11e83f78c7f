#include "rbln/torch/csrc/device_allocator.h"

#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "rbln/torch/csrc/device_state.h"

namespace rbln::torch_backend {
namespace {

using c10::CachingDeviceAllocator::DeviceStats;
constexpr size_t kAggregate =
    static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);

class RblnDeviceAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    const c10::DeviceIndex device = CurrentDevice();
    const c10::Device dev(c10::DeviceType::PrivateUse1, device);
    if (nbytes == 0) return c10::DataPtr(nullptr, dev);
    runtime::Runtime& rt = RuntimeOrThrow();
    absl::StatusOr<runtime::DeviceAllocation> a = rt.Allocate(device, nbytes);
    if (!a.ok()) {
      {
        absl::MutexLock lock(&mu_);
        StatsFor(device).num_ooms++;
      }
      ThrowStatus(a.status());
    }
    {
      absl::MutexLock lock(&mu_);
      blocks_[a->address] = Block{device, a->size, nbytes};
      DeviceStats& s = StatsFor(device);
      s.allocation[kAggregate].increase(1);
      s.segment[kAggregate].increase(1);
      s.active[kAggregate].increase(1);
      s.allocated_bytes[kAggregate].increase(a->size);
      s.reserved_bytes[kAggregate].increase(a->size);
      s.active_bytes[kAggregate].increase(a->size);
      s.requested_bytes[kAggregate].increase(nbytes);
      s.num_device_alloc++;
    }
    void* ptr = reinterpret_cast<void*>(a->address);
    return c10::DataPtr(ptr, ptr, &Delete, dev);
  }

  c10::DeleterFnPtr raw_deleter() const override { return &Delete; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    ThrowIfError(RuntimeOrThrow().dma().DeviceToDevice(
        reinterpret_cast<uintptr_t>(dest), reinterpret_cast<uintptr_t>(src),
        count));
  }

  bool initialized() override { return RuntimeCommitted(); }
  // Nothing is cached yet: freed blocks go straight back to the runtime.
  void emptyCache(c10::MempoolId_t /*mempool_id*/) override {}
  void recordStream(const c10::DataPtr&, c10::Stream) override {}

  DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    absl::MutexLock lock(&mu_);
    return StatsFor(device);
  }
  void resetAccumulatedStats(c10::DeviceIndex device) override {
    absl::MutexLock lock(&mu_);
    DeviceStats& s = StatsFor(device);
    for (auto* arr : {&s.allocation, &s.segment, &s.active, &s.inactive_split,
                      &s.allocated_bytes, &s.reserved_bytes, &s.active_bytes,
                      &s.inactive_split_bytes, &s.requested_bytes}) {
      for (auto& stat : *arr) stat.reset_accumulated();
    }
    s.num_alloc_retries = 0;
    s.num_ooms = 0;
    s.num_device_alloc = 0;
    s.num_device_free = 0;
  }
  void resetPeakStats(c10::DeviceIndex device) override {
    absl::MutexLock lock(&mu_);
    DeviceStats& s = StatsFor(device);
    for (auto* arr : {&s.allocation, &s.segment, &s.active, &s.inactive_split,
                      &s.allocated_bytes, &s.reserved_bytes, &s.active_bytes,
                      &s.inactive_split_bytes, &s.requested_bytes}) {
      for (auto& stat : *arr) stat.reset_peak();
    }
  }
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    runtime::Runtime& rt = RuntimeOrThrow();
    CheckDeviceIndex(device);
    size_t free = 0;
    for (int c = 0; c < rt.profile().chiplets_per_npu; ++c) {
      free += rt.FreeBytes(device, c);
    }
    return {free, rt.profile().memory_per_npu()};
  }

  c10::DeviceIndex DeviceOf(const void* address) {
    absl::MutexLock lock(&mu_);
    auto it = blocks_.find(reinterpret_cast<uintptr_t>(address));
    return it == blocks_.end() ? -1 : it->second.device;
  }

 private:
  struct Block {
    c10::DeviceIndex device;
    uint64_t size;       // Rounded to the allocation unit.
    uint64_t requested;  // As asked.
  };

  static void Delete(void* ptr);

  DeviceStats& StatsFor(c10::DeviceIndex device)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (device >= static_cast<c10::DeviceIndex>(stats_.size())) {
      stats_.resize(device + 1);
    }
    return stats_[device];
  }

  void Free(void* ptr) {
    const uintptr_t address = reinterpret_cast<uintptr_t>(ptr);
    {
      absl::MutexLock lock(&mu_);
      auto it = blocks_.find(address);
      if (it == blocks_.end()) return;
      DeviceStats& s = StatsFor(it->second.device);
      s.allocation[kAggregate].decrease(1);
      s.segment[kAggregate].decrease(1);
      s.active[kAggregate].decrease(1);
      s.allocated_bytes[kAggregate].decrease(it->second.size);
      s.reserved_bytes[kAggregate].decrease(it->second.size);
      s.active_bytes[kAggregate].decrease(it->second.size);
      s.requested_bytes[kAggregate].decrease(it->second.requested);
      s.num_device_free++;
      blocks_.erase(it);
    }
    // A deleter must not throw; a failed free would be a runtime bug.
    (void)RuntimeOrThrow().Free(address);
  }

  absl::Mutex mu_;
  absl::flat_hash_map<uintptr_t, Block> blocks_ ABSL_GUARDED_BY(mu_);
  std::vector<DeviceStats> stats_ ABSL_GUARDED_BY(mu_);
};

RblnDeviceAllocator g_allocator;

void RblnDeviceAllocator::Delete(void* ptr) { g_allocator.Free(ptr); }

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_allocator);

}  // namespace

c10::DeviceAllocator* GetDeviceAllocator() { return &g_allocator; }

c10::DeviceIndex DeviceOfAddress(const void* address) {
  return g_allocator.DeviceOf(address);
}

}  // namespace rbln::torch_backend
