// Publishes this process's per-chiplet memory statistics in a small file that
// `rbln-smi` (rbln/tools/rbln_smi.py) reads, as nvidia-smi reads the driver:
// the simulated NPUs live inside each process, so there is no driver to ask.
//
// The file is <dir>/rbln-smi.<pid>, where dir is $RBLN_SMI_DIR if set, else
// /dev/shm, else /tmp when /dev/shm is missing. It is created under a
// temporary name and renamed into place, so a reader never sees a partial
// header. It is removed by the destructor and, since the process-wide runtime
// is never destroyed, at exit(); a killed process leaves it behind, and
// rbln-smi reports it as stale.
//
// File layout, version 1. Little-endian (the only byte order this runs on),
// fixed offsets. KEEP IN SYNC with the constants at the top of
// rbln/tools/rbln_smi.py.
//
//   header, kHeaderBytes = 256 bytes
//     off size
//       0    8  magic "RBLNSMI1"
//       8    4  u32 version (1)
//      12    4  u32 header_bytes: offset of the first record (256)
//      16    4  u32 record_bytes: stride of the records (64)
//      20    4  i32 pid of the writer
//      24    8  u64 start_time: the writer's start time in clock ticks since
//               boot (/proc/<pid>/stat field 22), 0 if unknown; a reader
//               compares it with /proc/<pid>/stat to tell a reused pid
//      32    8  i64 created_unix_ns: when the file was created
//      40    4  i32 num_npus
//      44    4  i32 chiplets_per_npu
//      48    8  u64 memory_per_chiplet (bytes)
//      56   16  profile name, NUL-padded (not terminated when 16 long)
//      72  128  the writer's command line: the first 128 bytes of
//               /proc/self/cmdline with NULs turned into spaces, NUL-padded
//     200   56  reserved, zero
//   then num_npus * chiplets_per_npu records of record_bytes = 72 bytes, the
//   record of (npu, chiplet) at index npu * chiplets_per_npu + chiplet:
//       0    8  u64 seq: even when stable, odd while being written
//       8    8  i64 allocated_current (bytes)
//      16    8  i64 allocated_peak
//      24    8  i64 reserved_current
//      32    8  i64 reserved_peak
//      40    8  i64 active_current
//      48    8  i64 num_ooms
//      56    8  i64 num_alloc_retries
//      64    8  i64 busy_ns: nanoseconds programs of this process ran on the
//               chiplet, since the process started (torch.rbln.utilization
//               samples it); appended to the first layout, whose 64-byte
//               records readers still accept (busy_ns 0)
//
// Fields may be appended to the header or to the records without a new
// version (readers honour header_bytes and record_bytes); any other change
// bumps the version. A record is consistent when seq is even and the same
// before and after reading its fields (a seqlock); otherwise read it again.
#ifndef RBLN_RUNTIME_STATS_PUBLISHER_H_
#define RBLN_RUNTIME_STATS_PUBLISHER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "rbln/runtime/caching_allocator.h"

namespace rbln::runtime {

class StatsPublisher {
 public:
  static constexpr char kMagic[9] = "RBLNSMI1";
  static constexpr uint32_t kVersion = 1;
  static constexpr uint32_t kHeaderBytes = 256;
  static constexpr uint32_t kRecordBytes = 72;
  // Records of the first layout, without busy_ns; still read.
  static constexpr uint32_t kMinRecordBytes = 64;
  static constexpr int kProfileNameBytes = 16;
  static constexpr int kCommandLineBytes = 128;
  static constexpr char kFilePrefix[] = "rbln-smi.";
  static constexpr char kEnvDir[] = "RBLN_SMI_DIR";

  // Numbers of one chiplet as published.
  struct ChipletRecord {
    int64_t allocated_current = 0;
    int64_t allocated_peak = 0;
    int64_t reserved_current = 0;
    int64_t reserved_peak = 0;
    int64_t active_current = 0;
    int64_t num_ooms = 0;
    int64_t num_alloc_retries = 0;
    int64_t busy_ns = 0;
  };

  // A whole file as read back, for tests and tools.
  struct Snapshot {
    uint32_t version = 0;
    int32_t pid = 0;
    uint64_t start_time = 0;
    int64_t created_unix_ns = 0;
    int num_npus = 0;
    int chiplets_per_npu = 0;
    uint64_t memory_per_chiplet = 0;
    std::string profile_name;
    std::string command_line;
    // Indexed by npu * chiplets_per_npu + chiplet.
    std::vector<ChipletRecord> records;
  };

  // Creates and maps the file, all records zero. On any failure returns a
  // publisher that does nothing, with the reason in status(): statistics for
  // rbln-smi must never fail the runtime.
  static std::unique_ptr<StatsPublisher> Create(const std::string& profile_name,
                                                int num_npus,
                                                int chiplets_per_npu,
                                                uint64_t memory_per_chiplet);

  // Unmaps the file and unlinks it, unless another publisher of this process
  // has since replaced it or this is a fork()ed child.
  ~StatsPublisher();

  StatsPublisher(const StatsPublisher&) = delete;
  StatsPublisher& operator=(const StatsPublisher&) = delete;

  // Cheap (a few stores into the mapping, no syscalls), for calling after
  // every allocation and free. Out-of-range indices are ignored. Concurrent
  // calls for one chiplet are safe (the record's seq doubles as a writer
  // lock) but the last one wins, so pass stats read under the lock that
  // orders the changes. Does nothing in a fork()ed child, whose allocations
  // are not the parent's.
  void Publish(int npu, int chiplet, const AllocatorStats& stats);
  // The chiplet's busy_ns, likewise (after every program run).
  void PublishBusy(int npu, int chiplet, int64_t busy_ns);

  // The published file; empty when status() is not OK.
  const std::string& path() const { return path_; }
  // OK when the file is published, else why not.
  const absl::Status& status() const { return status_; }

  // Reads a file in the layout above. InvalidArgument for a file that is not
  // one (bad magic, unknown version, wrong size); Unavailable when a record
  // stays mid-write (its writer died or hangs in Publish).
  static absl::StatusOr<Snapshot> Read(const std::string& path);

  // The directory files go to: $RBLN_SMI_DIR, /dev/shm or /tmp.
  static std::string Directory();

 private:
  struct Record;
  // Takes `r`'s seqlock for writing; returns the (even) seq it had.
  static uint64_t TakeRecord(Record& r);

  explicit StatsPublisher(absl::Status status) : status_(std::move(status)) {}

  absl::Status status_;
  std::string path_;
  void* mapping_ = nullptr;
  size_t mapping_bytes_ = 0;
  Record* records_ = nullptr;
  int num_npus_ = 0;
  int chiplets_per_npu_ = 0;
  int owner_pid_ = 0;
  // Identity of the file we created, so we never unlink a successor's.
  uint64_t dev_ = 0;
  uint64_t ino_ = 0;
};

}  // namespace rbln::runtime

#endif  // RBLN_RUNTIME_STATS_PUBLISHER_H_
