// The chiplet workers (SPEC A2): a long-lived team of threads that run the
// slices of a partitioned program concurrently, one per chiplet.
//
// Run(fn) calls fn(0) on the calling thread and fn(1..size-1) on the team's
// threads, and returns when all have returned; one job at a time per team
// (concurrent callers queue). Inside a job, kernels synchronize with
// rbln_chiplet_barrier(), which waits for every worker of the job. Threads
// are started once and sleep between jobs (a short spin first: a job right
// after another one should not pay a futex wake-up).
#ifndef RBLN_COMPILER_CHIPLET_TEAM_H_
#define RBLN_COMPILER_CHIPLET_TEAM_H_

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace rbln::compiler {

class ChipletTeam {
 public:
  explicit ChipletTeam(int size);
  ~ChipletTeam();
  ChipletTeam(const ChipletTeam&) = delete;
  ChipletTeam& operator=(const ChipletTeam&) = delete;

  // The process's team of `size` workers (created on first use, never
  // destroyed: kernels may still run at exit). Fork-safe: a forked child
  // builds teams of its own instead of waiting for the parent's threads.
  static ChipletTeam& Shared(int size);

  int size() const { return size_; }

  // Runs fn(worker) for every worker; with `busy`, also stores each worker's
  // time in fn (size() entries).
  void Run(absl::FunctionRef<void(int worker)> fn,
           std::vector<absl::Duration>* busy = nullptr)
      ABSL_LOCKS_EXCLUDED(run_mu_, mu_);

  // Waits until every worker of the current job has called Barrier().
  void Barrier() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void WorkerLoop(int worker) ABSL_LOCKS_EXCLUDED(mu_);
  void RunOne(int worker);

  const int size_;
  absl::Mutex run_mu_;  // one job at a time
  absl::Mutex mu_;
  // Bumped for every job (and at shutdown); workers wait for a change.
  std::atomic<uint64_t> job_generation_{0};
  const absl::FunctionRef<void(int)>* job_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::vector<absl::Duration>* busy_ = nullptr;  // set with job_
  int unfinished_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int barrier_arrived_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<uint64_t> barrier_generation_{0};
  std::vector<std::thread> threads_;
};

}  // namespace rbln::compiler

// Called by partitioned kernels between dependent top-level ops; a no-op
// outside a team job.
extern "C" void rbln_chiplet_barrier();

#endif  // RBLN_COMPILER_CHIPLET_TEAM_H_
