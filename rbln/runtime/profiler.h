// The RBLN Profiler's recorder (SPEC O1, O4). With RBLN_PROFILER=1 set when
// the process starts (read once, when this library loads), the executor
// records every program run: its argument stages (device memory acquired and
// host-latest bytes uploaded per argument) and its compute stage, with
// monotonic start/end times. At process exit the recorder prints the
// "RBLN Profiler Generation Status Report" and writes rbln_<timestamp>.pb
// (schema: rbln/runtime/profile.proto) into RBLN_PROFILER_DIR, default the
// working directory. Without RBLN_PROFILER the cost is one pointer check per
// execution.
#ifndef RBLN_RUNTIME_PROFILER_H_
#define RBLN_RUNTIME_PROFILER_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "rbln/runtime/profile.pb.h"

namespace rbln::runtime {

class ProfileRecorder {
 public:
  // The process's recorder, or nullptr when RBLN_PROFILER was off at start.
  static ProfileRecorder* Global();

  // Keeps at most `max_executions`; later ones are counted as dropped.
  explicit ProfileRecorder(uint64_t max_executions = uint64_t{1} << 20);

  // CLOCK_MONOTONIC in nanoseconds: the clock of every recorded time.
  static int64_t NowNs();

  // The launching thread's correlation ids (torch.profiler's Kineto bridge
  // pushes the id of each ATen op it records); executions store the top.
  static void PushCorrelationId(uint64_t id);
  static void PopCorrelationId();
  static uint64_t CurrentCorrelationId();

  // Executions recorded so far (ids are 1..this, dropped ones included).
  uint64_t num_seen() const ABSL_LOCKS_EXCLUDED(mu_);

  // Adds a finished execution; assigns its id (1, 2, ...).
  void Record(profile::Execution execution) ABSL_LOCKS_EXCLUDED(mu_);

  profile::Profile Snapshot() const ABSL_LOCKS_EXCLUDED(mu_);

  // Writes the profile as rbln_<timestamp>.pb into `dir` (never overwrites);
  // returns the file's path.
  absl::StatusOr<std::string> WriteFile(const std::string& dir) const;

  // The status report printed at exit, for a write that gave `written`.
  std::string StatusReport(const absl::StatusOr<std::string>& written) const;

 private:
  const uint64_t max_executions_;
  mutable absl::Mutex mu_;
  profile::Profile profile_ ABSL_GUARDED_BY(mu_);
};

}  // namespace rbln::runtime

#endif  // RBLN_RUNTIME_PROFILER_H_
