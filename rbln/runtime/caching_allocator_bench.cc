// Cost of one alloc+free pair in the caching allocator against malloc/free
// measured in the same run, for a size mix like an eager PyTorch workload's:
// mostly small tensors, some activations, a few multi-MiB buffers.
//
//   bazel-bin/rbln/runtime/caching_allocator_bench [pairs per run]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <vector>

#include "rbln/runtime/caching_allocator.h"
#include "rbln/runtime/chiplet_heap.h"

namespace rbln::runtime {
namespace {

constexpr uint64_t kKiB = uint64_t{1} << 10;
constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr int kRuns = 5;
constexpr size_t kWindow = 64;

std::vector<uint64_t> SizeMix(size_t n) {
  std::mt19937_64 rng(7);
  std::vector<uint64_t> sizes(n);
  for (uint64_t& size : sizes) {
    const int kind = std::uniform_int_distribution<int>(0, 99)(rng);
    if (kind < 70) {
      size = std::uniform_int_distribution<uint64_t>(256, 256 * kKiB)(rng);
    } else if (kind < 90) {
      size = std::uniform_int_distribution<uint64_t>(256 * kKiB, kMiB)(rng);
    } else {
      size = std::uniform_int_distribution<uint64_t>(kMiB, 8 * kMiB)(rng);
    }
  }
  return sizes;
}

// Keeps the compiler from eliding a malloc/free pair.
inline void Escape(void* p) { asm volatile("" : : "g"(p) : "memory"); }

// Best (lowest) ns per pair over kRuns runs of `pairs` pairs each.
double BestNsPerPair(int64_t pairs, const std::function<void(int64_t)>& run) {
  run(pairs / 10 + 1);  // Warm up: fill caches and free lists.
  double best = 1e300;
  for (int r = 0; r < kRuns; ++r) {
    const auto start = std::chrono::steady_clock::now();
    run(pairs);
    const auto end = std::chrono::steady_clock::now();
    const double ns =
        std::chrono::duration<double, std::nano>(end - start).count();
    best = std::min(best, ns / static_cast<double>(pairs));
  }
  return best;
}

void Check(bool ok) {
  if (!ok) {
    std::fprintf(stderr, "allocation failed\n");
    std::exit(1);
  }
}

int Main(int argc, char** argv) {
  const int64_t pairs = argc > 1 ? std::atoll(argv[1]) : 200000;
  if (pairs <= 0) {
    std::fprintf(stderr, "usage: %s [pairs per run > 0]\n", argv[0]);
    return 2;
  }
  const std::vector<uint64_t> sizes = SizeMix(4096);
  const size_t mask = sizes.size() - 1;  // A power of two.

  // A rebel100 chiplet: 36 GiB, 4 KiB pages. The heap is bookkeeping only.
  ChipletHeap heap(36 * kGiB, 4096);
  ChipletCachingAllocator allocator(&heap);

  // Pattern 1: free right after allocating.
  const double cache_pair = BestNsPerPair(pairs, [&](int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      absl::StatusOr<uint64_t> offset = allocator.Allocate(sizes[i & mask]);
      Check(offset.ok() && allocator.Free(*offset).ok());
    }
  });
  const double malloc_pair = BestNsPerPair(pairs, [&](int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      void* p = std::malloc(sizes[i & mask]);
      Check(p != nullptr);
      Escape(p);
      std::free(p);
    }
  });

  // Pattern 2: a window of live blocks; each step frees the oldest.
  const double cache_window = BestNsPerPair(pairs, [&](int64_t n) {
    std::vector<uint64_t> ring(kWindow);
    for (size_t k = 0; k < kWindow; ++k) {
      absl::StatusOr<uint64_t> offset = allocator.Allocate(sizes[k]);
      Check(offset.ok());
      ring[k] = *offset;
    }
    for (int64_t i = 0; i < n; ++i) {
      uint64_t& slot = ring[i % kWindow];
      Check(allocator.Free(slot).ok());
      absl::StatusOr<uint64_t> offset = allocator.Allocate(sizes[i & mask]);
      Check(offset.ok());
      slot = *offset;
    }
    for (uint64_t offset : ring) Check(allocator.Free(offset).ok());
  });
  const double malloc_window = BestNsPerPair(pairs, [&](int64_t n) {
    std::vector<void*> ring(kWindow);
    for (size_t k = 0; k < kWindow; ++k) ring[k] = std::malloc(sizes[k]);
    for (int64_t i = 0; i < n; ++i) {
      void*& slot = ring[i % kWindow];
      std::free(slot);
      slot = std::malloc(sizes[i & mask]);
      Check(slot != nullptr);
      Escape(slot);
    }
    for (void* p : ring) std::free(p);
  });

  const AllocatorStats stats = allocator.stats();
  std::printf(
      "caching allocator bench: %lld pairs per run, best of %d runs, sizes "
      "256 B..8 MiB (70%% <= 256 KiB, 20%% <= 1 MiB, 10%% <= 8 MiB)\n",
      static_cast<long long>(pairs), kRuns);
  std::printf("%-22s %12s %12s %16s\n", "pattern", "caching ns", "malloc ns",
              "caching/malloc");
  std::printf("%-22s %12.1f %12.1f %16.2f\n", "alloc then free", cache_pair,
              malloc_pair, cache_pair / malloc_pair);
  std::printf("%-22s %12.1f %12.1f %16.2f\n", "window of 64 live",
              cache_window, malloc_window, cache_window / malloc_window);
  std::printf(
      "segments taken from the heap: %lld (%lld MiB reserved at peak), "
      "alloc retries: %lld\n",
      static_cast<long long>(stats.num_device_alloc),
      static_cast<long long>(stats.reserved_bytes.peak / kMiB),
      static_cast<long long>(stats.num_alloc_retries));
  return 0;
}

}  // namespace
}  // namespace rbln::runtime

int main(int argc, char** argv) { return rbln::runtime::Main(argc, argv); }
