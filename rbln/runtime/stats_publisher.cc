#include "rbln/runtime/stats_publisher.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <new>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "rbln/core/env.h"

namespace rbln::runtime {

// The header as laid out in the file (see the table in the header file).
// Written once, before the file is renamed into place, so plain fields do.
struct FileHeader {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;
  uint32_t record_bytes;
  int32_t pid;
  uint64_t start_time;
  int64_t created_unix_ns;
  int32_t num_npus;
  int32_t chiplets_per_npu;
  uint64_t memory_per_chiplet;
  char profile_name[StatsPublisher::kProfileNameBytes];
  char command_line[StatsPublisher::kCommandLineBytes];
  char reserved[56];
};
static_assert(sizeof(FileHeader) == StatsPublisher::kHeaderBytes);
static_assert(offsetof(FileHeader, version) == 8);
static_assert(offsetof(FileHeader, pid) == 20);
static_assert(offsetof(FileHeader, start_time) == 24);
static_assert(offsetof(FileHeader, created_unix_ns) == 32);
static_assert(offsetof(FileHeader, num_npus) == 40);
static_assert(offsetof(FileHeader, memory_per_chiplet) == 48);
static_assert(offsetof(FileHeader, profile_name) == 56);
static_assert(offsetof(FileHeader, command_line) == 72);
static_assert(offsetof(FileHeader, reserved) == 200);

// One record in the mapping. Atomics because a reader in another process
// reads while we write; the seqlock on `seq` makes the set consistent.
struct StatsPublisher::Record {
  std::atomic<uint64_t> seq;
  std::atomic<int64_t> allocated_current;
  std::atomic<int64_t> allocated_peak;
  std::atomic<int64_t> reserved_current;
  std::atomic<int64_t> reserved_peak;
  std::atomic<int64_t> active_current;
  std::atomic<int64_t> num_ooms;
  std::atomic<int64_t> num_alloc_retries;
  std::atomic<int64_t> busy_ns;
};
// Shared with other processes, so the atomics must be plain memory words.
static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<int64_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<int64_t>) == sizeof(int64_t));

namespace {

// Upper bound on records, far above any profile, so that a bad argument
// cannot ask for a huge file.
constexpr int64_t kMaxRecords = int64_t{1} << 16;
// Attempts before a reader gives up on a record that stays mid-write.
constexpr int kMaxReadAttempts = 100000;

// This process's pid, updated in fork()ed children: a publisher compares it
// with its creator's pid without a syscall.
std::atomic<int> g_pid{0};

// Publishers whose file is to be unlinked at exit(): the process-wide
// runtime is never destroyed, so its destructor would never do it.
struct LiveFile {
  const StatsPublisher* publisher;
  std::string path;
  int owner_pid;
  uint64_t dev;
  uint64_t ino;
};
absl::Mutex& LiveFilesMutex() {
  static auto* mu = new absl::Mutex;
  return *mu;
}
std::vector<LiveFile>& LiveFiles() {
  static auto* files = new std::vector<LiveFile>;
  return *files;
}

// Unlinks `path` only if it is still the file we created, not one a later
// publisher (or a process that reused our pid) put there.
void UnlinkIfOurs(const std::string& path, int owner_pid, uint64_t dev,
                  uint64_t ino) {
  if (owner_pid != getpid()) return;  // A fork()ed child: the parent's file.
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return;
  if (static_cast<uint64_t>(st.st_dev) != dev ||
      static_cast<uint64_t>(st.st_ino) != ino) {
    return;
  }
  unlink(path.c_str());
}

void UnlinkLiveFilesAtExit() {
  absl::MutexLock lock(&LiveFilesMutex());
  for (const LiveFile& f : LiveFiles()) {
    UnlinkIfOurs(f.path, f.owner_pid, f.dev, f.ino);
  }
  LiveFiles().clear();
}

void InitProcessHooksOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    g_pid.store(getpid(), std::memory_order_relaxed);
    pthread_atfork(nullptr, nullptr,
                   [] { g_pid.store(getpid(), std::memory_order_relaxed); });
    atexit(UnlinkLiveFilesAtExit);
  });
}

absl::Status ErrnoError(absl::string_view what, const std::string& path) {
  const int error = errno;
  return absl::ErrnoToStatus(
      error, absl::StrFormat("rbln-smi stats: %s %s", what, path));
}

// The command line with its NULs as spaces, trailing ones dropped.
std::string ReadCommandLine() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string raw((std::istreambuf_iterator<char>(in)),
                  std::istreambuf_iterator<char>());
  std::replace(raw.begin(), raw.end(), '\0', ' ');
  while (!raw.empty() && raw.back() == ' ') raw.pop_back();
  return raw;
}

// Field 22 of /proc/self/stat (start time in clock ticks since boot), or 0.
uint64_t ReadStartTime() {
  std::ifstream in("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  // The command name (field 2) is in parentheses and may hold spaces.
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return 0;
  std::vector<absl::string_view> fields =
      absl::StrSplit(absl::string_view(stat).substr(paren + 1), ' ',
                     absl::SkipEmpty());
  // fields[0] is field 3 (state), so field 22 is fields[19].
  uint64_t start_time = 0;
  if (fields.size() < 20 || !absl::SimpleAtoi(fields[19], &start_time)) {
    return 0;
  }
  return start_time;
}

// Copies `text` into a fixed field, NUL-padded, cut to the field's size.
void CopyField(absl::string_view text, char* field, size_t size) {
  std::memset(field, 0, size);
  std::memcpy(field, text.data(), std::min(size, text.size()));
}

std::string FieldString(const char* field, size_t size) {
  return std::string(field, strnlen(field, size));
}

}  // namespace

std::string StatsPublisher::Directory() {
  if (std::optional<std::string> dir = env::GetRaw(kEnvDir)) return *dir;
  struct stat st;
  if (stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode)) return "/dev/shm";
  return "/tmp";
}

std::unique_ptr<StatsPublisher> StatsPublisher::Create(
    const std::string& profile_name, int num_npus, int chiplets_per_npu,
    uint64_t memory_per_chiplet) {
  auto failed = [](absl::Status status) {
    return std::unique_ptr<StatsPublisher>(
        new StatsPublisher(std::move(status)));
  };
  const int64_t num_records = int64_t{num_npus} * chiplets_per_npu;
  if (num_npus <= 0 || chiplets_per_npu <= 0 || num_records > kMaxRecords) {
    return failed(absl::InvalidArgumentError(absl::StrFormat(
        "rbln-smi stats: bad shape %d NPU(s) x %d chiplet(s)", num_npus,
        chiplets_per_npu)));
  }
  InitProcessHooksOnce();
  const int pid = getpid();
  const std::string dir = Directory();
  const std::string path = absl::StrFormat("%s/%s%d", dir, kFilePrefix, pid);
  const size_t bytes =
      kHeaderBytes + static_cast<size_t>(num_records) * kRecordBytes;

  // Built under a hidden temporary name, so rbln-smi never sees it half
  // written, then renamed over any file a dead process with our pid left.
  std::string tmp = absl::StrFormat("%s/.%s%d.XXXXXX", dir, kFilePrefix, pid);
  const int fd = mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0) return failed(ErrnoError("cannot create a file in", dir));
  bool renamed = false;
  absl::Cleanup close_fd = [&] {
    close(fd);
    if (!renamed) unlink(tmp.c_str());
  };
  // Readable by other users' rbln-smi, as /proc/<pid>/cmdline is.
  fchmod(fd, 0644);
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    return failed(ErrnoError("cannot size", tmp));
  }
  struct stat st;
  if (fstat(fd, &st) != 0) return failed(ErrnoError("cannot stat", tmp));
  void* mapping =
      mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (mapping == MAP_FAILED) return failed(ErrnoError("cannot map", tmp));

  FileHeader header;
  std::memset(&header, 0, sizeof(header));
  std::memcpy(header.magic, kMagic, sizeof(header.magic));
  header.version = kVersion;
  header.header_bytes = kHeaderBytes;
  header.record_bytes = kRecordBytes;
  header.pid = pid;
  header.start_time = ReadStartTime();
  header.created_unix_ns = absl::ToUnixNanos(absl::Now());
  header.num_npus = num_npus;
  header.chiplets_per_npu = chiplets_per_npu;
  header.memory_per_chiplet = memory_per_chiplet;
  CopyField(profile_name, header.profile_name, sizeof(header.profile_name));
  CopyField(ReadCommandLine(), header.command_line,
            sizeof(header.command_line));
  std::memcpy(mapping, &header, sizeof(header));
  // The records' bytes are zero (ftruncate); make them atomics in place.
  auto* records = reinterpret_cast<Record*>(static_cast<char*>(mapping) +
                                            kHeaderBytes);
  for (int64_t i = 0; i < num_records; ++i) new (&records[i]) Record();

  if (rename(tmp.c_str(), path.c_str()) != 0) {
    absl::Status status = ErrnoError("cannot rename the file to", path);
    munmap(mapping, bytes);
    return failed(std::move(status));
  }
  renamed = true;

  auto publisher =
      std::unique_ptr<StatsPublisher>(new StatsPublisher(absl::OkStatus()));
  publisher->path_ = path;
  publisher->mapping_ = mapping;
  publisher->mapping_bytes_ = bytes;
  publisher->records_ = records;
  publisher->num_npus_ = num_npus;
  publisher->chiplets_per_npu_ = chiplets_per_npu;
  publisher->owner_pid_ = pid;
  publisher->dev_ = static_cast<uint64_t>(st.st_dev);
  publisher->ino_ = static_cast<uint64_t>(st.st_ino);
  {
    absl::MutexLock lock(&LiveFilesMutex());
    LiveFiles().push_back(
        {publisher.get(), path, pid, publisher->dev_, publisher->ino_});
  }
  return publisher;
}

StatsPublisher::~StatsPublisher() {
  if (mapping_ == nullptr) return;
  {
    absl::MutexLock lock(&LiveFilesMutex());
    std::vector<LiveFile>& files = LiveFiles();
    files.erase(std::remove_if(files.begin(), files.end(),
                               [this](const LiveFile& f) {
                                 return f.publisher == this;
                               }),
                files.end());
  }
  UnlinkIfOurs(path_, owner_pid_, dev_, ino_);
  munmap(mapping_, mapping_bytes_);
}

void StatsPublisher::Publish(int npu, int chiplet,
                             const AllocatorStats& stats) {
  // Here, not at namespace scope: Record is private.
  static_assert(sizeof(Record) == kRecordBytes);
  static_assert(offsetof(Record, allocated_current) == 8);
  static_assert(offsetof(Record, num_alloc_retries) == 56);
  static_assert(offsetof(Record, busy_ns) == 64);
  if (records_ == nullptr || npu < 0 || npu >= num_npus_ || chiplet < 0 ||
      chiplet >= chiplets_per_npu_) {
    return;
  }
  if (g_pid.load(std::memory_order_relaxed) != owner_pid_) return;
  Record& r = records_[npu * chiplets_per_npu_ + chiplet];
  const uint64_t seq = TakeRecord(r);
  constexpr auto kRelaxed = std::memory_order_relaxed;
  r.allocated_current.store(stats.allocated_bytes.current, kRelaxed);
  r.allocated_peak.store(stats.allocated_bytes.peak, kRelaxed);
  r.reserved_current.store(stats.reserved_bytes.current, kRelaxed);
  r.reserved_peak.store(stats.reserved_bytes.peak, kRelaxed);
  r.active_current.store(stats.active_bytes.current, kRelaxed);
  r.num_ooms.store(stats.num_ooms, kRelaxed);
  r.num_alloc_retries.store(stats.num_alloc_retries, kRelaxed);
  r.seq.store(seq + 2, std::memory_order_release);
}

void StatsPublisher::PublishBusy(int npu, int chiplet, int64_t busy_ns) {
  if (records_ == nullptr || npu < 0 || npu >= num_npus_ || chiplet < 0 ||
      chiplet >= chiplets_per_npu_) {
    return;
  }
  if (g_pid.load(std::memory_order_relaxed) != owner_pid_) return;
  Record& r = records_[npu * chiplets_per_npu_ + chiplet];
  const uint64_t seq = TakeRecord(r);
  r.busy_ns.store(busy_ns, std::memory_order_relaxed);
  r.seq.store(seq + 2, std::memory_order_release);
}

uint64_t StatsPublisher::TakeRecord(Record& r) {
  // Even -> odd. Another writer holds a record only for a few stores.
  uint64_t seq = r.seq.load(std::memory_order_relaxed);
  for (int spins = 0;; ++spins) {
    if ((seq & 1) == 0 &&
        r.seq.compare_exchange_weak(seq, seq + 1, std::memory_order_acquire,
                                    std::memory_order_relaxed)) {
      break;
    }
    if (spins >= 64) std::this_thread::yield();
    seq = r.seq.load(std::memory_order_relaxed);
  }
  // Readers that see any of the writer's stores must also see seq odd.
  std::atomic_thread_fence(std::memory_order_release);
  return seq;
}

absl::StatusOr<StatsPublisher::Snapshot> StatsPublisher::Read(
    const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("cannot open", path);
  absl::Cleanup close_fd = [fd] { close(fd); };
  struct stat st;
  if (fstat(fd, &st) != 0) return ErrnoError("cannot stat", path);
  const size_t bytes = static_cast<size_t>(st.st_size);
  if (bytes < kHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "rbln-smi stats: %s has %d bytes, less than a header", path, bytes));
  }
  void* mapping = mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  if (mapping == MAP_FAILED) return ErrnoError("cannot map", path);
  absl::Cleanup unmap = [mapping, bytes] { munmap(mapping, bytes); };
  const char* base = static_cast<const char*>(mapping);

  FileHeader header;
  std::memcpy(&header, base, sizeof(header));
  if (std::memcmp(header.magic, kMagic, sizeof(header.magic)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("rbln-smi stats: %s is not a stats file", path));
  }
  if (header.version != kVersion) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "rbln-smi stats: %s has version %d, this reader knows %d", path,
        header.version, kVersion));
  }
  const int64_t num_records =
      int64_t{header.num_npus} * header.chiplets_per_npu;
  if (header.header_bytes < kHeaderBytes ||
      header.record_bytes < kMinRecordBytes || header.record_bytes % 8 != 0 ||
      header.num_npus <= 0 || header.chiplets_per_npu <= 0 ||
      num_records > kMaxRecords ||
      header.header_bytes + static_cast<uint64_t>(num_records) *
                                header.record_bytes >
          bytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "rbln-smi stats: %s has a bad shape (%d x %d records of %d bytes "
        "after %d, file %d bytes)",
        path, header.num_npus, header.chiplets_per_npu, header.record_bytes,
        header.header_bytes, bytes));
  }

  Snapshot snapshot;
  snapshot.version = header.version;
  snapshot.pid = header.pid;
  snapshot.start_time = header.start_time;
  snapshot.created_unix_ns = header.created_unix_ns;
  snapshot.num_npus = header.num_npus;
  snapshot.chiplets_per_npu = header.chiplets_per_npu;
  snapshot.memory_per_chiplet = header.memory_per_chiplet;
  snapshot.profile_name =
      FieldString(header.profile_name, sizeof(header.profile_name));
  snapshot.command_line =
      FieldString(header.command_line, sizeof(header.command_line));
  snapshot.records.resize(num_records);
  constexpr auto kRelaxed = std::memory_order_relaxed;
  for (int64_t i = 0; i < num_records; ++i) {
    const auto* r = reinterpret_cast<const Record*>(
        base + header.header_bytes + i * header.record_bytes);
    ChipletRecord& out = snapshot.records[i];
    bool consistent = false;
    for (int attempt = 0; attempt < kMaxReadAttempts && !consistent;
         ++attempt) {
      const uint64_t before = r->seq.load(std::memory_order_acquire);
      if (before & 1) {
        std::this_thread::yield();
        continue;
      }
      out.allocated_current = r->allocated_current.load(kRelaxed);
      out.allocated_peak = r->allocated_peak.load(kRelaxed);
      out.reserved_current = r->reserved_current.load(kRelaxed);
      out.reserved_peak = r->reserved_peak.load(kRelaxed);
      out.active_current = r->active_current.load(kRelaxed);
      out.num_ooms = r->num_ooms.load(kRelaxed);
      out.num_alloc_retries = r->num_alloc_retries.load(kRelaxed);
      out.busy_ns = header.record_bytes >= kRecordBytes ? r->busy_ns.load(kRelaxed) : 0;
      // The field loads above must complete before seq is read again.
      std::atomic_thread_fence(std::memory_order_acquire);
      consistent = r->seq.load(kRelaxed) == before;
    }
    if (!consistent) {
      return absl::UnavailableError(absl::StrFormat(
          "rbln-smi stats: record %d of %s stays mid-write", i, path));
    }
  }
  return snapshot;
}

}  // namespace rbln::runtime
