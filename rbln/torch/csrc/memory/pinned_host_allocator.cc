#include "rbln/torch/csrc/memory/pinned_host_allocator.h"

#include <ATen/core/CachingHostAllocator.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <map>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "rbln/core/counters.h"

namespace rbln::torch_backend {
namespace {

class PinnedRegions {
 public:
  void Add(const void* p, size_t n, bool owned) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    regions_[reinterpret_cast<uintptr_t>(p)] = Region{n, owned};
  }
  // Removes the region at `p`; returns its size and whether we own it.
  std::pair<size_t, bool> Remove(const void* p) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    auto it = regions_.find(reinterpret_cast<uintptr_t>(p));
    if (it == regions_.end()) return {0, false};
    std::pair<size_t, bool> r{it->second.size, it->second.owned};
    regions_.erase(it);
    return r;
  }
  bool Contains(const void* p) const ABSL_LOCKS_EXCLUDED(mu_) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    absl::MutexLock lock(&mu_);
    auto it = regions_.upper_bound(a);
    if (it == regions_.begin()) return false;
    --it;
    return a < it->first + it->second.size;
  }

 private:
  struct Region {
    size_t size;
    bool owned;
  };
  mutable absl::Mutex mu_;
  std::map<uintptr_t, Region> regions_ ABSL_GUARDED_BY(mu_);
};

PinnedRegions& Regions() {
  static auto* regions = new PinnedRegions();
  return *regions;
}

absl::Mutex g_stats_mu;
at::HostStats* Stats() ABSL_EXCLUSIVE_LOCKS_REQUIRED(g_stats_mu) {
  static auto* stats = new at::HostStats();
  return stats;
}

int64_t MicrosSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now() - start)
      .count();
}

void FreePinned(void* ptr) {
  auto [size, owned] = Regions().Remove(ptr);
  if (!owned) return;
  const auto start = std::chrono::steady_clock::now();
  munlock(ptr, size);
  munmap(ptr, size);
  const int64_t micros = MicrosSince(start);
  absl::MutexLock lock(&g_stats_mu);
  at::HostStats& s = *Stats();
  s.allocations.decrease(1);
  s.allocated_bytes.decrease(size);
  s.active_requests.decrease(1);
  s.active_bytes.decrease(size);
  ++s.num_host_free;
  s.host_free_time.increase(micros);
}

class PinnedHostAllocator final : public at::HostAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    if (nbytes == 0) return c10::DataPtr(nullptr, c10::Device(c10::kCPU));
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t size = (nbytes + page - 1) / page * page;
    const auto start = std::chrono::steady_clock::now();
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    TORCH_CHECK_WITH(OutOfMemoryError, p != MAP_FAILED,
                     "rbln: cannot allocate ", nbytes,
                     " bytes of pinned host memory: ", std::strerror(errno));
    if (mlock(p, size) != 0) {
      static Counter* failures =
          CounterRegistry::Global().Get("runtime/pinned_mlock_failures");
      failures->Increment();
    }
    Regions().Add(p, size, /*owned=*/true);
    {
      const int64_t micros = MicrosSince(start);
      absl::MutexLock lock(&g_stats_mu);
      at::HostStats& s = *Stats();
      s.allocations.increase(1);
      s.allocated_bytes.increase(size);
      s.active_requests.increase(1);
      s.active_bytes.increase(size);
      ++s.num_host_alloc;
      s.host_alloc_time.increase(micros);
    }
    static Counter* allocations =
        CounterRegistry::Global().Get("runtime/pinned_allocations");
    allocations->Increment();
    return c10::DataPtr(p, p, &FreePinned, c10::Device(c10::kCPU));
  }
  c10::DeleterFnPtr raw_deleter() const override { return &FreePinned; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }

  // Copies are synchronous for now, so no block waits on a stream.
  bool record_event(void*, void*, c10::Stream) override { return true; }
  void empty_cache() override {}  // Nothing is cached: frees unmap at once.
  at::HostStats get_stats() override { return PinnedHostStats(); }
  void reset_accumulated_stats() override { ResetPinnedHostStats(/*peak=*/false); }
  void reset_peak_stats() override { ResetPinnedHostStats(/*peak=*/true); }
};

PinnedHostAllocator g_pinned;

REGISTER_HOST_ALLOCATOR(at::kPrivateUse1, &g_pinned);

}  // namespace

c10::Allocator* GetPinnedHostAllocator() { return &g_pinned; }

bool IsPinnedHostPtr(const void* ptr) { return Regions().Contains(ptr); }

void RegisterPinnedRegion(const void* ptr, size_t nbytes) {
  Regions().Add(ptr, nbytes, /*owned=*/false);
}

void UnregisterPinnedRegion(const void* ptr) { Regions().Remove(ptr); }

at::HostStats PinnedHostStats() {
  absl::MutexLock lock(&g_stats_mu);
  return *Stats();
}

void ResetPinnedHostStats(bool peak) {
  absl::MutexLock lock(&g_stats_mu);
  at::HostStats& s = *Stats();
  for (c10::CachingAllocator::Stat* stat :
       {&s.allocations, &s.allocated_bytes, &s.active_requests, &s.active_bytes}) {
    if (peak) {
      stat->reset_peak();
    } else {
      stat->reset_accumulated();
    }
  }
  if (peak) {
    s.host_alloc_time.reset_peak();
    s.host_free_time.reset_peak();
  } else {
    s.host_alloc_time.reset_accumulated();
    s.host_free_time.reset_accumulated();
    s.num_host_alloc = 0;
    s.num_host_free = 0;
  }
}

}  // namespace rbln::torch_backend
