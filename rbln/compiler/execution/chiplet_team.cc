#include "rbln/compiler/execution/chiplet_team.h"

#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>

#include "rbln/core/env.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#if defined(__SANITIZE_ADDRESS__)
#define RBLN_CHIPLET_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RBLN_CHIPLET_ASAN 1
#endif
#endif
#ifdef RBLN_CHIPLET_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
// ThreadSanitizer must be told which stack runs (and the switches order the
// workers' accesses like the barrier they stand for).
#if defined(__SANITIZE_THREAD__)
#define RBLN_CHIPLET_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define RBLN_CHIPLET_TSAN 1
#endif
#endif
#ifdef RBLN_CHIPLET_TSAN
extern "C" {
void* __tsan_get_current_fiber(void);
void* __tsan_create_fiber(unsigned flags);
void __tsan_destroy_fiber(void* fiber);
void __tsan_switch_to_fiber(void* fiber, unsigned flags);
}
#endif

namespace rbln::compiler {
namespace {

// How long a waiting thread spins before it sleeps on the mutex. Sleeping
// and waking through the futex costs a few microseconds plus the scheduler's
// latency on both sides, at every barrier of every kernel: spinning 2.4 us
// (256 pauses) left Llama bf16 at 20.0 ms per forward, 40 us takes it to
// 16.6-17.4 ms (OPT bf16 19.4 -> 17.3 ms, Llama fp16 41.6 -> 38.3 ms; 2-core
// Xeon, model_bench; commit 8ca0402). OpenMP runtimes spin for milliseconds
// by default.
constexpr auto kSpinBudget = std::chrono::microseconds(40);
// Pauses between two reads of the clock.
constexpr int kPausesPerClockRead = 64;

// A worker's stack when workers share a thread: as large as a thread's
// default (kernels keep their buffers on the stack), reserved, not committed.
constexpr size_t kFiberStackBytes = size_t{8} << 20;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

template <typename T>
bool SpinUntilChanged(const std::atomic<T>& value, T seen) {
  // By time, not by count: a pause takes 10 to 140 cycles depending on the CPU.
  const auto deadline = std::chrono::steady_clock::now() + kSpinBudget;
  while (true) {
    for (int i = 0; i < kPausesPerClockRead; ++i) {
      if (value.load(std::memory_order_acquire) != seen) return true;
      CpuRelax();
    }
    if (std::chrono::steady_clock::now() >= deadline) return false;
  }
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

[[noreturn]] void Die(const char* what) {
  std::fprintf(stderr, "rbln chiplet team: %s: %s\n", what, std::strerror(errno));
  std::abort();
}

int UsableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

// The registered worker-local state (RegisterWorkerLocal). Entries are only
// appended: a job copies the first `count` of them.
struct WorkerLocalSlot {
  void* (*address)() = nullptr;
  size_t bytes = 0;
  size_t offset = 0;  // in a worker's save area
};
constexpr int kMaxWorkerLocals = 16;
struct WorkerLocals {
  absl::Mutex mu;
  WorkerLocalSlot slots[kMaxWorkerLocals];
  std::atomic<int> count{0};
};
WorkerLocals& Locals() {
  static WorkerLocals* const locals = new WorkerLocals();
  return *locals;
}

}  // namespace

absl::StatusOr<int> ChipletThreadsFromEnv() {
  absl::StatusOr<int64_t> threads = env::GetInt(kChipletThreadsVar, UsableCores(), 1, 1024);
  if (!threads.ok()) return threads.status();
  return static_cast<int>(*threads);
}

bool RegisterWorkerLocal(void* (*address)(), size_t bytes) {
  WorkerLocals& locals = Locals();
  absl::MutexLock lock(&locals.mu);
  const int n = locals.count.load(std::memory_order_relaxed);
  if (n == kMaxWorkerLocals) {
    std::fprintf(stderr, "rbln chiplet team: more than %d worker-local objects\n",
                 kMaxWorkerLocals);
    std::abort();
  }
  WorkerLocalSlot& slot = locals.slots[n];
  slot.address = address;
  slot.bytes = bytes;
  slot.offset = n == 0 ? 0 : locals.slots[n - 1].offset + locals.slots[n - 1].bytes;
  locals.count.store(n + 1, std::memory_order_release);
  return true;
}

namespace chiplet_team_internal {

// A worker run as a user-level context on a thread shared with others.
struct Fiber {
  ~Fiber() {
    if (mapping != nullptr) munmap(mapping, mapping_bytes);
#ifdef RBLN_CHIPLET_TSAN
    if (tsan_fiber != nullptr) __tsan_destroy_fiber(tsan_fiber);
#endif
  }

  Lane* lane = nullptr;
  int index = 0;   // in its lane
  int worker = 0;
  ucontext_t context;
  void* mapping = nullptr;  // guard page, then the stack
  size_t mapping_bytes = 0;
  bool arrived = false;   // at the current phase's barrier
  bool finished = false;  // returned from the job
  std::chrono::steady_clock::time_point resumed;
  std::chrono::steady_clock::duration busy{};
  std::vector<char> locals;  // its worker-local state while switched away
#ifdef RBLN_CHIPLET_ASAN
  void* fake_stack = nullptr;
#endif
#ifdef RBLN_CHIPLET_TSAN
  void* tsan_fiber = nullptr;
#endif
};

// One OS thread's workers.
struct Lane {
  ChipletTeam* team = nullptr;
  std::vector<int> workers;
  // Only with more than one worker; in worker order.
  std::vector<std::unique_ptr<Fiber>> fibers;
  // The job being run, and the thread's own context to return to after it.
  const absl::FunctionRef<void(int)>* job = nullptr;
  ucontext_t native;
  Fiber* current = nullptr;
  int arrived = 0;
  int locals_count = 0;  // registered worker-locals when the job started
#ifdef RBLN_CHIPLET_ASAN
  const void* native_stack_bottom = nullptr;
  size_t native_stack_bytes = 0;
#endif
#ifdef RBLN_CHIPLET_TSAN
  void* native_tsan_fiber = nullptr;
#endif
};

}  // namespace chiplet_team_internal

namespace {

using chiplet_team_internal::Fiber;
using chiplet_team_internal::Lane;

// The team whose job the calling thread is running (for the barrier), and
// the thread's lane if it switches between workers.
thread_local ChipletTeam* current_team = nullptr;
thread_local Lane* current_lane = nullptr;

void SaveLocals(int count, std::vector<char>& to) {
  const WorkerLocalSlot* slots = Locals().slots;
  for (int i = 0; i < count; ++i) {
    std::memcpy(to.data() + slots[i].offset, slots[i].address(), slots[i].bytes);
  }
}

void LoadLocals(int count, const std::vector<char>& from) {
  const WorkerLocalSlot* slots = Locals().slots;
  for (int i = 0; i < count; ++i) {
    std::memcpy(slots[i].address(), from.data() + slots[i].offset, slots[i].bytes);
  }
}

void AllocateStack(Fiber& fiber) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  fiber.mapping_bytes = kFiberStackBytes + page;
  void* mapping = mmap(nullptr, fiber.mapping_bytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (mapping == MAP_FAILED) Die("cannot map a worker stack");
  // The stack grows down: an overflow faults on the guard page.
  if (mprotect(mapping, page, PROT_NONE) != 0) Die("cannot protect a worker stack's guard page");
  fiber.mapping = mapping;
}

void* StackBottom(const Fiber& fiber) {
  return static_cast<char*>(fiber.mapping) + (fiber.mapping_bytes - kFiberStackBytes);
}

// Leaves `from` (a worker of the calling thread's lane) for `to`, or for the
// thread's own context when `to` is null; returns when `from` is resumed.
void SwitchFiber(Lane& lane, Fiber& from, Fiber* to, bool from_finished) {
  const auto now = std::chrono::steady_clock::now();
  from.busy += now - from.resumed;
  SaveLocals(lane.locals_count, from.locals);
  ucontext_t* target = &lane.native;
  if (to != nullptr) {
    LoadLocals(lane.locals_count, to->locals);
    to->resumed = now;
    lane.current = to;
    target = &to->context;
  }
#ifdef RBLN_CHIPLET_ASAN
  if (to != nullptr) {
    __sanitizer_start_switch_fiber(from_finished ? nullptr : &from.fake_stack, StackBottom(*to),
                                   kFiberStackBytes);
  } else {
    __sanitizer_start_switch_fiber(from_finished ? nullptr : &from.fake_stack,
                                   lane.native_stack_bottom, lane.native_stack_bytes);
  }
#else
  (void)from_finished;
#endif
#ifdef RBLN_CHIPLET_TSAN
  __tsan_switch_to_fiber(to != nullptr ? to->tsan_fiber : lane.native_tsan_fiber, 0);
#endif
  if (swapcontext(&from.context, target) != 0) Die("cannot switch workers");
#ifdef RBLN_CHIPLET_ASAN
  __sanitizer_finish_switch_fiber(from.fake_stack, nullptr, nullptr);
#endif
}

// The lane's next worker after `from`, in worker order and round, that is
// still in the current phase.
Fiber* NextRunnable(Lane& lane, const Fiber& from) {
  const int n = static_cast<int>(lane.fibers.size());
  for (int i = 1; i < n; ++i) {
    Fiber& f = *lane.fibers[(from.index + i) % n];
    if (!f.arrived && !f.finished) return &f;
  }
  return nullptr;
}

}  // namespace

ChipletTeam::ChipletTeam(int size, int threads)
    : size_(size < 1 ? 1 : size),
      threads_count_(std::min(
          size_, threads > 0 ? threads : ChipletThreadsFromEnv().value_or(UsableCores()))) {
  for (int t = 0; t < threads_count_; ++t) {
    auto lane = std::make_unique<Lane>();
    lane->team = this;
    for (int w = t; w < size_; w += threads_count_) lane->workers.push_back(w);
    if (lane->workers.size() > 1) {
      for (int w : lane->workers) {
        auto fiber = std::make_unique<Fiber>();
        fiber->lane = lane.get();
        fiber->index = static_cast<int>(lane->fibers.size());
        fiber->worker = w;
        lane->fibers.push_back(std::move(fiber));
      }
    }
    lanes_.push_back(std::move(lane));
  }
  for (int t = 1; t < threads_count_; ++t) {
    threads_.emplace_back([this, t] { WorkerLoop(t); });
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

void ChipletTeam::FiberEntry(unsigned int hi, unsigned int lo) {
  Fiber& self = *reinterpret_cast<Fiber*>((uintptr_t{hi} << 32) | uintptr_t{lo});
  Lane& lane = *self.lane;
#ifdef RBLN_CHIPLET_ASAN
  // Only the first worker is entered from the thread's own stack; the others
  // from a worker's, whose bounds are already known.
  const void* bottom = nullptr;
  size_t bytes = 0;
  __sanitizer_finish_switch_fiber(nullptr, &bottom, &bytes);
  if (self.index == 0) {
    lane.native_stack_bottom = bottom;
    lane.native_stack_bytes = bytes;
  }
#endif
  (*lane.job)(self.worker);
  lane.team->FiberFinished(lane);
}

void ChipletTeam::RunLane(int thread) {
  Lane& lane = *lanes_[thread];
  const absl::FunctionRef<void(int)>* job;
  std::vector<absl::Duration>* busy;
  {
    absl::MutexLock lock(&mu_);
    job = job_;
    busy = busy_;
  }
  ChipletTeam* const previous_team = current_team;
  Lane* const previous_lane = current_lane;
  current_team = this;
  if (lane.fibers.empty()) {
    current_lane = nullptr;
    const int worker = lane.workers[0];
    const auto start = std::chrono::steady_clock::now();
    (*job)(worker);
    if (busy != nullptr) {
      (*busy)[worker] = absl::FromChrono(std::chrono::steady_clock::now() - start);
    }
  } else {
    current_lane = &lane;
    lane.job = job;
    lane.arrived = 0;
    WorkerLocals& locals = Locals();
    lane.locals_count = locals.count.load(std::memory_order_acquire);
    const size_t local_bytes =
        lane.locals_count == 0 ? 0
                               : locals.slots[lane.locals_count - 1].offset +
                                     locals.slots[lane.locals_count - 1].bytes;
    for (std::unique_ptr<Fiber>& f : lane.fibers) {
      if (f->mapping == nullptr) AllocateStack(*f);
#ifdef RBLN_CHIPLET_ASAN
      // The frames a worker left at its last switch (or an earlier mapping
      // at this address) are gone: forget their redzones.
      ASAN_UNPOISON_MEMORY_REGION(StackBottom(*f), kFiberStackBytes);
#endif
#ifdef RBLN_CHIPLET_TSAN
      if (f->tsan_fiber == nullptr) f->tsan_fiber = __tsan_create_fiber(0);
#endif
      f->arrived = f->finished = false;
      f->busy = {};
      // Every worker starts with the thread's state.
      f->locals.resize(local_bytes);
      SaveLocals(lane.locals_count, f->locals);
      if (getcontext(&f->context) != 0) Die("cannot create a worker context");
      f->context.uc_stack.ss_sp = StackBottom(*f);
      f->context.uc_stack.ss_size = kFiberStackBytes;
      f->context.uc_link = nullptr;  // A worker leaves through FiberFinished.
      const uintptr_t p = reinterpret_cast<uintptr_t>(f.get());
      makecontext(&f->context, reinterpret_cast<void (*)()>(&ChipletTeam::FiberEntry), 2,
                  static_cast<unsigned int>(p >> 32), static_cast<unsigned int>(p));
    }
    Fiber& first = *lane.fibers[0];
    lane.current = &first;
    first.resumed = std::chrono::steady_clock::now();
#ifdef RBLN_CHIPLET_ASAN
    void* fake_stack = nullptr;
    __sanitizer_start_switch_fiber(&fake_stack, StackBottom(first), kFiberStackBytes);
#endif
#ifdef RBLN_CHIPLET_TSAN
    lane.native_tsan_fiber = __tsan_get_current_fiber();
    __tsan_switch_to_fiber(first.tsan_fiber, 0);
#endif
    if (swapcontext(&lane.native, &first.context) != 0) Die("cannot switch workers");
#ifdef RBLN_CHIPLET_ASAN
    __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#endif
    // Every worker returned. The thread keeps its first worker's state.
    LoadLocals(lane.locals_count, first.locals);
    lane.current = nullptr;
    if (busy != nullptr) {
      for (const std::unique_ptr<Fiber>& f : lane.fibers) {
        (*busy)[f->worker] = absl::FromChrono(f->busy);
      }
    }
  }
  current_team = previous_team;
  current_lane = previous_lane;
}

void ChipletTeam::Run(absl::FunctionRef<void(int worker)> fn,
                      std::vector<absl::Duration>* busy) {
  if (busy != nullptr) busy->assign(size_, absl::ZeroDuration());
  absl::MutexLock run_lock(&run_mu_);
  {
    absl::MutexLock lock(&mu_);
    job_ = &fn;
    busy_ = busy;
    unfinished_ = threads_count_ - 1;
    barrier_arrived_ = 0;
    job_generation_.fetch_add(1, std::memory_order_release);
  }
  RunLane(0);
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](int* unfinished) { return *unfinished == 0; }, &unfinished_));
  job_ = nullptr;
  busy_ = nullptr;
}

void ChipletTeam::WorkerLoop(int thread) {
  uint64_t seen = 0;
  while (true) {
    SpinUntilChanged(job_generation_, seen);
    {
      absl::MutexLock lock(&mu_);
      AwaitChanged(mu_, job_generation_, seen);
      seen = job_generation_.load(std::memory_order_acquire);
      if (stop_) return;
    }
    RunLane(thread);
    absl::MutexLock lock(&mu_);
    --unfinished_;
  }
}

void ChipletTeam::ThreadBarrier() {
  uint64_t generation;
  {
    absl::MutexLock lock(&mu_);
    generation = barrier_generation_.load(std::memory_order_acquire);
    if (++barrier_arrived_ == threads_count_) {
      barrier_arrived_ = 0;
      barrier_generation_.fetch_add(1, std::memory_order_release);
      return;
    }
  }
  if (SpinUntilChanged(barrier_generation_, generation)) return;
  absl::MutexLock lock(&mu_);
  AwaitChanged(mu_, barrier_generation_, generation);
}

void ChipletTeam::LaneBarrier(Lane& lane) {
  Fiber& self = *lane.current;
  self.arrived = true;
  ++lane.arrived;
  if (Fiber* next = NextRunnable(lane, self)) {
    SwitchFiber(lane, self, next, /*from_finished=*/false);
    return;  // The phase is over: the lane's last worker reset `arrived`.
  }
  // The thread's last worker to arrive waits for the other threads, then
  // goes on with the next phase; the others resume as it reaches the next
  // barrier.
  ThreadBarrier();
  for (std::unique_ptr<Fiber>& f : lane.fibers) f->arrived = false;
  lane.arrived = 0;
}

void ChipletTeam::FiberFinished(Lane& lane) {
  Fiber& self = *lane.current;
  self.finished = true;
  Fiber* next = NextRunnable(lane, self);
  if (next == nullptr && lane.arrived > 0) {
    // The others wait at a barrier this worker did not call (a job outside
    // the contract): let them through rather than hang.
    ThreadBarrier();
    for (std::unique_ptr<Fiber>& f : lane.fibers) f->arrived = false;
    lane.arrived = 0;
    next = NextRunnable(lane, self);
  }
  SwitchFiber(lane, self, next, /*from_finished=*/true);
  std::abort();  // A finished worker is never resumed.
}

void ChipletTeam::Barrier() {
  if (current_lane != nullptr) {
    LaneBarrier(*current_lane);
  } else {
    ThreadBarrier();
  }
}

}  // namespace rbln::compiler

extern "C" void rbln_chiplet_barrier() {
  if (rbln::compiler::current_team != nullptr) {
    rbln::compiler::current_team->Barrier();
  }
}
