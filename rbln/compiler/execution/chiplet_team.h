// The chiplet workers (SPEC A2): a long-lived team that runs the slices of a
// partitioned program concurrently, one worker per chiplet.
//
// Run(fn) calls fn(0..size-1) and returns when all have returned; one job at
// a time per team (concurrent callers queue). Inside a job, kernels
// synchronize with rbln_chiplet_barrier(), which waits for every worker of
// the job; every worker of a job calls it the same number of times.
//
// The workers run on min(size, host threads) OS threads -- the calling
// thread and the team's own, started once and asleep between jobs (a short
// spin first: a job right after another one should not pay a futex
// wake-up). Worker w runs on thread w % threads. With fewer threads than
// workers (a host with fewer cores than the NPU has chiplets), a thread runs
// its workers as cooperative user-level contexts, each on a stack of its
// own: a worker that reaches the barrier yields to the thread's next worker
// that has not, and the last one waits for the other threads. Four threads
// on two cores would instead trade the cores at every barrier (a compiled
// decoder has over a hundred per call). Results do not depend on how the
// workers are spread: they synchronize only through the barrier.
#ifndef RBLN_COMPILER_EXECUTION_CHIPLET_TEAM_H_
#define RBLN_COMPILER_EXECUTION_CHIPLET_TEAM_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace rbln::compiler {
namespace chiplet_team_internal {
struct Lane;
}  // namespace chiplet_team_internal

// OS threads the shared teams use (at most their size): RBLN_CHIPLET_THREADS,
// or by default the cores this process may run on (its CPU affinity). An
// error names the variable.
inline constexpr char kChipletThreadsVar[] = "RBLN_CHIPLET_THREADS";
absl::StatusOr<int> ChipletThreadsFromEnv();

// Thread-local state that belongs to the chiplet worker rather than to its
// OS thread (a kernel error report, a profiler phase clock): when a thread
// runs several workers, the team saves it at every switch away from a worker
// and restores it when the worker resumes, so each worker sees its own across
// rbln_chiplet_barrier(). A worker starts with its thread's state at the start
// of the job, and after the job the thread keeps its first worker's (w < the
// thread count), as if each worker had a thread of its own. `address` returns
// the calling thread's object, whose `bytes` are copied as they are (trivially
// copyable state only). Call before the jobs that need it, e.g. from a static
// initializer; returns true.
bool RegisterWorkerLocal(void* (*address)(), size_t bytes);

class ChipletTeam {
 public:
  // `threads` <= 0: ChipletThreadsFromEnv() (its default if the variable is
  // malformed). The team uses min(size, threads) threads.
  explicit ChipletTeam(int size, int threads = 0);
  ~ChipletTeam();
  ChipletTeam(const ChipletTeam&) = delete;
  ChipletTeam& operator=(const ChipletTeam&) = delete;

  // The process's team of `size` workers (created on first use, never
  // destroyed: kernels may still run at exit). Fork-safe: a forked child
  // builds teams of its own instead of waiting for the parent's threads.
  static ChipletTeam& Shared(int size);

  int size() const { return size_; }
  // OS threads that run the workers, the caller's included.
  int threads() const { return threads_count_; }

  // Runs fn(worker) for every worker; with `busy`, also stores each worker's
  // time in fn (size() entries): its own running time, barrier waits it did
  // included, not the time its thread ran other workers. fn must not throw.
  void Run(absl::FunctionRef<void(int worker)> fn,
           std::vector<absl::Duration>* busy = nullptr)
      ABSL_LOCKS_EXCLUDED(run_mu_, mu_);

  // Waits until every worker of the current job has called Barrier().
  void Barrier() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  using Lane = chiplet_team_internal::Lane;

  void WorkerLoop(int thread) ABSL_LOCKS_EXCLUDED(mu_);
  // Runs the workers of thread `thread` for the current job.
  void RunLane(int thread);
  // Waits until every thread of the current job has called it.
  void ThreadBarrier() ABSL_LOCKS_EXCLUDED(mu_);
  // A worker of a fiber lane is done with its phase (or its job).
  void LaneBarrier(Lane& lane);
  [[noreturn]] void FiberFinished(Lane& lane);
  static void FiberEntry(unsigned int hi, unsigned int lo);

  const int size_;
  const int threads_count_;
  absl::Mutex run_mu_;  // one job at a time
  absl::Mutex mu_;
  // Bumped for every job (and at shutdown); threads wait for a change.
  std::atomic<uint64_t> job_generation_{0};
  const absl::FunctionRef<void(int)>* job_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::vector<absl::Duration>* busy_ = nullptr;  // set with job_
  int unfinished_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int barrier_arrived_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<uint64_t> barrier_generation_{0};
  // Per thread, its workers; only that thread touches a lane during a job.
  std::vector<std::unique_ptr<Lane>> lanes_;
  std::vector<std::thread> threads_;
};

}  // namespace rbln::compiler

// Called by partitioned kernels between dependent top-level ops; a no-op
// outside a team job.
extern "C" void rbln_chiplet_barrier();

#endif  // RBLN_COMPILER_EXECUTION_CHIPLET_TEAM_H_
