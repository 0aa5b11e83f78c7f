// The chiplet team with fewer OS threads than workers (SPEC A2: a worker per
// chiplet whatever the host's cores): barriers, busy times, worker-local
// state, nesting, concurrent callers and fork.
#include "rbln/compiler/execution/chiplet_team.h"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "rbln/compiler/execution/kernel_errors.h"

namespace rbln::compiler {
namespace {

struct Shape {
  int size;
  int threads;
};

const Shape kShapes[] = {{4, 1}, {4, 2}, {4, 3}, {4, 4}, {3, 2}, {5, 2}, {8, 3}, {1, 1}};

TEST(ChipletTeamTest, UsesAtMostOneThreadPerWorker) {
  EXPECT_EQ(ChipletTeam(4, 2).threads(), 2);
  EXPECT_EQ(ChipletTeam(4, 8).threads(), 4);
  EXPECT_EQ(ChipletTeam(3, 1).threads(), 1);
  EXPECT_EQ(ChipletTeam(4, 2).size(), 4);
}

// spec: A2 -- no worker passes barrier k before every worker reached it,
// however the workers share threads; every worker runs exactly once.
TEST(ChipletTeamTest, BarriersOrderWorkersOnFewerThreads) {
  constexpr int kPhases = 64;
  for (const Shape& shape : kShapes) {
    ChipletTeam team(shape.size, shape.threads);
    for (int round = 0; round < 5; ++round) {
      std::vector<std::atomic<int>> arrivals(kPhases);
      std::vector<std::atomic<int>> runs(shape.size);
      std::atomic<int> violations{0};
      team.Run([&](int w) {
        runs[w].fetch_add(1);
        for (int k = 0; k < kPhases; ++k) {
          // Nobody may have arrived at the next barrier yet.
          if (k + 1 < kPhases && arrivals[k + 1].load() != 0) violations.fetch_add(1);
          arrivals[k].fetch_add(1);
          rbln_chiplet_barrier();
          if (arrivals[k].load() != shape.size) violations.fetch_add(1);
        }
      });
      EXPECT_EQ(violations.load(), 0) << shape.size << " workers on " << shape.threads;
      for (int w = 0; w < shape.size; ++w) EXPECT_EQ(runs[w].load(), 1) << w;
    }
  }
}

// A job with many barriers, many times (stacks are reused across jobs), with
// values passed between workers through the phases.
TEST(ChipletTeamTest, ManyBarriersPassValues) {
  ChipletTeam team(4, 2);
  constexpr int kPhases = 500;
  for (int job = 0; job < 20; ++job) {
    std::vector<std::atomic<int64_t>> value(4);
    std::vector<int64_t> final_sum(4, 0);
    team.Run([&](int w) {
      value[w].store(w + job);
      for (int k = 0; k < kPhases; ++k) {
        rbln_chiplet_barrier();
        // Read the left neighbour's value of the previous phase.
        const int64_t left = value[(w + 3) % 4].load();
        rbln_chiplet_barrier();
        value[w].store((left + 1) % 1000003);
      }
      rbln_chiplet_barrier();
      int64_t sum = 0;
      for (auto& v : value) sum += v.load();
      final_sum[w] = sum;
    });
    // Reference: the same rotation computed sequentially.
    std::vector<int64_t> want(4);
    for (int w = 0; w < 4; ++w) want[w] = w + job;
    for (int k = 0; k < kPhases; ++k) {
      std::vector<int64_t> next(4);
      for (int w = 0; w < 4; ++w) next[w] = (want[(w + 3) % 4] + 1) % 1000003;
      want = next;
    }
    const int64_t want_sum = want[0] + want[1] + want[2] + want[3];
    for (int w = 0; w < 4; ++w) ASSERT_EQ(final_sum[w], want_sum) << "job " << job;
  }
}

// A worker's busy time is its own running time, not its thread's: worker 0
// shares a thread with worker 2, which runs far longer.
TEST(ChipletTeamTest, BusyTimeIsTheWorkersOwn) {
  ChipletTeam team(4, 2);
  std::vector<absl::Duration> busy;
  team.Run(
      [&](int w) {
        if (w == 2) absl::SleepFor(absl::Milliseconds(60));
        if (w % 2 == 1) absl::SleepFor(absl::Milliseconds(5));
        rbln_chiplet_barrier();
        if (w == 0) absl::SleepFor(absl::Milliseconds(10));
      },
      &busy);
  ASSERT_EQ(busy.size(), 4u);
  EXPECT_GE(busy[2], absl::Milliseconds(60));
  EXPECT_GE(busy[0], absl::Milliseconds(10));
  EXPECT_LT(busy[0], absl::Milliseconds(45)) << "worker 0 was charged worker 2's time";
  EXPECT_GE(busy[1], absl::Milliseconds(5));
  EXPECT_GE(busy[3], absl::Milliseconds(5));
}

// Kernel errors stay with the worker that reported them across barriers,
// although its thread runs other workers that clear and take their own.
TEST(ChipletTeamTest, KernelErrorsBelongToTheirWorker) {
  ChipletTeam team(4, 2);
  for (int round = 0; round < 10; ++round) {
    std::vector<std::optional<KernelError>> errors(4);
    team.Run([&](int w) {
      ClearKernelError();
      rbln_chiplet_barrier();
      if (w % 2 == round % 2) rbln_report_index_error(/*site=*/w, /*index=*/100 + w, 4);
      rbln_chiplet_barrier();
      if (w == 3) rbln_report_zero_division(/*site=*/30);  // a later report
      rbln_chiplet_barrier();
      errors[w] = TakeKernelError();
    });
    for (int w = 0; w < 4; ++w) {
      if (w % 2 == round % 2) {
        ASSERT_TRUE(errors[w].has_value()) << "worker " << w << " round " << round;
        EXPECT_EQ(errors[w]->kind, KernelError::Kind::kIndexOutOfRange);
        EXPECT_EQ(errors[w]->site, w);
        EXPECT_EQ(errors[w]->index, 100 + w);
      } else if (w == 3) {
        ASSERT_TRUE(errors[w].has_value());
        EXPECT_EQ(errors[w]->kind, KernelError::Kind::kZeroDivision);
      } else {
        EXPECT_FALSE(errors[w].has_value()) << "worker " << w << " round " << round;
      }
    }
  }
}

thread_local int t_tag = 0;
const bool tag_is_worker_local =
    RegisterWorkerLocal(+[]() -> void* { return &t_tag; }, sizeof(t_tag));

// Registered thread-local state follows the worker; a worker starts with its
// thread's state, and the calling thread keeps worker 0's.
TEST(ChipletTeamTest, WorkerLocalStateFollowsTheWorker) {
  ASSERT_TRUE(tag_is_worker_local);
  ChipletTeam team(5, 2);
  t_tag = 77;
  std::atomic<int> wrong{0};
  team.Run([&](int w) {
    if (w % 2 == 0 && t_tag != 77) wrong.fetch_add(1);  // the caller's thread
    t_tag = 1000 + w;
    for (int k = 0; k < 20; ++k) {
      rbln_chiplet_barrier();
      if (t_tag != 1000 + w + k) wrong.fetch_add(1);
      t_tag = 1000 + w + k + 1;
    }
  });
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(t_tag, 1000 + 0 + 20);
}

// A worker may run a job of another team (whose workers then share the
// worker's thread and stack); concurrent callers of one team take turns.
TEST(ChipletTeamTest, NestedRunInsideAWorker) {
  ChipletTeam outer(4, 2);
  ChipletTeam inner(3, 1);
  std::vector<int> inner_sums(4, 0);
  std::atomic<int> violations{0};
  outer.Run([&](int w) {
    std::vector<std::atomic<int>> slots(3);
    rbln_chiplet_barrier();
    inner.Run([&](int v) {
      slots[v].store(10 * w + v);
      rbln_chiplet_barrier();  // the inner team's
      int sum = 0;
      for (auto& s : slots) sum += s.load();
      if (v == 0) inner_sums[w] = sum;
      rbln_chiplet_barrier();
    });
    rbln_chiplet_barrier();  // the outer team's again
    if (inner_sums[(w + 1) % 4] != 30 * ((w + 1) % 4) + 3) violations.fetch_add(1);
  });
  EXPECT_EQ(violations.load(), 0);
  for (int w = 0; w < 4; ++w) EXPECT_EQ(inner_sums[w], 30 * w + 3) << w;
}

TEST(ChipletTeamTest, ConcurrentCallersTakeTurns) {
  ChipletTeam team(4, 2);
  std::atomic<int> in_job{0};
  std::atomic<int> overlaps{0};
  std::atomic<int> bad{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&, c] {
      for (int i = 0; i < 50; ++i) {
        std::vector<std::atomic<int>> slots(4);
        team.Run([&](int w) {
          if (w == 0 && in_job.fetch_add(1) != 0) overlaps.fetch_add(1);
          slots[w].store(c * 100 + i + w);
          rbln_chiplet_barrier();
          int sum = 0;
          for (auto& s : slots) sum += s.load();
          if (sum != 4 * (c * 100 + i) + 6) bad.fetch_add(1);
          rbln_chiplet_barrier();
          if (w == 0) in_job.fetch_sub(1);
        });
      }
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(bad.load(), 0);
}

// A forked child has none of the parent's threads: it builds teams of its
// own, with workers sharing threads as in the parent.
TEST(ChipletTeamTest, ForkedChildRunsSharedTeam) {
  ChipletTeam& team = ChipletTeam::Shared(4);
  std::vector<std::atomic<int>> slots(4);
  auto job = [&](int w) {
    slots[w].store(w + 1);
    rbln_chiplet_barrier();
    int sum = 0;
    for (auto& s : slots) sum += s.load();
    if (sum != 10) std::abort();
    rbln_chiplet_barrier();
    slots[w].store(0);
  };
  team.Run(job);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    alarm(30);  // A deadlock ends the child with SIGALRM.
    for (int i = 0; i < 20; ++i) ChipletTeam::Shared(4).Run(job);
    ChipletTeam own(4, 2);
    for (int i = 0; i < 20; ++i) own.Run(job);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "child killed by signal "
                                 << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  team.Run(job);  // The parent's team still works.
}

TEST(ChipletTeamTest, ThreadsSettingIsValidated) {
  unsetenv(kChipletThreadsVar);
  absl::StatusOr<int> threads = ChipletThreadsFromEnv();
  ASSERT_TRUE(threads.ok()) << threads.status();
  EXPECT_GE(*threads, 1);
  setenv(kChipletThreadsVar, "3", 1);
  threads = ChipletThreadsFromEnv();
  ASSERT_TRUE(threads.ok()) << threads.status();
  EXPECT_EQ(*threads, 3);
  EXPECT_EQ(ChipletTeam(4).threads(), 3);
  for (const char* bad : {"0", "-2", "two", "4000"}) {
    setenv(kChipletThreadsVar, bad, 1);
    threads = ChipletThreadsFromEnv();
    EXPECT_FALSE(threads.ok()) << bad;
    EXPECT_NE(threads.status().message().find(kChipletThreadsVar), std::string::npos)
        << threads.status();
  }
  unsetenv(kChipletThreadsVar);
}

}  // namespace
}  // namespace rbln::compiler
