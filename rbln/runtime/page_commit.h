// Committing the pages of a large destination before copying into it.
//
// A fresh page's first write faults it in and the kernel zeroes it: ~0.4-1.4
// GB/s per core in the VMs this project runs on, most of a model's upload
// (device pages at its first device use, host shadows at `.to("rbln")`).
// madvise(MADV_POPULATE_WRITE) commits a range in one call (no fault per
// 4 KiB) and, split over several cores, zeroes pages in parallel.

#ifndef RBLN_RUNTIME_PAGE_COMMIT_H_
#define RBLN_RUNTIME_PAGE_COMMIT_H_

#include <cstdint>

namespace rbln::runtime {

// Ranges shorter than this are left to fault in as they are written.
inline constexpr uint64_t kCommitAheadBytes = uint64_t{1} << 20;

// Commits the whole pages inside [to, to + nbytes) for writing (mapped
// memory: shared or private); from 16 MiB on, split over up to 4 cores, one
// per 8 MiB. Returns the bytes committed: 0 for a range under
// kCommitAheadBytes, or where the kernel lacks MADV_POPULATE_WRITE (Linux
// 5.14) or has no memory now -- the copy then faults the pages in. The bytes
// already there are unchanged.
uint64_t CommitPagesForWrite(void* to, uint64_t nbytes);

// Whether this kernel has madvise(MADV_POPULATE_WRITE) (Linux 5.14+), i.e.
// whether CommitPagesForWrite can commit anything here.
bool KernelCanPopulateWrites();

}  // namespace rbln::runtime

#endif  // RBLN_RUNTIME_PAGE_COMMIT_H_
