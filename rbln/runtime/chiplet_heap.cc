#include "rbln/runtime/chiplet_heap.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace rbln::runtime {

ChipletHeap::ChipletHeap(uint64_t capacity, uint64_t allocation_unit)
    : capacity_(capacity), allocation_unit_(allocation_unit) {
  if (capacity_ > 0) free_[0] = capacity_;
}

uint64_t ChipletHeap::RoundUp(uint64_t nbytes) const {
  if (nbytes == 0) nbytes = 1;  // Every allocation owns at least one unit.
  return (nbytes + allocation_unit_ - 1) / allocation_unit_ * allocation_unit_;
}

absl::StatusOr<uint64_t> ChipletHeap::Allocate(uint64_t nbytes) {
  if (nbytes > capacity_) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "requested %d bytes, more than the chiplet's %d bytes", nbytes,
        capacity_));
  }
  const uint64_t size = RoundUp(nbytes);
  absl::MutexLock lock(&mu_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < size) continue;
    const uint64_t offset = it->first;
    const uint64_t remaining = it->second - size;
    free_.erase(it);
    if (remaining > 0) free_[offset + size] = remaining;
    used_[offset] = size;
    used_bytes_ += size;
    return offset;
  }
  return absl::ResourceExhaustedError(absl::StrFormat(
      "requested %d bytes (%d after rounding), %d bytes free of %d", nbytes,
      size, capacity_ - used_bytes_, capacity_));
}

absl::Status ChipletHeap::Free(uint64_t offset) {
  absl::MutexLock lock(&mu_);
  auto used = used_.find(offset);
  if (used == used_.end()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("offset %d is not an allocated block", offset));
  }
  uint64_t start = offset;
  uint64_t size = used->second;
  used_bytes_ -= size;
  used_.erase(used);
  // Merge with the free neighbours on both sides.
  auto next = free_.lower_bound(start);
  if (next != free_.end() && next->first == start + size) {
    size += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      size += prev->second;
      free_.erase(prev);
    }
  }
  free_[start] = size;
  return absl::OkStatus();
}

uint64_t ChipletHeap::used_bytes() const {
  absl::MutexLock lock(&mu_);
  return used_bytes_;
}

uint64_t ChipletHeap::free_bytes() const {
  absl::MutexLock lock(&mu_);
  return capacity_ - used_bytes_;
}

uint64_t ChipletHeap::largest_free_block() const {
  absl::MutexLock lock(&mu_);
  uint64_t largest = 0;
  for (const auto& [offset, size] : free_) largest = std::max(largest, size);
  return largest;
}

uint64_t ChipletHeap::BlockSize(uint64_t offset) const {
  absl::MutexLock lock(&mu_);
  auto it = used_.find(offset);
  return it == used_.end() ? 0 : it->second;
}

}  // namespace rbln::runtime
