#include "rbln/runtime/caching_allocator.h"

#include <algorithm>
#include <initializer_list>
#include <utility>
#include <vector>

#include <string>

#include "absl/strings/str_format.h"

namespace rbln::runtime {

void Stat::Increase(int64_t amount) {
  current += amount;
  peak = std::max(peak, current);
  allocated += amount;
}

void Stat::Decrease(int64_t amount) {
  current -= amount;
  freed += amount;
}

Stat& Stat::operator+=(const Stat& other) {
  current += other.current;
  peak += other.peak;
  allocated += other.allocated;
  freed += other.freed;
  return *this;
}

AllocatorStats& AllocatorStats::operator+=(const AllocatorStats& other) {
  auto mine = AllStats();
  AllocatorStats copy = other;  // AllStats() hands out mutable pointers.
  auto theirs = copy.AllStats();
  for (size_t i = 0; i < mine.size(); ++i) *mine[i] += *theirs[i];
  num_alloc_retries += other.num_alloc_retries;
  num_ooms += other.num_ooms;
  num_device_alloc += other.num_device_alloc;
  num_device_free += other.num_device_free;
  return *this;
}

// A block is a range of one segment. The blocks of a segment form a list
// through prev/next in address order; a block with neither is a whole
// segment. A free block is in its pool; a live one is in live_.
struct ChipletCachingAllocator::Block {
  uint64_t offset;
  uint64_t size;
  bool small;
  uint64_t requested = 0;
  bool allocated = false;
  bool program_owned = false;  // Counted in program*, not allocated/active.
  AllocationContext context;   // Of the live allocation.
  Block* prev = nullptr;
  Block* next = nullptr;

  bool is_split() const { return prev != nullptr || next != nullptr; }
};

bool ChipletCachingAllocator::BlockBySize::operator()(const Block* a,
                                                      const Block* b) const {
  if (a->size != b->size) return a->size < b->size;
  return a->offset < b->offset;
}

namespace {

uint64_t RoundUpTo(uint64_t n, uint64_t multiple) {
  return (n + multiple - 1) / multiple * multiple;
}

// Signed view of a byte count for the statistics.
int64_t Signed(uint64_t n) { return static_cast<int64_t>(n); }

}  // namespace

ChipletCachingAllocator::ChipletCachingAllocator(ChipletHeap* heap)
    : heap_(heap),
      max_segment_size_(heap->capacity() / heap->allocation_unit() *
                        heap->allocation_unit()) {}

ChipletCachingAllocator::~ChipletCachingAllocator() {
  absl::MutexLock lock(&mu_);
  std::vector<Block*> blocks;
  for (Pool* pool : {&small_pool_, &large_pool_}) {
    blocks.insert(blocks.end(), pool->begin(), pool->end());
  }
  for (const auto& [offset, block] : live_) blocks.push_back(block);
  for (Block* block : blocks) {
    // A segment's first block starts at the segment's heap offset.
    if (block->prev == nullptr) heap_->Free(block->offset).IgnoreError();
  }
  for (Block* block : blocks) delete block;
}

uint64_t ChipletCachingAllocator::SegmentSize(uint64_t size) const {
  uint64_t preferred;
  if (size <= kSmallSize) {
    preferred = kSmallBuffer;
  } else if (size < kMinLargeAlloc) {
    preferred = kLargeBuffer;
  } else {
    preferred = RoundUpTo(size, kRoundLarge);
  }
  // The policy's sizes need not be whole units of an unusual heap.
  preferred = RoundUpTo(preferred, heap_->allocation_unit());
  return std::max(size, std::min(preferred, max_segment_size_));
}

ChipletCachingAllocator::Pool& ChipletCachingAllocator::PoolOf(
    const Block* block) {
  return block->small ? small_pool_ : large_pool_;
}

ChipletCachingAllocator::Block* ChipletCachingAllocator::TakeFreeBlock(
    Pool& pool, uint64_t size) {
  Block key{/*offset=*/0, size, /*small=*/false};
  auto it = pool.lower_bound(&key);
  if (it == pool.end()) return nullptr;
  Block* block = *it;
  pool.erase(it);
  return block;
}

ChipletCachingAllocator::Block* ChipletCachingAllocator::NewSegment(
    bool small, uint64_t size) {
  uint64_t segment_size = SegmentSize(size);
  absl::StatusOr<uint64_t> offset = absl::ResourceExhaustedError("over the limit");
  if (!OverLimit(segment_size)) offset = heap_->Allocate(segment_size);
  if (!offset.ok() && segment_size > size && !OverLimit(size)) {
    // A smaller segment wastes no memory, it only means more segments.
    segment_size = size;
    offset = heap_->Allocate(segment_size);
  }
  if (!offset.ok()) return nullptr;
  stats_.segment.Increase(1);
  stats_.reserved_bytes.Increase(Signed(segment_size));
  ++stats_.num_device_alloc;
  Emit(AllocationEvent::Action::kSegmentAlloc, *offset, segment_size);
  return new Block{*offset, segment_size, small};
}

bool ChipletCachingAllocator::OverLimit(uint64_t bytes) const {
  return limit_ != 0 &&
         static_cast<uint64_t>(stats_.reserved_bytes.current) + bytes > limit_;
}

void ChipletCachingAllocator::Emit(AllocationEvent::Action action, uint64_t offset,
                                   uint64_t size, uint64_t requested,
                                   const AllocationContext* context) {
  if (!sink_) return;
  AllocationEvent event{action};
  event.address = offset;
  event.size = size;
  event.requested = requested;
  event.context = context;
  if (action == AllocationEvent::Action::kOom) event.device_free = heap_->free_bytes();
  sink_(event);
}

uint64_t ChipletCachingAllocator::UseBlock(Block* block, uint64_t size,
                                           uint64_t requested,
                                           AllocationContext context) {
  const bool already_split = block->is_split();
  const uint64_t remainder = block->size - size;
  // Large blocks keep small remainders: splitting them off would only feed
  // the large pool with fragments no large request can use.
  const bool split = block->small ? remainder >= heap_->allocation_unit()
                                  : remainder > kSmallSize;
  if (split) {
    Block* rest = block;
    block = new Block{rest->offset, size, rest->small};
    block->prev = rest->prev;
    if (block->prev != nullptr) block->prev->next = block;
    block->next = rest;
    rest->prev = block;
    rest->offset += size;
    rest->size -= size;
    PoolOf(rest).insert(rest);
    if (already_split) {
      // A free split block shrinks by what is handed out.
      stats_.inactive_split_bytes.Decrease(Signed(size));
    } else {
      // A whole free segment becomes split; its remainder is inactive.
      stats_.inactive_split.Increase(1);
      stats_.inactive_split_bytes.Increase(Signed(rest->size));
    }
  } else if (already_split) {
    stats_.inactive_split.Decrease(1);
    stats_.inactive_split_bytes.Decrease(Signed(block->size));
  }
  block->allocated = true;
  block->requested = requested;
  block->context = std::move(context);
  live_[block->offset] = block;
  stats_.allocation.Increase(1);
  stats_.allocated_bytes.Increase(Signed(block->size));
  stats_.active.Increase(1);
  stats_.active_bytes.Increase(Signed(block->size));
  stats_.requested_bytes.Increase(Signed(requested));
  Emit(AllocationEvent::Action::kAlloc, block->offset, block->size, requested,
       &block->context);
  return block->offset;
}

absl::StatusOr<uint64_t> ChipletCachingAllocator::Allocate(uint64_t nbytes,
                                                           AllocationContext context) {
  const uint64_t unit = heap_->allocation_unit();
  // Rounding a request beyond the capacity could overflow; it fails anyway.
  const uint64_t size =
      nbytes <= max_segment_size_ ? heap_->RoundUp(nbytes) : nbytes;
  const bool fits = size <= max_segment_size_;
  const bool small = size <= kSmallSize;

  absl::MutexLock lock(&mu_);
  Block* block = nullptr;
  if (fits) {
    block = TakeFreeBlock(small ? small_pool_ : large_pool_, size);
    if (block == nullptr) block = NewSegment(small, size);
    if (block == nullptr) {
      // As CUDA: flush the whole cache and retry once. Only fully free
      // segments can go; split ones stay and keep their fragments.
      ++stats_.num_alloc_retries;
      ReleaseFreeSegments();
      block = NewSegment(small, size);
    }
  }
  if (block == nullptr) {
    ++stats_.num_ooms;
    Emit(AllocationEvent::Action::kOom, 0, nbytes);
    const std::string limit =
        fits && OverLimit(size)
            ? absl::StrFormat(
                  "; the per-process memory fraction limits this chiplet to "
                  "%d reserved bytes, and %d more would exceed it",
                  limit_, size)
            : "";
    return absl::ResourceExhaustedError(absl::StrFormat(
        "out of memory: requested %d bytes (%d after rounding to %d-byte "
        "units); the heap has %d bytes free (largest free block %d) of %d; "
        "the allocator reserves %d bytes, of which %d bytes are cached "
        "(reserved but unallocated)%s",
        nbytes, size, unit, heap_->free_bytes(), heap_->largest_free_block(),
        heap_->capacity(), stats_.reserved_bytes.current,
        stats_.reserved_bytes.current - stats_.allocated_bytes.current -
            stats_.program_bytes.current,
        limit));
  }
  return UseBlock(block, size, nbytes, std::move(context));
}

uint64_t ChipletCachingAllocator::TryMerge(Block* dst, Block* src) {
  if (src == nullptr || src->allocated) return 0;
  if (dst->prev == src) {
    dst->offset = src->offset;
    dst->prev = src->prev;
    if (dst->prev != nullptr) dst->prev->next = dst;
  } else {
    dst->next = src->next;
    if (dst->next != nullptr) dst->next->prev = dst;
  }
  const uint64_t subsumed = src->size;
  dst->size += subsumed;
  PoolOf(src).erase(src);
  delete src;
  return subsumed;
}

absl::Status ChipletCachingAllocator::Free(uint64_t offset) {
  absl::MutexLock lock(&mu_);
  auto it = live_.find(offset);
  if (it == live_.end()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "offset %d is not a live block of the caching allocator (unknown "
        "offset or double free)",
        offset));
  }
  Block* block = it->second;
  live_.erase(it);
  Emit(AllocationEvent::Action::kFree, block->offset, block->size, block->requested,
       &block->context);
  block->context.reset();
  const uint64_t size = block->size;
  const uint64_t requested = block->requested;
  const bool program_owned = block->program_owned;
  block->program_owned = false;
  if (program_owned) {
    stats_.program.Decrease(1);
    stats_.program_bytes.Decrease(Signed(size));
  } else {
    stats_.allocation.Decrease(1);
    stats_.allocated_bytes.Decrease(Signed(size));
  }

  block->allocated = false;
  block->requested = 0;
  int64_t net_blocks = 0;
  int64_t net_bytes = 0;
  for (Block* neighbour : {block->prev, block->next}) {
    const uint64_t subsumed = TryMerge(block, neighbour);
    if (subsumed > 0) {
      // The neighbour was an inactive split block; it is gone.
      --net_blocks;
      net_bytes -= Signed(subsumed);
    }
  }
  PoolOf(block).insert(block);
  if (block->is_split()) {
    ++net_blocks;
    net_bytes += Signed(block->size);
  }
  if (net_blocks > 0) stats_.inactive_split.Increase(net_blocks);
  if (net_blocks < 0) stats_.inactive_split.Decrease(-net_blocks);
  if (net_bytes > 0) stats_.inactive_split_bytes.Increase(net_bytes);
  if (net_bytes < 0) stats_.inactive_split_bytes.Decrease(-net_bytes);

  if (!program_owned) {
    stats_.active.Decrease(1);
    stats_.active_bytes.Decrease(Signed(size));
    stats_.requested_bytes.Decrease(Signed(requested));
  }
  return absl::OkStatus();
}

absl::Status ChipletCachingAllocator::SetProgramOwned(uint64_t offset, bool owned) {
  absl::MutexLock lock(&mu_);
  auto it = live_.find(offset);
  if (it == live_.end()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "offset %d is not a live block of the caching allocator; only live "
        "blocks can be marked program-owned",
        offset));
  }
  Block* block = it->second;
  if (block->program_owned == owned) return absl::OkStatus();
  block->program_owned = owned;
  const int64_t size = Signed(block->size);
  const int64_t requested = Signed(block->requested);
  if (owned) {
    stats_.allocation.Decrease(1);
    stats_.allocated_bytes.Decrease(size);
    stats_.active.Decrease(1);
    stats_.active_bytes.Decrease(size);
    stats_.requested_bytes.Decrease(requested);
    stats_.program.Increase(1);
    stats_.program_bytes.Increase(size);
  } else {
    stats_.program.Decrease(1);
    stats_.program_bytes.Decrease(size);
    stats_.allocation.Increase(1);
    stats_.allocated_bytes.Increase(size);
    stats_.active.Increase(1);
    stats_.active_bytes.Increase(size);
    stats_.requested_bytes.Increase(requested);
  }
  return absl::OkStatus();
}

uint64_t ChipletCachingAllocator::BlockSize(uint64_t offset) const {
  absl::MutexLock lock(&mu_);
  auto it = live_.find(offset);
  return it == live_.end() ? 0 : it->second->size;
}

void ChipletCachingAllocator::ReleaseFreeSegments() {
  for (Pool* pool : {&small_pool_, &large_pool_}) {
    for (auto it = pool->begin(); it != pool->end();) {
      Block* block = *it;
      // A failed heap free would mean the heap lost track of our segment;
      // keeping it cached at least keeps our accounting consistent.
      if (block->is_split() || !heap_->Free(block->offset).ok()) {
        ++it;
        continue;
      }
      stats_.segment.Decrease(1);
      stats_.reserved_bytes.Decrease(Signed(block->size));
      ++stats_.num_device_free;
      Emit(AllocationEvent::Action::kSegmentFree, block->offset, block->size);
      it = pool->erase(it);
      delete block;
    }
  }
}

void ChipletCachingAllocator::EmptyCache() {
  absl::MutexLock lock(&mu_);
  ReleaseFreeSegments();
}

void ChipletCachingAllocator::SetMemoryLimit(uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  limit_ = bytes;
}

uint64_t ChipletCachingAllocator::memory_limit() const {
  absl::MutexLock lock(&mu_);
  return limit_;
}

void ChipletCachingAllocator::SetEventSink(EventSink sink) {
  absl::MutexLock lock(&mu_);
  sink_ = std::move(sink);
}

AllocatorStats ChipletCachingAllocator::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void ChipletCachingAllocator::ResetPeakStats() {
  absl::MutexLock lock(&mu_);
  for (Stat* stat : stats_.AllStats()) stat->ResetPeak();
}

void ChipletCachingAllocator::ResetAccumulatedStats() {
  absl::MutexLock lock(&mu_);
  for (Stat* stat : stats_.AllStats()) stat->ResetAccumulated();
  stats_.num_alloc_retries = 0;
  stats_.num_ooms = 0;
  stats_.num_device_alloc = 0;
  stats_.num_device_free = 0;
}

std::vector<SegmentInfo> ChipletCachingAllocator::Snapshot() const {
  absl::MutexLock lock(&mu_);
  std::vector<const Block*> heads;
  for (const Pool* pool : {&small_pool_, &large_pool_}) {
    for (const Block* block : *pool) {
      if (block->prev == nullptr) heads.push_back(block);
    }
  }
  for (const auto& [offset, block] : live_) {
    if (block->prev == nullptr) heads.push_back(block);
  }
  std::sort(heads.begin(), heads.end(), [](const Block* a, const Block* b) {
    return a->offset < b->offset;
  });
  std::vector<SegmentInfo> segments;
  segments.reserve(heads.size());
  for (const Block* head : heads) {
    SegmentInfo segment{head->offset, 0, head->small, {}};
    for (const Block* block = head; block != nullptr; block = block->next) {
      segment.blocks.push_back({block->offset, block->size, block->requested,
                                block->allocated, block->program_owned,
                                block->context});
      segment.size += block->size;
    }
    segments.push_back(std::move(segment));
  }
  return segments;
}

uint64_t ChipletCachingAllocator::cached_bytes() const {
  absl::MutexLock lock(&mu_);
  return static_cast<uint64_t>(stats_.reserved_bytes.current -
                               stats_.allocated_bytes.current -
                               stats_.program_bytes.current);
}

}  // namespace rbln::runtime
