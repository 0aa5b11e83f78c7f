// spec: E1, E2, E4, E5, E7
#include "rbln/runtime/caching_allocator.h"

#include <cstdint>
#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rbln/runtime/chiplet_heap.h"

namespace rbln::runtime {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kUnit = 4096;
constexpr uint64_t kKiB = uint64_t{1} << 10;
constexpr uint64_t kMiB = uint64_t{1} << 20;

uint64_t AllocOrDie(ChipletCachingAllocator& allocator, uint64_t nbytes) {
  absl::StatusOr<uint64_t> offset = allocator.Allocate(nbytes);
  EXPECT_TRUE(offset.ok()) << offset.status();
  return offset.value_or(~uint64_t{0});
}

TEST(ChipletCachingAllocatorTest, RoundsToAllocationUnit) {
  ChipletHeap heap(64 * kMiB, kUnit);
  ChipletCachingAllocator allocator(&heap);
  const uint64_t a = AllocOrDie(allocator, 1);
  const uint64_t b = AllocOrDie(allocator, kUnit + 1);
  const uint64_t c = AllocOrDie(allocator, 0);  // Still owns one unit.
  EXPECT_EQ(allocator.BlockSize(a), kUnit);
  EXPECT_EQ(allocator.BlockSize(b), 2 * kUnit);
  EXPECT_EQ(allocator.BlockSize(c), kUnit);
  EXPECT_EQ(allocator.BlockSize(a + kUnit / 2), 0u);  // Not a block start.

  const AllocatorStats stats = allocator.stats();
  EXPECT_EQ(stats.allocated_bytes.current, 4 * kUnit);
  EXPECT_EQ(stats.active_bytes.current, 4 * kUnit);
  EXPECT_EQ(stats.requested_bytes.current, 1 + kUnit + 1);
  EXPECT_EQ(stats.allocation.current, 3);
  // All three came from one small-pool segment.
  EXPECT_EQ(stats.segment.current, 1);
  EXPECT_EQ(stats.reserved_bytes.current, 2 * kMiB);
  EXPECT_EQ(heap.used_bytes(), 2 * kMiB);
  EXPECT_EQ(allocator.cached_bytes(), 2 * kMiB - 4 * kUnit);
}

TEST(ChipletCachingAllocatorTest, SplitsSegmentAndReusesFreedBlock) {
  ChipletHeap heap(64 * kMiB, kUnit);
  ChipletCachingAllocator allocator(&heap);
  const uint64_t a = AllocOrDie(allocator, kUnit);
  const uint64_t b = AllocOrDie(allocator, 2 * kUnit);
  EXPECT_EQ(b, a + kUnit);  // Carved from the same segment, in order.
  ASSERT_TRUE(allocator.Free(a).ok());
  // Best fit: a's block fits exactly, the segment's tail is larger.
  EXPECT_EQ(AllocOrDie(allocator, 100), a);
  const AllocatorStats stats = allocator.stats();
  EXPECT_EQ(stats.num_device_alloc, 1);
  EXPECT_EQ(stats.allocation.allocated, 3);
  EXPECT_EQ(stats.allocation.freed, 1);
}

TEST(ChipletCachingAllocatorTest, MergesFreedNeighboursWithinSegment) {
  ChipletHeap heap(64 * kMiB, kUnit);
  ChipletCachingAllocator allocator(&heap);
  const uint64_t a = AllocOrDie(allocator, kUnit);
  const uint64_t b = AllocOrDie(allocator, kUnit);
  const uint64_t c = AllocOrDie(allocator, kUnit);
  // Blocks a, b, c and the segment's free tail.
  EXPECT_EQ(allocator.stats().inactive_split.current, 1);
  EXPECT_EQ(allocator.stats().inactive_split_bytes.current,
            2 * kMiB - 3 * kUnit);

  ASSERT_TRUE(allocator.Free(a).ok());
  EXPECT_EQ(allocator.stats().inactive_split.current, 2);
  ASSERT_TRUE(allocator.Free(c).ok());  // Joins the tail.
  EXPECT_EQ(allocator.stats().inactive_split.current, 2);
  EXPECT_EQ(allocator.stats().inactive_split_bytes.current,
            2 * kMiB - kUnit);
  std::vector<SegmentInfo> snapshot = allocator.Snapshot();
  ASSERT_EQ(snapshot.size(), 1u);
  ASSERT_EQ(snapshot[0].blocks.size(), 3u);
  EXPECT_EQ(snapshot[0].blocks[2].offset, c);
  EXPECT_EQ(snapshot[0].blocks[2].size, 2 * kMiB - 2 * kUnit);

  ASSERT_TRUE(allocator.Free(b).ok());  // The segment is whole again.
  snapshot = allocator.Snapshot();
  ASSERT_EQ(snapshot.size(), 1u);
  ASSERT_EQ(snapshot[0].blocks.size(), 1u);
  EXPECT_EQ(snapshot[0].blocks[0].offset, a);
  EXPECT_EQ(snapshot[0].blocks[0].size, 2 * kMiB);
  EXPECT_FALSE(snapshot[0].blocks[0].allocated);
  EXPECT_EQ(allocator.stats().inactive_split.current, 0);
  EXPECT_EQ(allocator.stats().inactive_split_bytes.current, 0);
  EXPECT_EQ(allocator.cached_bytes(), 2 * kMiB);
}

TEST(ChipletCachingAllocatorTest, NeverMergesAcrossSegments) {
  // Two small segments adjacent in the heap stay two segments when free.
  ChipletHeap heap(64 * kMiB, kUnit);
  ChipletCachingAllocator allocator(&heap);
  const uint64_t a = AllocOrDie(allocator, kMiB);
  const uint64_t b = AllocOrDie(allocator, kMiB);
  const uint64_t c = AllocOrDie(allocator, kMiB);  // Second segment.
  EXPECT_EQ(c, a + 2 * kMiB);
  for (uint64_t offset : {a, b, c}) ASSERT_TRUE(allocator.Free(offset).ok());
  const std::vector<SegmentInfo> snapshot = allocator.Snapshot();
  ASSERT_EQ(snapshot.size(), 2u);
  EXPECT_EQ(snapshot[0].offset, a);
  EXPECT_EQ(snapshot[1].offset, c);
  for (const SegmentInfo& segment : snapshot) {
    EXPECT_TRUE(segment.small_pool);
    EXPECT_EQ(segment.size, 2 * kMiB);
    EXPECT_EQ(segment.blocks.size(), 1u);
  }
  // Neither free segment can serve 3 MiB, and pools do not share.
  const uint64_t big = AllocOrDie(allocator, 3 * kMiB);
  EXPECT_EQ(big, 4 * kMiB);
  EXPECT_EQ(allocator.stats().segment.current, 3);
}

TEST(ChipletCachingAllocatorTest, LargePoolSegmentSizesAndSplitRule) {
  ChipletHeap heap(256 * kMiB, kUnit);
  ChipletCachingAllocator allocator(&heap);
  // < 10 MiB: a 20 MiB segment, split (17 MiB remainder > 1 MiB).
  const uint64_t a = AllocOrDie(allocator, 3 * kMiB);
  EXPECT_EQ(allocator.stats().reserved_bytes.current, 20 * kMiB);
  EXPECT_EQ(allocator.BlockSize(a), 3 * kMiB);
  // The 17 MiB remainder serves 16.5 MiB whole: 0.5 MiB is not worth a split.
  const uint64_t b = AllocOrDie(allocator, 16 * kMiB + 512 * kKiB);
  EXPECT_EQ(b, a + 3 * kMiB);
  EXPECT_EQ(allocator.BlockSize(b), 17 * kMiB);
  EXPECT_EQ(allocator.stats().segment.current, 1);
  EXPECT_EQ(allocator.stats().inactive_split.current, 0);
  EXPECT_EQ(allocator.stats().allocated_bytes.current, 20 * kMiB);
  EXPECT_EQ(allocator.stats().requested_bytes.current,
            19 * kMiB + 512 * kKiB);
  // >= 10 MiB: the request rounded up to 2 MiB.
  const uint64_t c = AllocOrDie(allocator, 11 * kMiB + 1);
  EXPECT_EQ(allocator.BlockSize(c), 12 * kMiB);
  EXPECT_EQ(allocator.stats().reserved_bytes.current, 32 * kMiB);
  const std::vector<SegmentInfo> snapshot = allocator.Snapshot();
  ASSERT_EQ(snapshot.size(), 2u);
  EXPECT_FALSE(snapshot[0].small_pool);
  EXPECT_FALSE(snapshot[1].small_pool);
  EXPECT_EQ(snapshot[1].size, 12 * kMiB);
}

TEST(ChipletCachingAllocatorTest, TinyChipletServesSmallAllocations) {
  // 64 KiB: the 2 MiB small segment is capped at the capacity.
  ChipletHeap heap(64 * kKiB, kUnit);
  ChipletCachingAllocator allocator(&heap);
  std::vector<uint64_t> offsets;
  for (int i = 0; i < 16; ++i) offsets.push_back(AllocOrDie(allocator, 100));
  EXPECT_EQ(allocator.stats().segment.current, 1);
  EXPECT_EQ(heap.used_bytes(), 64 * kKiB);
  absl::StatusOr<uint64_t> full = allocator.Allocate(1);
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted);
  for (uint64_t offset : offsets) ASSERT_TRUE(allocator.Free(offset).ok());
  allocator.EmptyCache();
  EXPECT_EQ(heap.used_bytes(), 0u);
}

TEST(ChipletCachingAllocatorTest, FallsBackToExactSegmentWhenPreferredFails) {
  ChipletHeap heap(3 * kMiB, kUnit);
  ChipletCachingAllocator allocator(&heap);
  AllocOrDie(allocator, kMiB);
  AllocOrDie(allocator, kMiB);  // The first 2 MiB segment is full.
  // 2 MiB no longer fits in the heap; a 512 KiB segment does.
  const uint64_t c = AllocOrDie(allocator, 512 * kKiB);
  EXPECT_EQ(c, 2 * kMiB);
  const AllocatorStats stats = allocator.stats();
  EXPECT_EQ(stats.segment.current, 2);
  EXPECT_EQ(stats.reserved_bytes.current, 2 * kMiB + 512 * kKiB);
  EXPECT_EQ(stats.num_alloc_retries, 0);
  EXPECT_EQ(heap.used_bytes(), 2 * kMiB + 512 * kKiB);
}

TEST(ChipletCachingAllocatorTest, PeakAndResetPeak) {
  ChipletHeap heap(64 * kMiB, kUnit);
  ChipletCachingAllocator allocator(&heap);
  const uint64_t a = AllocOrDie(allocator, kMiB);
  const uint64_t b = AllocOrDie(allocator, kMiB);
  ASSERT_TRUE(allocator.Free(b).ok());
  AllocatorStats stats = allocator.stats();
  EXPECT_EQ(stats.allocated_bytes.current, kMiB);
  EXPECT_EQ(stats.allocated_bytes.peak, 2 * kMiB);
  EXPECT_EQ(stats.allocation.peak, 2);
  EXPECT_EQ(stats.requested_bytes.peak, 2 * kMiB);
  EXPECT_EQ(stats.reserved_bytes.peak, 2 * kMiB);

  allocator.ResetPeakStats();
  stats = allocator.stats();
  EXPECT_EQ(stats.allocated_bytes.peak, kMiB);
  EXPECT_EQ(stats.allocation.peak, 1);
  EXPECT_EQ(stats.reserved_bytes.peak, 2 * kMiB);  // Still reserved.
  EXPECT_EQ(stats.allocated_bytes.allocated, 2 * kMiB);  // Not accumulated.

  ASSERT_TRUE(allocator.Free(a).ok());
  allocator.EmptyCache();
  allocator.ResetPeakStats();
  stats = allocator.stats();
  EXPECT_EQ(stats.allocated_bytes.peak, 0);
  EXPECT_EQ(stats.reserved_bytes.peak, 0);
}

TEST(ChipletCachingAllocatorTest, AccumulatedCountersAndReset) {
  ChipletHeap heap(64 * kMiB, kUnit);
  ChipletCachingAllocator allocator(&heap);
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(allocator.Free(AllocOrDie(allocator, 3 * kUnit)).ok());
  }
  const uint64_t live = AllocOrDie(allocator, kUnit);
  AllocatorStats stats = allocator.stats();
  EXPECT_EQ(stats.allocation.allocated, 6);
  EXPECT_EQ(stats.allocation.freed, 5);
  EXPECT_EQ(stats.allocated_bytes.allocated, 16 * kUnit);
  EXPECT_EQ(stats.allocated_bytes.freed, 15 * kUnit);
  EXPECT_EQ(stats.requested_bytes.allocated, 16 * kUnit);
  EXPECT_EQ(stats.num_device_alloc, 1);  // Every reuse came from the cache.
  EXPECT_EQ(stats.segment.allocated, 1);

  allocator.ResetAccumulatedStats();
  stats = allocator.stats();
  EXPECT_EQ(stats.allocation.allocated, 0);
  EXPECT_EQ(stats.allocation.freed, 0);
  EXPECT_EQ(stats.allocated_bytes.allocated, 0);
  EXPECT_EQ(stats.num_device_alloc, 0);
  EXPECT_EQ(stats.allocation.current, 1);  // Current values survive.
  EXPECT_EQ(stats.allocated_bytes.current, kUnit);
  EXPECT_EQ(stats.allocated_bytes.peak, 3 * kUnit);

  ASSERT_TRUE(allocator.Free(live).ok());
  allocator.EmptyCache();
  stats = allocator.stats();
  EXPECT_EQ(stats.allocation.freed, 1);
  EXPECT_EQ(stats.num_device_free, 1);
  EXPECT_EQ(stats.segment.freed, 1);
}

TEST(ChipletCachingAllocatorTest, FragmentedSegmentNeedsNewSegment) {
  ChipletHeap heap(64 * kMiB, kUnit);
  ChipletCachingAllocator allocator(&heap);
  // Fill one 2 MiB small segment with 16 blocks of 128 KiB.
  std::vector<uint64_t> offsets;
  for (int i = 0; i < 16; ++i) {
    offsets.push_back(AllocOrDie(allocator, 128 * kKiB));
  }
  EXPECT_EQ(allocator.stats().segment.current, 1);
  EXPECT_EQ(allocator.stats().inactive_split.current, 0);
  // Free every other block: 1 MiB cached, in 128 KiB pieces.
  for (int i = 0; i < 16; i += 2) ASSERT_TRUE(allocator.Free(offsets[i]).ok());
  AllocatorStats stats = allocator.stats();
  EXPECT_EQ(stats.inactive_split.current, 8);
  EXPECT_EQ(stats.inactive_split_bytes.current, kMiB);
  EXPECT_EQ(allocator.cached_bytes(), kMiB);

  // 256 KiB fits in no piece: a second segment.
  AllocOrDie(allocator, 256 * kKiB);
  stats = allocator.stats();
  EXPECT_EQ(stats.segment.current, 2);
  EXPECT_EQ(stats.num_device_alloc, 2);
  // The fragmented segment cannot be returned; the new one is in use.
  allocator.EmptyCache();
  EXPECT_EQ(allocator.stats().segment.current, 2);
  EXPECT_EQ(heap.used_bytes(), 4 * kMiB);
  // A piece is reused exactly.
  EXPECT_EQ(AllocOrDie(allocator, 128 * kKiB), offsets[0]);
  EXPECT_EQ(allocator.stats().inactive_split.current, 8);  // 7 + new tail.
}

TEST(ChipletCachingAllocatorTest, EmptyCacheReturnsFreeSegmentsToHeap) {
  ChipletHeap heap(64 * kMiB, kUnit);
  ChipletCachingAllocator allocator(&heap);
  const uint64_t small = AllocOrDie(allocator, 4 * kKiB);
  // First, or it would be carved from the 20 MiB segment's free 15 MiB.
  const uint64_t kept = AllocOrDie(allocator, 12 * kMiB);
  const uint64_t large = AllocOrDie(allocator, 5 * kMiB);
  ASSERT_TRUE(allocator.Free(small).ok());
  ASSERT_TRUE(allocator.Free(large).ok());
  EXPECT_EQ(heap.used_bytes(), (2 + 20 + 12) * kMiB);
  EXPECT_EQ(allocator.cached_bytes(), 22 * kMiB);

  allocator.EmptyCache();
  EXPECT_EQ(heap.used_bytes(), 12 * kMiB);
  AllocatorStats stats = allocator.stats();
  EXPECT_EQ(stats.reserved_bytes.current, 12 * kMiB);
  EXPECT_EQ(stats.segment.current, 1);
  EXPECT_EQ(stats.num_device_free, 2);
  EXPECT_EQ(allocator.cached_bytes(), 0u);
  EXPECT_EQ(allocator.BlockSize(kept), 12 * kMiB);

  ASSERT_TRUE(allocator.Free(kept).ok());
  allocator.EmptyCache();
  EXPECT_EQ(heap.used_bytes(), 0u);
  stats = allocator.stats();
  EXPECT_EQ(stats.reserved_bytes.current, 0);
  EXPECT_EQ(stats.num_device_free, stats.num_device_alloc);
  EXPECT_TRUE(allocator.Snapshot().empty());
}

TEST(ChipletCachingAllocatorTest, HeapExhaustionFlushesCacheAndRetries) {
  ChipletHeap heap(8 * kMiB, kUnit);
  ChipletCachingAllocator allocator(&heap);
  // Four 2 MiB small segments fill the heap, then all go back to the cache
  // except one block.
  std::vector<uint64_t> offsets;
  for (int i = 0; i < 8; ++i) offsets.push_back(AllocOrDie(allocator, kMiB));
  EXPECT_EQ(heap.free_bytes(), 0u);
  for (int i = 1; i < 8; ++i) ASSERT_TRUE(allocator.Free(offsets[i]).ok());
  EXPECT_EQ(allocator.cached_bytes(), 7 * kMiB);

  // The large pool is empty and the heap full: the three fully free small
  // segments go back, the one holding offsets[0] stays.
  const uint64_t big = AllocOrDie(allocator, 5 * kMiB);
  EXPECT_EQ(big, 2 * kMiB);
  AllocatorStats stats = allocator.stats();
  EXPECT_EQ(stats.num_alloc_retries, 1);
  EXPECT_EQ(stats.num_ooms, 0);
  EXPECT_EQ(stats.num_device_free, 3);
  EXPECT_EQ(stats.segment.current, 2);
  // 6 MiB free is less than the preferred 8 MiB (20 MiB capped at the
  // capacity), so the segment is exactly the request.
  EXPECT_EQ(allocator.BlockSize(big), 5 * kMiB);
  EXPECT_EQ(heap.used_bytes(), 7 * kMiB);
  EXPECT_EQ(allocator.cached_bytes(), kMiB);  // Next to offsets[0].
}

TEST(ChipletCachingAllocatorTest, OutOfMemoryMessageAndCounters) {
  ChipletHeap heap(4 * kMiB, kUnit);
  ChipletCachingAllocator allocator(&heap);
  AllocOrDie(allocator, kMiB);  // A 2 MiB segment, half cached.
  absl::StatusOr<uint64_t> r = allocator.Allocate(3 * kMiB + 1);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(r.status().message(), HasSubstr("requested 3145729 bytes"));
  EXPECT_THAT(r.status().message(), HasSubstr("3149824 after rounding"));
  EXPECT_THAT(r.status().message(), HasSubstr("2097152 bytes free"));
  EXPECT_THAT(r.status().message(),
              HasSubstr("1048576 bytes are cached (reserved but unallocated)"));
  AllocatorStats stats = allocator.stats();
  EXPECT_EQ(stats.num_alloc_retries, 1);
  EXPECT_EQ(stats.num_ooms, 1);
  EXPECT_EQ(stats.allocation.current, 1);  // Nothing changed.
  EXPECT_EQ(stats.reserved_bytes.current, 2 * kMiB);

  // More than the whole chiplet: fails without flushing the cache.
  r = allocator.Allocate(5 * kMiB);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(r.status().message(), HasSubstr("requested 5242880 bytes"));
  stats = allocator.stats();
  EXPECT_EQ(stats.num_alloc_retries, 1);
  EXPECT_EQ(stats.num_ooms, 2);
  r = allocator.Allocate(~uint64_t{0});  // Rounding must not wrap around.
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(ChipletCachingAllocatorTest, DoubleAndUnknownFreeAreErrors) {
  ChipletHeap heap(64 * kMiB, kUnit);
  ChipletCachingAllocator allocator(&heap);
  const uint64_t a = AllocOrDie(allocator, 3 * kUnit);
  const uint64_t b = AllocOrDie(allocator, kUnit);
  EXPECT_EQ(allocator.Free(a + kUnit).code(),
            absl::StatusCode::kInvalidArgument);  // Inside a block.
  EXPECT_EQ(allocator.Free(60 * kMiB).code(),
            absl::StatusCode::kInvalidArgument);  // Never allocated.
  ASSERT_TRUE(allocator.Free(a).ok());
  const absl::Status twice = allocator.Free(a);
  EXPECT_EQ(twice.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(twice.message(), HasSubstr("double free"));
  const AllocatorStats stats = allocator.stats();
  EXPECT_EQ(stats.allocation.current, 1);
  EXPECT_EQ(stats.allocated_bytes.current, kUnit);
  EXPECT_EQ(allocator.BlockSize(b), kUnit);
  EXPECT_EQ(allocator.BlockSize(a), 0u);
}

TEST(ChipletCachingAllocatorTest, SnapshotListsSegmentsAndBlocksInOrder) {
  ChipletHeap heap(64 * kMiB, kUnit);
  ChipletCachingAllocator allocator(&heap);
  const uint64_t large = AllocOrDie(allocator, 2 * kMiB);  // Segment at 0.
  const uint64_t a = AllocOrDie(allocator, 10);            // Segment at 20 MiB.
  const uint64_t b = AllocOrDie(allocator, 5000);
  ASSERT_TRUE(allocator.Free(a).ok());
  const std::vector<SegmentInfo> snapshot = allocator.Snapshot();
  ASSERT_EQ(snapshot.size(), 2u);
  EXPECT_EQ(snapshot[0].offset, large);
  EXPECT_FALSE(snapshot[0].small_pool);
  EXPECT_EQ(snapshot[0].size, 20 * kMiB);
  ASSERT_EQ(snapshot[0].blocks.size(), 2u);
  EXPECT_TRUE(snapshot[0].blocks[0].allocated);
  EXPECT_EQ(snapshot[0].blocks[0].requested, 2 * kMiB);
  EXPECT_FALSE(snapshot[0].blocks[1].allocated);

  EXPECT_EQ(snapshot[1].offset, 20 * kMiB);
  EXPECT_TRUE(snapshot[1].small_pool);
  ASSERT_EQ(snapshot[1].blocks.size(), 3u);
  EXPECT_EQ(snapshot[1].blocks[0].offset, a);
  EXPECT_FALSE(snapshot[1].blocks[0].allocated);
  EXPECT_EQ(snapshot[1].blocks[0].requested, 0u);
  EXPECT_EQ(snapshot[1].blocks[1].offset, b);
  EXPECT_EQ(snapshot[1].blocks[1].size, 2 * kUnit);
  EXPECT_EQ(snapshot[1].blocks[1].requested, 5000u);
  EXPECT_TRUE(snapshot[1].blocks[1].allocated);
}

TEST(ChipletCachingAllocatorTest, ProgramOwnedBlocksCountAsReservedOnly) {
  // SPEC E2: a cached program's buffer is reserved, not allocated/active.
  ChipletHeap heap(64 * kMiB, kUnit);
  ChipletCachingAllocator allocator(&heap);
  const uint64_t user = AllocOrDie(allocator, kUnit);
  const uint64_t program = AllocOrDie(allocator, 3 * kUnit - 5);
  ASSERT_TRUE(allocator.SetProgramOwned(program, true).ok());
  ASSERT_TRUE(allocator.SetProgramOwned(program, true).ok());  // No-op.
  AllocatorStats stats = allocator.stats();
  EXPECT_EQ(stats.allocated_bytes.current, kUnit);
  EXPECT_EQ(stats.active_bytes.current, kUnit);
  EXPECT_EQ(stats.requested_bytes.current, kUnit);
  EXPECT_EQ(stats.allocation.current, 1);
  EXPECT_EQ(stats.active.current, 1);
  EXPECT_EQ(stats.program.current, 1);
  EXPECT_EQ(stats.program_bytes.current, 3 * kUnit);
  EXPECT_EQ(stats.reserved_bytes.current, 2 * kMiB);
  EXPECT_EQ(allocator.cached_bytes(), 2 * kMiB - 4 * kUnit);
  std::vector<SegmentInfo> snapshot = allocator.Snapshot();
  ASSERT_EQ(snapshot.size(), 1u);
  EXPECT_FALSE(snapshot[0].blocks[0].program_owned);
  EXPECT_TRUE(snapshot[0].blocks[1].program_owned);

  // Unmarking gives it back to the user's statistics.
  ASSERT_TRUE(allocator.SetProgramOwned(program, false).ok());
  stats = allocator.stats();
  EXPECT_EQ(stats.allocated_bytes.current, 4 * kUnit);
  EXPECT_EQ(stats.requested_bytes.current, 4 * kUnit - 5);
  EXPECT_EQ(stats.program_bytes.current, 0);

  // Freeing a marked block releases it from the program statistics only.
  ASSERT_TRUE(allocator.SetProgramOwned(program, true).ok());
  ASSERT_TRUE(allocator.Free(program).ok());
  stats = allocator.stats();
  EXPECT_EQ(stats.program.current, 0);
  EXPECT_EQ(stats.program_bytes.current, 0);
  EXPECT_EQ(stats.allocated_bytes.current, kUnit);
  EXPECT_EQ(stats.active.current, 1);
  EXPECT_EQ(stats.requested_bytes.current, kUnit);
  EXPECT_EQ(allocator.cached_bytes(), 2 * kMiB - kUnit);
  // The freed block is reusable like any other.
  EXPECT_EQ(AllocOrDie(allocator, 3 * kUnit), program);
  ASSERT_TRUE(allocator.Free(user).ok());

  absl::Status unknown = allocator.SetProgramOwned(12345 * kUnit, true);
  EXPECT_EQ(unknown.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unknown.message(), HasSubstr("not a live block"));
}

TEST(ChipletCachingAllocatorTest, DestructionReturnsEverySegment) {
  ChipletHeap heap(64 * kMiB, kUnit);
  {
    ChipletCachingAllocator allocator(&heap);
    AllocOrDie(allocator, 10);
    AllocOrDie(allocator, 12 * kMiB);
    ASSERT_TRUE(allocator.Free(AllocOrDie(allocator, 3 * kMiB)).ok());
    EXPECT_EQ(heap.used_bytes(), (2 + 12 + 20) * kMiB);
  }
  EXPECT_EQ(heap.used_bytes(), 0u);
}

TEST(AllocatorStatsTest, SumAddsCurrentPeaksAndCounters) {
  AllocatorStats a;
  a.allocated_bytes.Increase(100);
  a.allocated_bytes.Decrease(40);
  a.num_ooms = 1;
  AllocatorStats b;
  b.allocated_bytes.Increase(10);
  b.num_ooms = 2;
  b.num_device_alloc = 3;
  AllocatorStats total;
  total += a;
  total += b;
  EXPECT_EQ(total.allocated_bytes.current, 70);
  EXPECT_EQ(total.allocated_bytes.peak, 110);  // An upper bound (SPEC E6).
  EXPECT_EQ(total.allocated_bytes.allocated, 110);
  EXPECT_EQ(total.allocated_bytes.freed, 40);
  EXPECT_EQ(total.num_ooms, 3);
  EXPECT_EQ(total.num_device_alloc, 3);
}

// The per-process memory fraction (no SPEC ID; torch.cuda parity): the
// limit caps reserved bytes, and the OOM says it was the limit.
TEST(ChipletCachingAllocatorTest, MemoryLimitCapsReservedBytes) {
  ChipletHeap heap(64 * kMiB, kUnit);
  ChipletCachingAllocator allocator(&heap);
  allocator.SetMemoryLimit(3 * kMiB);
  EXPECT_EQ(allocator.memory_limit(), 3 * kMiB);
  // A 2 MiB small-pool segment fits under the limit; the next one would not,
  // so a request beyond the first segment takes an exact-size segment.
  AllocOrDie(allocator, kMiB);
  AllocOrDie(allocator, kMiB);
  AllocOrDie(allocator, kMiB / 2);
  EXPECT_LE(allocator.stats().reserved_bytes.current, 3 * kMiB);
  absl::StatusOr<uint64_t> over = allocator.Allocate(kMiB);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(over.status().message(), HasSubstr("per-process memory fraction"));
  EXPECT_THAT(over.status().message(), HasSubstr("3145728 reserved bytes"));
  EXPECT_EQ(allocator.stats().num_ooms, 1);
  // The heap itself had room: only the limit refused.
  EXPECT_GT(heap.free_bytes(), 32 * kMiB);
  allocator.SetMemoryLimit(0);
  EXPECT_TRUE(allocator.Allocate(kMiB).ok());
}

// Memory histories (no SPEC ID; torch.cuda parity): every block, segment
// and OOM event reaches the sink in order, with the block's context.
TEST(ChipletCachingAllocatorTest, EventSinkSeesBlocksSegmentsAndOoms) {
  ChipletHeap heap(4 * kMiB, kUnit);
  ChipletCachingAllocator allocator(&heap);
  std::vector<AllocationEvent> events;
  std::vector<const void*> contexts;
  allocator.SetEventSink([&](const AllocationEvent& e) {
    events.push_back(e);
    contexts.push_back(e.context != nullptr ? e.context->get() : nullptr);
  });
  auto context = std::make_shared<int>(7);
  absl::StatusOr<uint64_t> a = allocator.Allocate(100, context);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(context.use_count(), 2);  // The live block holds it.
  {
    const std::vector<SegmentInfo> segments = allocator.Snapshot();
    ASSERT_EQ(segments.size(), 1u);
    EXPECT_EQ(segments[0].blocks[0].context.get(), context.get());
  }
  ASSERT_TRUE(allocator.Free(*a).ok());
  EXPECT_EQ(context.use_count(), 1);  // Released with the block.
  EXPECT_FALSE(allocator.Allocate(8 * kMiB).ok());
  allocator.EmptyCache();
  using Action = AllocationEvent::Action;
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(events[0].action, Action::kSegmentAlloc);
  EXPECT_EQ(events[0].size, 2 * kMiB);
  EXPECT_EQ(events[1].action, Action::kAlloc);
  EXPECT_EQ(events[1].address, *a);
  EXPECT_EQ(events[1].size, kUnit);
  EXPECT_EQ(events[1].requested, 100u);
  EXPECT_EQ(contexts[1], context.get());
  EXPECT_EQ(events[2].action, Action::kFree);
  EXPECT_EQ(contexts[2], context.get());
  EXPECT_EQ(events[3].action, Action::kOom);
  EXPECT_EQ(events[3].size, 8 * kMiB);
  EXPECT_EQ(events[3].device_free, 2 * kMiB);
  EXPECT_EQ(events[4].action, Action::kSegmentFree);
  allocator.SetEventSink(nullptr);
  EXPECT_TRUE(allocator.Allocate(1).ok());
  EXPECT_EQ(events.size(), 5u);
}

}  // namespace
}  // namespace rbln::runtime
