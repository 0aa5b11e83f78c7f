// Per-chiplet caching allocator (SPEC E1, E4, E7), modelled on PyTorch's CUDA
// caching allocator (c10/cuda/CUDACachingAllocator.cpp).
//
// It takes *segments* from a ChipletHeap and carves *blocks* out of them.
// Freed blocks stay in the cache for reuse; only EmptyCache(), an allocation
// that would otherwise fail, or destruction give segments back to the heap.
//
// Policy:
//  - Sizes are rounded up to the heap's allocation unit; 0 bytes still takes
//    one unit (as in the heap).
//  - Requests of <= 1 MiB (after rounding) use the small pool, whose segments
//    are 2 MiB. Larger requests use the large pool, whose segments are 20 MiB
//    for requests < 10 MiB and the request rounded up to 2 MiB otherwise.
//    Pools never lend blocks to each other.
//  - A segment is never larger than the heap's capacity, so a tiny chiplet
//    still serves small requests. If the heap cannot give the preferred size,
//    a segment of exactly the rounded request is tried before giving up.
//  - Each pool's free blocks are searched best-fit, ordered by (size, offset).
//  - A found block is split when the remainder is >= one allocation unit
//    (small pool) or > 1 MiB (large pool); otherwise the whole block is handed
//    out and counted.
//  - A freed block merges with its free neighbours in the same segment; blocks
//    of different segments never merge, since each segment is its own heap
//    allocation.
//  - When the heap is exhausted, every fully free segment is returned to it
//    and the allocation is retried once (num_alloc_retries). If that fails,
//    num_ooms is counted and ResourceExhausted returned. A request larger than
//    the heap's capacity fails at once: no amount of releasing can serve it.
//
// Statistics follow c10::CachingDeviceAllocator::DeviceStats (the AGGREGATE
// entry only): allocated_bytes and active_bytes count the rounded sizes of
// live blocks, requested_bytes their requested sizes, reserved_bytes the bytes
// of all segments; inactive_split counts free blocks in segments that also
// hold other blocks, i.e. free memory that EmptyCache() cannot return.
//
// Program-owned blocks (SPEC E2): buffers a cached compiled program keeps
// (torch.compile constants) are marked with SetProgramOwned(). While marked,
// a block counts in program/program_bytes and in reserved_bytes, not in
// allocation/allocated/active/requested: users see it as reserved memory of
// the cache, as CUDA shows memory held by graph pools. Freeing a marked
// block releases it from program_bytes.
//
// A memory limit (SetMemoryLimit, from set_per_process_memory_fraction) caps
// reserved_bytes: a segment that would take the reserve beyond it is not
// taken from the heap, and the allocation fails as an OOM once the cache is
// flushed, as CUDA's allocator does with a memory fraction.
//
// Events (SetEventSink): every block handed out or freed, segment taken or
// returned, and OOM goes to the sink as it happens, with the block's
// AllocationContext, for memory histories (allocation_observer.h).
//
// Thread-safe: one mutex guards everything; it is held while calling the heap
// and the event sink.
#ifndef RBLN_RUNTIME_CACHING_ALLOCATOR_H_
#define RBLN_RUNTIME_CACHING_ALLOCATOR_H_

#include <array>
#include <cstdint>
#include <functional>
#include <set>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "rbln/runtime/allocation_observer.h"
#include "rbln/runtime/chiplet_heap.h"

namespace rbln::runtime {

// One statistic, as c10::CachingAllocator::Stat.
struct Stat {
  int64_t current = 0;
  int64_t peak = 0;
  int64_t allocated = 0;  // Sum of every increase since the last reset.
  int64_t freed = 0;      // Sum of every decrease since the last reset.

  void Increase(int64_t amount);
  void Decrease(int64_t amount);
  void ResetPeak() { peak = current; }
  void ResetAccumulated() {
    allocated = 0;
    freed = 0;
  }
  Stat& operator+=(const Stat& other);
};

// Statistics of one chiplet, with the meaning of
// c10::CachingDeviceAllocator::DeviceStats (AGGREGATE only).
struct AllocatorStats {
  Stat allocation;      // Live blocks handed out.
  Stat segment;         // Segments taken from the heap.
  Stat active;          // Live blocks (no stream-ordered frees here).
  Stat inactive_split;  // Free blocks in segments that hold other blocks too.
  Stat allocated_bytes;
  Stat reserved_bytes;
  Stat active_bytes;
  Stat inactive_split_bytes;
  Stat requested_bytes;
  Stat program;        // Live blocks owned by cached programs (not in allocation).
  Stat program_bytes;  // Their bytes (in reserved_bytes, not allocated_bytes).
  int64_t num_alloc_retries = 0;  // Heap exhaustions that flushed the cache.
  int64_t num_ooms = 0;           // Allocations that failed after that.
  int64_t num_device_alloc = 0;   // Segments taken from the heap.
  int64_t num_device_free = 0;    // Segments returned to the heap.

  // Sums everything, peaks included, for a card's totals: the sum of the
  // chiplets' peaks is an upper bound of the card's concurrent peak (E6).
  AllocatorStats& operator+=(const AllocatorStats& other);

  // Every Stat field, in declaration order, for field-wise updates.
  std::array<Stat*, 11> AllStats() {
    return {&allocation,     &segment,         &active,
            &inactive_split, &allocated_bytes, &reserved_bytes,
            &active_bytes,   &inactive_split_bytes, &requested_bytes,
            &program,        &program_bytes};
  }
};

struct BlockInfo {
  uint64_t offset;     // Within the chiplet.
  uint64_t size;       // Rounded.
  uint64_t requested;  // 0 for a free block.
  bool allocated;
  bool program_owned = false;
  AllocationContext context;  // What Allocate() was given (live blocks).
};

struct SegmentInfo {
  uint64_t offset;
  uint64_t size;
  bool small_pool;
  std::vector<BlockInfo> blocks;  // Sorted by offset; they tile the segment.
};

class ChipletCachingAllocator {
 public:
  // Request sizes and segment sizes of the policy above.
  static constexpr uint64_t kSmallSize = uint64_t{1} << 20;  // Largest small.
  static constexpr uint64_t kSmallBuffer = uint64_t{2} << 20;
  static constexpr uint64_t kLargeBuffer = uint64_t{20} << 20;
  static constexpr uint64_t kMinLargeAlloc = uint64_t{10} << 20;
  static constexpr uint64_t kRoundLarge = uint64_t{2} << 20;

  // `heap` is not owned and must outlive the allocator.
  explicit ChipletCachingAllocator(ChipletHeap* heap);
  // Returns every segment to the heap, including ones with live blocks: they
  // cannot be freed once the allocator is gone.
  ~ChipletCachingAllocator();

  ChipletCachingAllocator(const ChipletCachingAllocator&) = delete;
  ChipletCachingAllocator& operator=(const ChipletCachingAllocator&) = delete;

  // Offset (within the chiplet) of a block of at least `nbytes`.
  // ResourceExhausted when neither the cache nor the heap can serve it; the
  // message gives the requested and rounded sizes, the heap's free bytes and
  // the cached bytes, and the memory limit when it is what failed. The caller
  // adds which NPU and chiplet. The block keeps `context` until it is freed.
  absl::StatusOr<uint64_t> Allocate(uint64_t nbytes, AllocationContext context = nullptr)
      ABSL_LOCKS_EXCLUDED(mu_);
  // InvalidArgument if `offset` is not a live block (unknown or double free).
  absl::Status Free(uint64_t offset) ABSL_LOCKS_EXCLUDED(mu_);
  // Moves the live block at `offset` between the user's statistics
  // (allocated, active, requested) and the program-owned ones (program,
  // program_bytes); see the top comment. Marking twice is a no-op.
  // InvalidArgument if `offset` is not a live block.
  absl::Status SetProgramOwned(uint64_t offset, bool owned) ABSL_LOCKS_EXCLUDED(mu_);
  // Rounded size of the live block at `offset`, or 0.
  uint64_t BlockSize(uint64_t offset) const ABSL_LOCKS_EXCLUDED(mu_);

  // Returns every fully free segment to the heap.
  void EmptyCache() ABSL_LOCKS_EXCLUDED(mu_);

  // Caps reserved bytes at `bytes` (whole allocation units count); 0 lifts
  // the cap. Segments already reserved stay; the cap applies to new ones.
  void SetMemoryLimit(uint64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t memory_limit() const ABSL_LOCKS_EXCLUDED(mu_);

  // Events with `address` the offset within the chiplet and npu/chiplet
  // left 0 (the caller knows them); called under the allocator's mutex. An
  // empty function stops them.
  using EventSink = std::function<void(const AllocationEvent&)>;
  void SetEventSink(EventSink sink) ABSL_LOCKS_EXCLUDED(mu_);

  AllocatorStats stats() const ABSL_LOCKS_EXCLUDED(mu_);
  void ResetPeakStats() ABSL_LOCKS_EXCLUDED(mu_);
  // Zeroes the allocated/freed sums and the event counters.
  void ResetAccumulatedStats() ABSL_LOCKS_EXCLUDED(mu_);

  // Segments sorted by offset, each with its blocks sorted by offset.
  std::vector<SegmentInfo> Snapshot() const ABSL_LOCKS_EXCLUDED(mu_);
  // Reserved bytes in no live block (neither allocated nor program-owned).
  uint64_t cached_bytes() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Block;
  struct BlockBySize {
    bool operator()(const Block* a, const Block* b) const;
  };
  using Pool = std::set<Block*, BlockBySize>;

  // Bytes of a new segment for a request of `size` (already rounded).
  uint64_t SegmentSize(uint64_t size) const;
  // Takes the best-fitting free block of `pool` out of it, or nullptr.
  Block* TakeFreeBlock(Pool& pool, uint64_t size)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A new segment holding one unlisted free block, or nullptr when the heap
  // cannot give even `size` bytes.
  Block* NewSegment(bool small, uint64_t size)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Hands out `size` bytes of `block` (in no pool); splits off the rest if
  // the policy says so.
  uint64_t UseBlock(Block* block, uint64_t size, uint64_t requested,
                    AllocationContext context)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Merges `src` into `dst` if it is free; returns the bytes gained.
  uint64_t TryMerge(Block* dst, Block* src) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseFreeSegments() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Pool& PoolOf(const Block* block) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Would a new segment of `bytes` take reserved bytes beyond the limit?
  bool OverLimit(uint64_t bytes) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Emit(AllocationEvent::Action action, uint64_t offset, uint64_t size,
            uint64_t requested = 0, const AllocationContext* context = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  ChipletHeap* const heap_;
  const uint64_t max_segment_size_;  // Capacity, whole allocation units.

  mutable absl::Mutex mu_;
  Pool small_pool_ ABSL_GUARDED_BY(mu_);
  Pool large_pool_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, Block*> live_ ABSL_GUARDED_BY(mu_);
  AllocatorStats stats_ ABSL_GUARDED_BY(mu_);
  uint64_t limit_ ABSL_GUARDED_BY(mu_) = 0;  // 0: none.
  EventSink sink_ ABSL_GUARDED_BY(mu_);
};

}  // namespace rbln::runtime

#endif  // RBLN_RUNTIME_CACHING_ALLOCATOR_H_
