#include "rbln/runtime/page_commit.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <thread>  // NOLINT(build/c++11): commits split over cores
#include <vector>

namespace rbln::runtime {
namespace {

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older kernels answer EINVAL.
#endif

// One thread per this many bytes, at most kMaxCommitThreads.
constexpr uint64_t kParallelCommitBytes = uint64_t{8} << 20;
constexpr unsigned kMaxCommitThreads = 4;

// madvise(MADV_POPULATE_WRITE) over [begin, end) (page-aligned): the bytes
// committed, 0 on failure.
uint64_t Populate(uintptr_t begin, uintptr_t end) {
  if (madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE) != 0) return 0;
  return end - begin;
}

}  // namespace

bool KernelCanPopulateWrites() {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* p = mmap(nullptr, page, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return false;
  const bool ok = madvise(p, page, MADV_POPULATE_WRITE) == 0;
  munmap(p, page);
  return ok;
}

uint64_t CommitPagesForWrite(void* to, uint64_t nbytes) {
  if (nbytes < kCommitAheadBytes) return 0;
  // Only whole pages inside [to, to + nbytes): the bytes around the range
  // may belong to another storage (committing them would be harmless, but
  // the count says what this copy committed).
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(to) + page - 1) & ~(page - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(to) + nbytes) & ~(page - 1);
  if (end <= begin) return 0;
  const unsigned threads = std::min<uint64_t>(
      {std::max(1u, std::thread::hardware_concurrency()), kMaxCommitThreads,
       (end - begin) / kParallelCommitBytes});
  if (threads <= 1) return Populate(begin, end);
  const uintptr_t chunk = ((end - begin) / threads + page - 1) & ~(page - 1);
  std::vector<uint64_t> committed(threads, 0);
  std::vector<std::thread> workers;
  for (unsigned i = 1; i < threads; ++i) {
    const uintptr_t b = begin + i * chunk;
    const uintptr_t e = std::min(end, b + chunk);
    if (b < e) workers.emplace_back([&committed, i, b, e] { committed[i] = Populate(b, e); });
  }
  committed[0] = Populate(begin, std::min(end, begin + chunk));
  for (std::thread& worker : workers) worker.join();
  uint64_t total = 0;
  for (uint64_t c : committed) total += c;
  return total;
}

}  // namespace rbln::runtime
