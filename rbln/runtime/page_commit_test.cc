#include "rbln/runtime/page_commit.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace rbln::runtime {
namespace {

// Resident pages of [p, p + n) (mincore).
uint64_t ResidentPages(void* p, uint64_t n) {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> v((n + page - 1) / page);
  if (mincore(p, n, v.data()) != 0) return 0;
  uint64_t resident = 0;
  for (unsigned char c : v) resident += c & 1;
  return resident;
}

// spec: D2 -- small ranges are left to fault in; large ones commit every
// whole page inside them (split over cores from 16 MiB), none around them.
TEST(PageCommitTest, CommitsTheWholePagesInsideALargeRangeOnly) {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t size = 64 << 20;
  char* p = static_cast<char*>(
      mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(p, MAP_FAILED);
  EXPECT_EQ(CommitPagesForWrite(p + 100, kCommitAheadBytes - 1), 0u);
  EXPECT_EQ(ResidentPages(p, size), 0u);
  // From byte 100 to 40 MiB + 100: pages 1 .. 40 MiB / page - 1.
  const uint64_t n = (40 << 20);
  const uint64_t committed = CommitPagesForWrite(p + 100, n);
  if (!KernelCanPopulateWrites()) {
    EXPECT_EQ(committed, 0u);
  } else {
    EXPECT_EQ(committed, n - page);
    EXPECT_EQ(ResidentPages(p, size), n / page - 1);
    EXPECT_EQ(ResidentPages(p, page), 0u);             // page 0: partly outside
    EXPECT_EQ(ResidentPages(p + n, page), 0u);         // the last, partly outside
    EXPECT_EQ(ResidentPages(p + page, n - page), n / page - 1);
  }
  munmap(p, size);
}

// spec: D2 -- committing keeps the bytes already written.
TEST(PageCommitTest, KeepsTheBytesAlreadyThere) {
  const uint64_t size = 32 << 20;
  char* p = static_cast<char*>(
      mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(p, MAP_FAILED);
  for (uint64_t i = 0; i < size; i += 4096 * 3) p[i] = static_cast<char>(i / 4096 + 1);
  CommitPagesForWrite(p, size);
  for (uint64_t i = 0; i < size; i += 4096) {
    const char expect = i % (4096 * 3) == 0 ? static_cast<char>(i / 4096 + 1) : 0;
    ASSERT_EQ(p[i], expect) << "at byte " << i;
  }
  munmap(p, size);
}

}  // namespace
}  // namespace rbln::runtime
