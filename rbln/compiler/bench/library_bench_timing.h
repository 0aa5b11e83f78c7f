// Timing of one library call as the library benches (gemm_library_bench,
// conv_library_bench) report it: the best thread-CPU time of a call on one
// thread, robust to other load on the machine, and the median wall time.
#ifndef RBLN_COMPILER_BENCH_LIBRARY_BENCH_TIMING_H_
#define RBLN_COMPILER_BENCH_LIBRARY_BENCH_TIMING_H_

#include <time.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <utility>
#include <vector>

namespace rbln::compiler::bench {

// CPU seconds the calling thread has used.
inline double ThreadCpuSeconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

inline double WallSeconds() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// {best thread-CPU seconds, median wall seconds} of `reps` calls after one
// warm-up.
inline std::pair<double, double> Time(const std::function<void()>& call,
                                      int reps) {
  call();
  std::vector<double> cpu, wall;
  for (int i = 0; i < reps; ++i) {
    const double c = ThreadCpuSeconds(), w = WallSeconds();
    call();
    cpu.push_back(ThreadCpuSeconds() - c);
    wall.push_back(WallSeconds() - w);
  }
  std::sort(cpu.begin(), cpu.end());
  std::sort(wall.begin(), wall.end());
  return {cpu.front(), wall[wall.size() / 2]};
}

}  // namespace rbln::compiler::bench

#endif  // RBLN_COMPILER_BENCH_LIBRARY_BENCH_TIMING_H_
