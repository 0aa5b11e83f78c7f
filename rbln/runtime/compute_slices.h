// Per-worker timing of one program run's compute, for the RBLN Profiler
// (SPEC O2). A program whose kernels are split over chiplet workers reports
// one slice per worker (worker index, start, end on ProfileRecorder::NowNs()'s
// clock); the executor records one compute stage per slice. A program that
// reports nothing is recorded as one slice of worker 0 spanning the whole
// run, which is what an unpartitioned program gives.
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
  int64_t start_ns = 0;
  int64_t end_ns = 0;
};

// Collects the slices of one run. Report() may be called concurrently from
// the workers' threads.
class ComputeSliceSink {
 public:
  void Report(int worker, int64_t start_ns, int64_t end_ns) ABSL_LOCKS_EXCLUDED(mu_);

  // The slices reported so far, by worker then start time; empties the sink.
  std::vector<ComputeSlice> Take() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  absl::Mutex mu_;
  std::vector<ComputeSlice> slices_ ABSL_GUARDED_BY(mu_);
};

}  // namespace rbln::runtime

#endif  // RBLN_RUNTIME_COMPUTE_SLICES_H_
