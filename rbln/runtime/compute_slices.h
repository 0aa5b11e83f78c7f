// Per-worker timing of one program run's compute, for the RBLN Profiler
// (SPEC O2). A program whose kernels are split over chiplet workers runs in
// phases -- the stretches between the barriers that separate dependent ops
// -- and reports one slice per worker and phase (worker, phase, start, end
// on ProfileRecorder::NowNs()'s clock). The executor records one compute
// stage per phase, from the first worker entering it to the last one
// leaving it, with the workers' slices as its detail. A program that reports
// nothing is recorded as one phase of worker 0 spanning the whole run, which
// is what an unpartitioned program gives.
#ifndef RBLN_RUNTIME_COMPUTE_SLICES_H_
#define RBLN_RUNTIME_COMPUTE_SLICES_H_

#include <time.h>

#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace rbln::runtime {

// The clock of slices and profiler stages: CLOCK_MONOTONIC in nanoseconds.
inline int64_t MonotonicNowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

struct ComputeSlice {
  int worker = 0;
  int phase = 0;  // 0, 1, ...: barriers the worker passed before the slice
  int64_t start_ns = 0;
  int64_t end_ns = 0;
};

// One phase of a run: from its earliest slice start to its latest slice end.
struct ComputePhase {
  int phase = 0;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  std::vector<ComputeSlice> slices;  // by worker
};

// Collects the slices of one run. Report() may be called concurrently from
// the workers' threads.
class ComputeSliceSink {
 public:
  void Report(int worker, int phase, int64_t start_ns, int64_t end_ns)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The slices reported so far, by phase, worker, then start time; empties
  // the sink.
  std::vector<ComputeSlice> Take() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  absl::Mutex mu_;
  std::vector<ComputeSlice> slices_ ABSL_GUARDED_BY(mu_);
};

// Groups slices (as Take() orders them) into phases, by phase index.
std::vector<ComputePhase> GroupIntoPhases(std::vector<ComputeSlice> slices);

}  // namespace rbln::runtime

#endif  // RBLN_RUNTIME_COMPUTE_SLICES_H_
