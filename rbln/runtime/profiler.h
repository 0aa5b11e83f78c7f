// The RBLN Profiler's recorder (SPEC O1, O4). With RBLN_PROFILER=1 set when
// the process starts (read once, when this library loads), the executor
// records every program run: its argument stages (device memory acquired and
// host-latest bytes uploaded per argument) and its compute stages (one per
// phase of the program, with each chiplet worker's slice), with monotonic
// start/end times. When a torch.profiler session stops (the trace
// is collected, before its tables are printed) and at process exit, the
// recorder writes the executions not yet written to rbln_<timestamp>.pb
// (schema: rbln/runtime/profile.proto) in RBLN_PROFILER_DIR, default the
// working directory, and prints the "RBLN Profiler Generation Status Report"
// naming that file; with nothing new to write it prints nothing. Without
// RBLN_PROFILER the cost is one pointer check per execution.
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

  // The executions recorded since the previous call (all of them on the
  // first), marked as taken; header fields as in Snapshot(). Drops counted
  // since the previous call are in its dropped_executions.
  profile::Profile TakeUnwritten() ABSL_LOCKS_EXCLUDED(mu_);

  // Writes TakeUnwritten() into `dir` and returns the status report naming
  // the file, or "" when no execution is new (SPEC O4). Called when a
  // torch.profiler session stops and at process exit.
  std::string WriteUnwritten(const std::string& dir) ABSL_LOCKS_EXCLUDED(mu_);

  // The same into RBLN_PROFILER_DIR (default "."), report printed to stdout.
  void ReportUnwritten() ABSL_LOCKS_EXCLUDED(mu_);

  // Writes the whole profile as rbln_<timestamp>.pb into `dir` (never
  // overwrites); returns the file's path.
  absl::StatusOr<std::string> WriteFile(const std::string& dir) const;
  static absl::StatusOr<std::string> WriteProfile(const profile::Profile& p,
                                                  const std::string& dir);

  // The status report for the whole profile / for `p`, after a write that
  // gave `written`.
  std::string StatusReport(const absl::StatusOr<std::string>& written) const;
  static std::string StatusReport(const profile::Profile& p,
                                  const absl::StatusOr<std::string>& written);

 private:
  const uint64_t max_executions_;
  mutable absl::Mutex mu_;
  profile::Profile profile_ ABSL_GUARDED_BY(mu_);
  // Executions (a prefix of profile_.executions()) and drops already taken
  // by TakeUnwritten().
  int taken_executions_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t taken_drops_ ABSL_GUARDED_BY(mu_) = 0;
  // Serializes whole write-and-report rounds, so two reports never interleave.
  absl::Mutex report_mu_ ABSL_ACQUIRED_BEFORE(mu_);
};

// The name torch.profiler shows for one recorded stage (SPEC O2):
// i1_<call>_W0_args_0_<arg> for the arg-th argument stage of a run and
// i1_<call>_W<worker>_<program>_<phase> for a compute stage (one per phase
// of the program; <worker> the lowest worker in it, 0 in practice), <call>
// counting the profiling session's runs from 0. Names follow the program's
// stages: seed 002's float16 matmul, partitioned into three phases
// (float16 -> float32, the GEMM, float32 -> float16), gives 3 + 3 events per
// run, i1_0_W0_args_0_{0,1,2} and i1_0_W0_mm_{0,1,2}.
std::string DeviceEventName(int64_t call, const profile::Execution& execution,
                            const profile::Stage& stage, int arg_index);

}  // namespace rbln::runtime

#endif  // RBLN_RUNTIME_PROFILER_H_
