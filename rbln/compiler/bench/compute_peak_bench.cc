// The arithmetic peak of this machine's vector units, measured: on every
// core (one thread each) a loop of independent multiply-adds with nothing
// to load, so that only the instruction's throughput bounds it. Per
// instruction set the CPU has:
//   bf16_dot      vdpbf16ps on 512-bit registers (AVX-512 BF16): what the
//                 bf16 GEMMs of oneDNN's brgemm and of the skinny kernel run
//                 on Zen 4 and Cooper Lake (64 flops an instruction);
//   f32_fma512    vfmadd on 512-bit registers (32 flops);
//   f32_fma256    vfmadd on 256-bit registers (AVX2 + FMA, 16 flops).
// Prints the best and median GFLOP/s of each over --reps runs. AMX tiles are
// not measured: where the CPU has them (Sapphire Rapids and later) the bf16
// GEMM peak is above every number here. The ceiling a compute-bound step
// (an LLM prefill) is measured against (rbln/tools/bench/llm_bench.py).
//
//   bazel run -c opt //rbln/compiler/bench:compute_peak_bench -- [--reps R]
//       [--threads T] [--iters N]
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Options {
  int reps = 5;
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int64_t iters = int64_t{1} << 25;  // Loop trips per thread and run.
};

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "compute_peak_bench: %s needs a value\n", arg.c_str());
      std::exit(2);
    }
    const int64_t v = std::atoll(argv[++i]);
    if (arg == "--reps") {
      o.reps = static_cast<int>(v);
    } else if (arg == "--threads") {
      o.threads = static_cast<int>(v);
    } else if (arg == "--iters") {
      o.iters = v;
    } else {
      std::fprintf(stderr,
                   "usage: compute_peak_bench [--reps R] [--threads T] [--iters N]\n");
      std::exit(2);
    }
  }
  if (o.reps < 1 || o.threads < 1 || o.iters < 1) {
    std::fprintf(stderr, "compute_peak_bench: --reps, --threads and --iters >= 1\n");
    std::exit(2);
  }
  return o;
}

// kChains independent accumulators: more than the instruction's latency
// times its throughput on the CPUs above (6 x 2 at most), so the chains
// never wait on each other. The empty asm keeps each accumulator in its
// register and the loop from being folded; every loop over them is
// unrolled (else GCC keeps the array in memory, a load and store per step).
constexpr int kChains = 12;

// Each returns a sum of its accumulators (kept observable by the caller).
__attribute__((target("avx512f,avx512bf16"))) float Bf16Dot(int64_t iters) {
  __m512 acc[kChains];
#pragma GCC unroll 12
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_setzero_ps();
  const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80);  // bf16 1.0
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int c = 0; c < kChains; ++c) {
      acc[c] = _mm512_dpbf16_ps(acc[c], x, x);
      __asm__("" : "+v"(acc[c]));
    }
  }
  __m512 s = acc[0];
#pragma GCC unroll 12
  for (int c = 1; c < kChains; ++c) s = _mm512_add_ps(s, acc[c]);
  return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx512f"))) float F32Fma512(int64_t iters) {
  __m512 acc[kChains];
#pragma GCC unroll 12
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_setzero_ps();
  const __m512 x = _mm512_set1_ps(1e-9f);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int c = 0; c < kChains; ++c) {
      acc[c] = _mm512_fmadd_ps(x, x, acc[c]);
      __asm__("" : "+v"(acc[c]));
    }
  }
  __m512 s = acc[0];
#pragma GCC unroll 12
  for (int c = 1; c < kChains; ++c) s = _mm512_add_ps(s, acc[c]);
  return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx2,fma"))) float F32Fma256(int64_t iters) {
  __m256 acc[kChains];
#pragma GCC unroll 12
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_setzero_ps();
  const __m256 x = _mm256_set1_ps(1e-9f);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int c = 0; c < kChains; ++c) {
      acc[c] = _mm256_fmadd_ps(x, x, acc[c]);
      __asm__("" : "+x"(acc[c]));
    }
  }
  __m256 s = acc[0];
#pragma GCC unroll 12
  for (int c = 1; c < kChains; ++c) s = _mm256_add_ps(s, acc[c]);
  float lanes[8];
  _mm256_storeu_ps(lanes, s);
  float sum = 0;
  for (float v : lanes) sum += v;
  return sum;
}

struct Unit {
  const char* name;
  double flops_per_instruction;
  float (*run)(int64_t iters);
};

}  // namespace

int main(int argc, char** argv) {
  const Options o = Parse(argc, argv);
  __builtin_cpu_init();
  std::vector<Unit> units;
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16")) {
    units.push_back({"bf16_dot", 64, Bf16Dot});
  }
  if (__builtin_cpu_supports("avx512f")) units.push_back({"f32_fma512", 32, F32Fma512});
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    units.push_back({"f32_fma256", 16, F32Fma256});
  }
  std::printf("compute_peak_bench: %d thread(s), %d reps, %lld x %d instructions per thread\n",
              o.threads, o.reps, static_cast<long long>(o.iters), kChains);
  std::printf("%-11s %12s %14s\n", "unit", "best GFLOP/s", "median GFLOP/s");
  float observable = 0;
  for (const Unit& u : units) {
    std::vector<double> seconds;
    std::vector<float> sums(o.threads);
    for (int rep = 0; rep < o.reps; ++rep) {
      const auto start = std::chrono::steady_clock::now();
      std::vector<std::thread> pool;
      for (int t = 0; t < o.threads; ++t) {
        pool.emplace_back([&, t] { sums[t] = u.run(o.iters); });
      }
      for (std::thread& t : pool) t.join();
      seconds.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      for (float s : sums) observable += s;
    }
    std::sort(seconds.begin(), seconds.end());
    const double flops =
        u.flops_per_instruction * kChains * static_cast<double>(o.iters) * o.threads;
    std::printf("%-11s %12.1f %14.1f\n", u.name, flops / seconds.front() / 1e9,
                flops / seconds[seconds.size() / 2] / 1e9);
  }
  if (units.empty()) std::printf("(no AVX2, AVX-512 or AVX-512 BF16 on this CPU)\n");
  std::printf("checksum %.3g\n", observable);
  return 0;
}
