#include "rbln/compiler/chiplet_team.h"

#include <pthread.h>

#include <chrono>
#include <map>
#include <memory>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace rbln::compiler {
namespace {

// The team whose job the calling thread is running (for the barrier).
thread_local ChipletTeam* current_team = nullptr;

// Spin iterations before sleeping on the mutex (~2-4 us): enough to catch a
// job or barrier that follows closely, short enough not to steal a shared
// core from the workers still computing.
constexpr int kSpins = 256;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

template <typename T>
bool SpinUntilChanged(const std::atomic<T>& value, T seen) {
  for (int i = 0; i < kSpins; ++i) {
    if (value.load(std::memory_order_acquire) != seen) return true;
    CpuRelax();
  }
  return false;
}

// Blocks, with `mu` held, until `value` differs from `seen` (after the spin
// in SpinUntilChanged gave up).
void AwaitChanged(absl::Mutex& mu, const std::atomic<uint64_t>& value, uint64_t seen)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
  struct Changed {
    const std::atomic<uint64_t>* value;
    uint64_t seen;
    bool operator()() const { return value->load(std::memory_order_acquire) != seen; }
  } changed{&value, seen};
  mu.Await(absl::Condition(&changed));
}

}  // namespace

ChipletTeam::ChipletTeam(int size) : size_(size < 1 ? 1 : size) {
  for (int w = 1; w < size_; ++w) {
    threads_.emplace_back([this, w] { WorkerLoop(w); });
  }
}

ChipletTeam::~ChipletTeam() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    job_generation_.fetch_add(1, std::memory_order_release);
  }
  for (std::thread& t : threads_) t.join();
}

namespace {

// The process's teams, by size. A forked child has none of the parent's
// worker threads, and a team or this registry may have been locked by a
// thread that does not exist there: the child abandons the parent's
// registry (leaked: destroying it would join threads that do not exist) and
// builds teams of its own at their first use.
struct TeamRegistry {
  absl::Mutex mu;
  std::map<int, std::unique_ptr<ChipletTeam>> teams ABSL_GUARDED_BY(mu);
};

std::atomic<TeamRegistry*> registry{nullptr};

void AbandonTeamsInChild() { registry.store(nullptr, std::memory_order_release); }

TeamRegistry& Registry() {
  TeamRegistry* r = registry.load(std::memory_order_acquire);
  if (r != nullptr) return *r;
  static const bool installed = [] {
    pthread_atfork(nullptr, nullptr, &AbandonTeamsInChild);
    return true;
  }();
  (void)installed;
  auto* fresh = new TeamRegistry();
  if (registry.compare_exchange_strong(r, fresh, std::memory_order_acq_rel)) {
    return *fresh;
  }
  delete fresh;  // Another thread won.
  return *r;
}

}  // namespace

ChipletTeam& ChipletTeam::Shared(int size) {
  TeamRegistry& r = Registry();
  absl::MutexLock lock(&r.mu);
  std::unique_ptr<ChipletTeam>& team = r.teams[size];
  if (team == nullptr) team = std::make_unique<ChipletTeam>(size);
  return *team;
}

void ChipletTeam::RunOne(int worker) {
  const absl::FunctionRef<void(int)>* job;
  std::vector<absl::Duration>* busy;
  {
    absl::MutexLock lock(&mu_);
    job = job_;
    busy = busy_;
  }
  ChipletTeam* previous = current_team;
  current_team = this;
  const auto start = std::chrono::steady_clock::now();
  (*job)(worker);
  if (busy != nullptr) {
    (*busy)[worker] =
        absl::FromChrono(std::chrono::steady_clock::now() - start);
  }
  current_team = previous;
}

void ChipletTeam::Run(absl::FunctionRef<void(int worker)> fn,
                      std::vector<absl::Duration>* busy) {
  if (busy != nullptr) busy->assign(size_, absl::ZeroDuration());
  absl::MutexLock run_lock(&run_mu_);
  {
    absl::MutexLock lock(&mu_);
    job_ = &fn;
    busy_ = busy;
    unfinished_ = size_ - 1;
    barrier_arrived_ = 0;
    job_generation_.fetch_add(1, std::memory_order_release);
  }
  RunOne(0);
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](int* unfinished) { return *unfinished == 0; }, &unfinished_));
  job_ = nullptr;
  busy_ = nullptr;
}

void ChipletTeam::WorkerLoop(int worker) {
  uint64_t seen = 0;
  while (true) {
    SpinUntilChanged(job_generation_, seen);
    {
      absl::MutexLock lock(&mu_);
      AwaitChanged(mu_, job_generation_, seen);
      seen = job_generation_.load(std::memory_order_acquire);
      if (stop_) return;
    }
    RunOne(worker);
    absl::MutexLock lock(&mu_);
    --unfinished_;
  }
}

void ChipletTeam::Barrier() {
  uint64_t generation;
  {
    absl::MutexLock lock(&mu_);
    generation = barrier_generation_.load(std::memory_order_acquire);
    if (++barrier_arrived_ == size_) {
      barrier_arrived_ = 0;
      barrier_generation_.fetch_add(1, std::memory_order_release);
      return;
    }
  }
  if (SpinUntilChanged(barrier_generation_, generation)) return;
  absl::MutexLock lock(&mu_);
  AwaitChanged(mu_, barrier_generation_, generation);
}

}  // namespace rbln::compiler

extern "C" void rbln_chiplet_barrier() {
  if (rbln::compiler::current_team != nullptr) {
    rbln::compiler::current_team->Barrier();
  }
}
