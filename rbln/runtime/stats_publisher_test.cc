#include "rbln/runtime/stats_publisher.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rbln::runtime {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr uint64_t kMiB = uint64_t{1} << 20;

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
}

template <typename T>
T At(const std::string& bytes, size_t offset) {
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof(T));
  return value;
}

// /proc/self/cmdline as the 128-byte field holds it.
std::string ExpectedCommandField() {
  std::string command = ReadBytes("/proc/self/cmdline");
  for (char& c : command) {
    if (c == '\0') c = ' ';
  }
  while (!command.empty() && command.back() == ' ') command.pop_back();
  command.resize(128, '\0');
  return command;
}

AllocatorStats MakeStats(int64_t base) {
  AllocatorStats stats;
  stats.allocated_bytes.current = base + 1;
  stats.allocated_bytes.peak = base + 2;
  stats.reserved_bytes.current = base + 3;
  stats.reserved_bytes.peak = base + 4;
  stats.active_bytes.current = base + 5;
  stats.num_ooms = base + 6;
  stats.num_alloc_retries = base + 7;
  return stats;
}

// Every test publishes into its own directory through $RBLN_SMI_DIR.
class StatsPublisherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = getenv("TEST_TMPDIR");
    std::string base = tmp != nullptr ? tmp : "/tmp";
    dir_ = base + "/stats_publisher_test.XXXXXX";
    ASSERT_NE(mkdtemp(dir_.data()), nullptr);
    setenv(StatsPublisher::kEnvDir, dir_.c_str(), 1);
  }
  void TearDown() override {
    unsetenv(StatsPublisher::kEnvDir);
    rmdir(dir_.c_str());
  }

  std::string ExpectedPath() const {
    return absl::StrFormat("%s/rbln-smi.%d", dir_, getpid());
  }

  std::string dir_;
};

TEST_F(StatsPublisherTest, PublishesAndReadsBack) {
  auto publisher = StatsPublisher::Create("rebel100", 2, 4, 64 * kMiB);
  ASSERT_TRUE(publisher->status().ok()) << publisher->status();
  EXPECT_EQ(publisher->path(), ExpectedPath());
  EXPECT_EQ(StatsPublisher::Directory(), dir_);

  publisher->Publish(1, 2, MakeStats(100));
  publisher->Publish(0, 0, MakeStats(0));
  publisher->Publish(0, 0, MakeStats(10));  // The latest wins.
  publisher->PublishBusy(0, 0, 77);
  publisher->Publish(0, 0, MakeStats(10));  // Keeps busy_ns.

  absl::StatusOr<StatsPublisher::Snapshot> s =
      StatsPublisher::Read(publisher->path());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->version, 1u);
  EXPECT_EQ(s->pid, getpid());
  EXPECT_GT(s->start_time, 0u);
  EXPECT_GT(s->created_unix_ns, 0);
  EXPECT_EQ(s->num_npus, 2);
  EXPECT_EQ(s->chiplets_per_npu, 4);
  EXPECT_EQ(s->memory_per_chiplet, 64 * kMiB);
  EXPECT_EQ(s->profile_name, "rebel100");
  const std::string command = ExpectedCommandField();
  EXPECT_EQ(s->command_line, command.substr(0, command.find('\0')));
  ASSERT_EQ(s->records.size(), 8u);

  const StatsPublisher::ChipletRecord& r = s->records[1 * 4 + 2];
  EXPECT_EQ(r.allocated_current, 101);
  EXPECT_EQ(r.allocated_peak, 102);
  EXPECT_EQ(r.reserved_current, 103);
  EXPECT_EQ(r.reserved_peak, 104);
  EXPECT_EQ(r.active_current, 105);
  EXPECT_EQ(r.num_ooms, 106);
  EXPECT_EQ(r.num_alloc_retries, 107);
  EXPECT_EQ(r.busy_ns, 0);  // Never published; Publish() leaves it alone.
  EXPECT_EQ(s->records[0].allocated_current, 11);
  EXPECT_EQ(s->records[0].busy_ns, 77);
  EXPECT_EQ(s->records[1].allocated_current, 0);  // Never published.

  const std::string path = publisher->path();
  publisher.reset();
  EXPECT_FALSE(Exists(path));
}

// The byte offsets that rbln/tools/rbln_smi.py relies on.
TEST_F(StatsPublisherTest, FileHasTheDocumentedLayout) {
  auto publisher = StatsPublisher::Create("a-very-long-profile-name", 1, 4,
                                          36 * 1024 * kMiB);
  ASSERT_TRUE(publisher->status().ok()) << publisher->status();
  publisher->Publish(0, 3, MakeStats(1000));
  publisher->PublishBusy(0, 3, 4242);
  const std::string bytes = ReadBytes(publisher->path());
  ASSERT_EQ(bytes.size(), 256u + 4 * 72);
  EXPECT_EQ(bytes.substr(0, 8), "RBLNSMI1");
  EXPECT_EQ(At<uint32_t>(bytes, 8), 1u);
  EXPECT_EQ(At<uint32_t>(bytes, 12), 256u);
  EXPECT_EQ(At<uint32_t>(bytes, 16), 72u);
  EXPECT_EQ(At<int32_t>(bytes, 20), getpid());
  EXPECT_GT(At<int64_t>(bytes, 32), 0);
  EXPECT_EQ(At<int32_t>(bytes, 40), 1);
  EXPECT_EQ(At<int32_t>(bytes, 44), 4);
  EXPECT_EQ(At<uint64_t>(bytes, 48), 36 * 1024 * kMiB);
  EXPECT_EQ(bytes.substr(56, 16), "a-very-long-prof");  // Cut, not terminated.
  EXPECT_EQ(bytes.substr(72, 128), ExpectedCommandField());
  EXPECT_EQ(bytes.substr(200, 56), std::string(56, '\0'));
  const size_t record = 256 + 3 * 72;
  EXPECT_EQ(At<uint64_t>(bytes, record) % 2, 0u);  // seq: even, stable.
  EXPECT_GT(At<uint64_t>(bytes, record), 0u);
  for (int field = 0; field < 7; ++field) {
    EXPECT_EQ(At<int64_t>(bytes, record + 8 + 8 * field), 1001 + field)
        << "field " << field;
  }
  EXPECT_EQ(At<int64_t>(bytes, record + 64), 4242);  // busy_ns
}

TEST_F(StatsPublisherTest, FailureGivesAPublisherThatDoesNothing) {
  setenv(StatsPublisher::kEnvDir, (dir_ + "/missing").c_str(), 1);
  auto publisher = StatsPublisher::Create("atom", 1, 1, kMiB);
  EXPECT_FALSE(publisher->status().ok());
  EXPECT_THAT(publisher->status().message(), HasSubstr(dir_ + "/missing"));
  EXPECT_THAT(publisher->path(), IsEmpty());
  publisher->Publish(0, 0, MakeStats(1));  // No effect, no crash.

  auto bad_shape = StatsPublisher::Create("atom", 0, 1, kMiB);
  EXPECT_EQ(bad_shape->status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(StatsPublisherTest, IgnoresOutOfRangeIndices) {
  auto publisher = StatsPublisher::Create("atom", 2, 1, kMiB);
  ASSERT_TRUE(publisher->status().ok()) << publisher->status();
  publisher->Publish(2, 0, MakeStats(1));
  publisher->Publish(0, 1, MakeStats(1));
  publisher->Publish(-1, 0, MakeStats(1));
  auto s = StatsPublisher::Read(publisher->path());
  ASSERT_TRUE(s.ok()) << s.status();
  for (const auto& r : s->records) EXPECT_EQ(r.allocated_current, 0);
}

TEST_F(StatsPublisherTest, ReadRejectsOtherFiles) {
  const std::string path = dir_ + "/rbln-smi.1";
  std::ofstream(path) << std::string(300, 'x');
  auto s = StatsPublisher::Read(path);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  std::ofstream(path, std::ios::trunc) << "RBLNSMI1";  // Too short.
  EXPECT_EQ(StatsPublisher::Read(path).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(StatsPublisher::Read(dir_ + "/none").status().code(),
            absl::StatusCode::kNotFound);
  unlink(path.c_str());
}

// A second publisher in the process takes over the pid's file; the first
// must not remove it when it goes away.
TEST_F(StatsPublisherTest, DoesNotUnlinkASuccessorsFile) {
  auto first = StatsPublisher::Create("atom", 1, 1, kMiB);
  auto second = StatsPublisher::Create("atom", 1, 1, kMiB);
  ASSERT_TRUE(second->status().ok()) << second->status();
  ASSERT_EQ(first->path(), second->path());
  second->Publish(0, 0, MakeStats(5));
  first->Publish(0, 0, MakeStats(9));  // Into the unlinked file: unseen.
  first.reset();
  ASSERT_TRUE(Exists(second->path()));
  auto s = StatsPublisher::Read(second->path());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->records[0].allocated_current, 6);
  const std::string path = second->path();
  second.reset();
  EXPECT_FALSE(Exists(path));
}

// Writers store the same value in every field; a torn read would mix them.
TEST_F(StatsPublisherTest, ReaderNeverSeesTornRecords) {
  auto publisher = StatsPublisher::Create("atom", 1, 1, kMiB);
  ASSERT_TRUE(publisher->status().ok()) << publisher->status();
  std::atomic<bool> stop{false};
  std::vector<std::thread> writers;
  for (int w = 0; w < 2; ++w) {
    writers.emplace_back([&, w] {
      for (int64_t i = 1; !stop.load(); ++i) {
        AllocatorStats stats;
        const int64_t v = i * 2 + w;
        stats.allocated_bytes = {v, v, 0, 0};
        stats.reserved_bytes = {v, v, 0, 0};
        stats.active_bytes.current = v;
        stats.num_ooms = v;
        stats.num_alloc_retries = v;
        publisher->Publish(0, 0, stats);
      }
    });
  }
  int64_t max_seen = 0;
  for (int i = 0; i < 2000; ++i) {
    auto s = StatsPublisher::Read(publisher->path());
    ASSERT_TRUE(s.ok()) << s.status();
    const auto& r = s->records[0];
    ASSERT_EQ(r.allocated_peak, r.allocated_current);
    ASSERT_EQ(r.reserved_current, r.allocated_current);
    ASSERT_EQ(r.reserved_peak, r.allocated_current);
    ASSERT_EQ(r.active_current, r.allocated_current);
    ASSERT_EQ(r.num_ooms, r.allocated_current);
    ASSERT_EQ(r.num_alloc_retries, r.allocated_current);
    max_seen = std::max(max_seen, r.allocated_current);
  }
  stop = true;
  for (std::thread& t : writers) t.join();
  EXPECT_GT(max_seen, 0);
}

// A fork()ed child's allocations are not the parent's, and its exit() must
// not remove the parent's file.
TEST_F(StatsPublisherTest, ForkedChildNeitherPublishesNorUnlinks) {
  auto publisher = StatsPublisher::Create("atom", 1, 1, kMiB);
  ASSERT_TRUE(publisher->status().ok()) << publisher->status();
  publisher->Publish(0, 0, MakeStats(0));
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    publisher->Publish(0, 0, MakeStats(500));
    publisher.reset();
    exit(0);  // Runs the exit-time unlinking.
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ASSERT_TRUE(Exists(publisher->path()));
  auto s = StatsPublisher::Read(publisher->path());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->records[0].allocated_current, 1);
}

TEST(StatsPublisherDirectoryTest, DefaultsToDevShmOrTmp) {
  unsetenv(StatsPublisher::kEnvDir);
  struct stat st;
  const bool shm = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode);
  EXPECT_EQ(StatsPublisher::Directory(), shm ? "/dev/shm" : "/tmp");
}

}  // namespace
}  // namespace rbln::runtime
