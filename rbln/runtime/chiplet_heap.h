// First-fit heap over one chiplet's device memory, with block coalescing.
//
// Offsets are relative to the chiplet base; sizes are rounded up to the
// profile's allocation unit. This is the runtime's own allocator; the caching
// allocator that PyTorch sees sits on top of it.
#ifndef RBLN_RUNTIME_CHIPLET_HEAP_H_
#define RBLN_RUNTIME_CHIPLET_HEAP_H_

#include <cstdint>
#include <map>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace rbln::runtime {

class ChipletHeap {
 public:
  ChipletHeap(uint64_t capacity, uint64_t allocation_unit);

  // Returns the offset of a block of at least `nbytes` (rounded to the
  // allocation unit). ResourceExhausted when no free block is large enough.
  absl::StatusOr<uint64_t> Allocate(uint64_t nbytes) ABSL_LOCKS_EXCLUDED(mu_);
  // Frees the block at `offset`; InvalidArgument if it was not allocated.
  absl::Status Free(uint64_t offset) ABSL_LOCKS_EXCLUDED(mu_);

  uint64_t RoundUp(uint64_t nbytes) const;
  uint64_t capacity() const { return capacity_; }
  uint64_t allocation_unit() const { return allocation_unit_; }
  uint64_t used_bytes() const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t free_bytes() const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t largest_free_block() const ABSL_LOCKS_EXCLUDED(mu_);
  // Size of the allocated block at `offset`, or 0.
  uint64_t BlockSize(uint64_t offset) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const uint64_t capacity_;
  const uint64_t allocation_unit_;
  mutable absl::Mutex mu_;
  std::map<uint64_t, uint64_t> free_ ABSL_GUARDED_BY(mu_);  // offset -> size
  std::map<uint64_t, uint64_t> used_ ABSL_GUARDED_BY(mu_);  // offset -> size
  uint64_t used_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace rbln::runtime

#endif  // RBLN_RUNTIME_CHIPLET_HEAP_H_
