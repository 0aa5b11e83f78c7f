// STREAM-style memory bandwidth of this machine: copy, scale, add and triad
// over float arrays much larger than the caches, on every core (one thread
// each, static partition, arrays first touched by the thread that uses
// them), and read: the same arrays only read (what a decode step's GEMVs
// do with their weights). Prints the best and median GB/s of each kernel
// over --reps runs, bytes counted as STREAM does (copy and scale move 2
// arrays, add and triad 3, read 1). The reference the fused element-wise
// kernels and the LLM decode are measured against
// (rbln/tools/bench/kernel_bench.py, llm_bench.py, docs/benchmarks.md).
//
//   bazel run -c opt //rbln/compiler/bench:stream_bench -- [--floats N] [--reps R]
//       [--threads T]
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Options {
  int64_t floats = int64_t{32} << 20;  // 128 MiB per array
  int reps = 10;
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
};

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> int64_t {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "stream_bench: %s needs a value\n", arg.c_str());
        std::exit(2);
      }
      return std::atoll(argv[++i]);
    };
    if (arg == "--floats") {
      o.floats = value();
    } else if (arg == "--reps") {
      o.reps = static_cast<int>(value());
    } else if (arg == "--threads") {
      o.threads = static_cast<int>(value());
    } else {
      std::fprintf(stderr,
                   "usage: stream_bench [--floats N] [--reps R] [--threads T]\n");
      std::exit(2);
    }
  }
  if (o.floats < 1024 || o.reps < 1 || o.threads < 1) {
    std::fprintf(stderr, "stream_bench: --floats >= 1024, --reps and --threads >= 1\n");
    std::exit(2);
  }
  return o;
}

// Runs body(begin, end) over [0, n) split evenly across `threads` threads.
void Parallel(int threads, int64_t n,
              const std::function<void(int64_t, int64_t)>& body) {
  std::vector<std::thread> pool;
  const int64_t part = (n + threads - 1) / threads;
  for (int t = 0; t < threads; ++t) {
    const int64_t begin = std::min(n, t * part), end = std::min(n, begin + part);
    pool.emplace_back([&body, begin, end] { body(begin, end); });
  }
  for (std::thread& t : pool) t.join();
}

// The xor of the 8-byte words of [p, p + bytes): 32-byte AVX2 loads in 4
// independent chains where the CPU has AVX2 (what the decode kernels read
// with; 8-byte loads reach about three quarters of the bandwidth here),
// else 8-byte words in 8 named chains (GCC keeps an array of them in
// memory).
__attribute__((target("avx2"))) uint64_t XorWordsAvx2(const float* p, int64_t bytes) {
  const char* at = reinterpret_cast<const char*>(p);
  __m256i x0 = _mm256_setzero_si256(), x1 = x0, x2 = x0, x3 = x0;
  int64_t i = 0;
  for (; i + 128 <= bytes; i += 128) {
    x0 = _mm256_xor_si256(x0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at + i)));
    x1 = _mm256_xor_si256(x1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at + i + 32)));
    x2 = _mm256_xor_si256(x2, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at + i + 64)));
    x3 = _mm256_xor_si256(x3, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at + i + 96)));
  }
  const __m256i x = _mm256_xor_si256(_mm256_xor_si256(x0, x1), _mm256_xor_si256(x2, x3));
  uint64_t sum = _mm256_extract_epi64(x, 0) ^ _mm256_extract_epi64(x, 1) ^
                 _mm256_extract_epi64(x, 2) ^ _mm256_extract_epi64(x, 3);
  for (; i < bytes; ++i) sum ^= static_cast<unsigned char>(at[i]);
  return sum;
}

uint64_t XorWords(const float* p, int64_t bytes) {
  if (__builtin_cpu_supports("avx2")) return XorWordsAvx2(p, bytes);
  const uint64_t* w = reinterpret_cast<const uint64_t*>(p);
  const int64_t words = bytes / 8;
  uint64_t x0 = 0, x1 = 0, x2 = 0, x3 = 0, x4 = 0, x5 = 0, x6 = 0, x7 = 0;
  int64_t i = 0;
  for (; i + 8 <= words; i += 8) {
    x0 ^= w[i];
    x1 ^= w[i + 1];
    x2 ^= w[i + 2];
    x3 ^= w[i + 3];
    x4 ^= w[i + 4];
    x5 ^= w[i + 5];
    x6 ^= w[i + 6];
    x7 ^= w[i + 7];
  }
  for (; i < words; ++i) x0 ^= w[i];
  return x0 ^ x1 ^ x2 ^ x3 ^ x4 ^ x5 ^ x6 ^ x7;
}

struct Kernel {
  const char* name;
  int arrays;  // moved per element
  std::function<void(int64_t, int64_t)> body;
};

}  // namespace

int main(int argc, char** argv) {
  const Options o = Parse(argc, argv);
  const int64_t n = o.floats;
  // 64-byte aligned, not value-initialized: the threads touch their parts.
  auto alloc = [n] {
    return std::unique_ptr<float, decltype(&std::free)>(
        static_cast<float*>(std::aligned_alloc(64, ((n * 4 + 63) / 64) * 64)),
        &std::free);
  };
  auto a_mem = alloc(), b_mem = alloc(), c_mem = alloc();
  float* __restrict a = a_mem.get();
  float* __restrict b = b_mem.get();
  float* __restrict c = c_mem.get();
  Parallel(o.threads, n, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      a[i] = 1.0f;
      b[i] = 2.0f;
      c[i] = 0.0f;
    }
  });
  const float s = 3.0f;
  // The read kernel's result (kept observable below).
  std::atomic<uint64_t> read_sum{0};
  std::vector<Kernel> kernels = {
      {"copy", 2,
       [&](int64_t begin, int64_t end) {
         for (int64_t i = begin; i < end; ++i) c[i] = a[i];
       }},
      {"scale", 2,
       [&](int64_t begin, int64_t end) {
         for (int64_t i = begin; i < end; ++i) b[i] = s * c[i];
       }},
      {"add", 3,
       [&](int64_t begin, int64_t end) {
         for (int64_t i = begin; i < end; ++i) c[i] = a[i] + b[i];
       }},
      {"triad", 3,
       [&](int64_t begin, int64_t end) {
         for (int64_t i = begin; i < end; ++i) a[i] = b[i] + s * c[i];
       }},
      // Reads a once (xors of its words: the loads bound it, not a float
      // add's latency).
      {"read", 1,
       [&](int64_t begin, int64_t end) {
         read_sum.fetch_xor(XorWords(a + begin, (end - begin) * 4),
                            std::memory_order_relaxed);
       }},
  };
  std::vector<std::vector<double>> seconds(kernels.size());
  for (int rep = 0; rep < o.reps; ++rep) {
    for (size_t k = 0; k < kernels.size(); ++k) {
      const auto start = std::chrono::steady_clock::now();
      Parallel(o.threads, n, kernels[k].body);
      seconds[k].push_back(std::chrono::duration<double>(
                               std::chrono::steady_clock::now() - start)
                               .count());
    }
  }
  std::printf("stream_bench: %lld floats (%.0f MiB) per array, %d thread(s), %d reps\n",
              static_cast<long long>(n), n * 4.0 / (1 << 20), o.threads, o.reps);
  std::printf("%-8s %10s %12s\n", "kernel", "best GB/s", "median GB/s");
  for (size_t k = 0; k < kernels.size(); ++k) {
    std::vector<double>& t = seconds[k];
    std::sort(t.begin(), t.end());
    const double bytes = static_cast<double>(kernels[k].arrays) * n * 4;
    std::printf("%-8s %10.1f %12.1f\n", kernels[k].name, bytes / t.front() / 1e9,
                bytes / t[t.size() / 2] / 1e9);
  }
  // Keeps the stores observable.
  double checksum = 0;
  for (int64_t i = 0; i < n; i += 4096) checksum += a[i] + b[i] + c[i];
  checksum += static_cast<double>(read_sum.load() & 1);
  std::printf("checksum %.1f\n", checksum);
  return 0;
}
