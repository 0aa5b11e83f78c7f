// The GEMM library comparison behind onednn_gemm.h (docs/benchmarks.md,
// "GEMM library"): an n^3 GEMM through oneDNN's matmul primitive (f32 and
// bf16 operands, f32 accumulation, as rbln_gemm runs it; f16 operands on
// both routes, F16GemmRoute: B split or widened per call, as for an
// operand that is not a packed weight; then f16 packed weights by rows of
// A on both routes) and through
// cblas_sgemm of each OpenBLAS given, on 1 thread and on every core.
// oneDNN on several cores runs rbln_gemm's blocks on that many threads, as
// the chiplet workers do; OpenBLAS threads itself.
//
// Per variant: the best thread-CPU time of one call on 1 thread (robust to
// other load on the machine) and the median wall time. Then the bf16 GEMM
// as compiled programs run it: blocks on the chiplet team (1, 2, 4
// workers), cut by rows or columns, C stored as f32 or bf16.
//
//   bazel run -c opt //rbln/compiler/bench:gemm_library_bench -- [--n 1024]
//       [--openblas libopenblas.so.0] [--openblas /path/libscipy_openblas.so]
// A library whose symbols carry a prefix (scipy-openblas32: scipy_) is
// found by trying "scipy_" too.
#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "rbln/compiler/bench/library_bench_timing.h"
#include "rbln/compiler/execution/chiplet_team.h"
#include "rbln/compiler/kernels/input_content.h"
#include "rbln/compiler/kernels/onednn_gemm.h"
#include "rbln/runtime/executable.h"

namespace {

using rbln::compiler::GemmOperandType;
using rbln::compiler::GemmProblem;
using rbln::compiler::bench::ThreadCpuSeconds;
using rbln::compiler::bench::Time;

void Row(const std::string& name, int threads, double flops,
         std::pair<double, double> t, bool cpu_valid) {
  if (cpu_valid) {
    std::printf("%-44s %3d %10.1f %10.1f\n", name.c_str(), threads,
                flops / t.first / 1e9, flops / t.second / 1e9);
  } else {
    std::printf("%-44s %3d %10s %10.1f\n", name.c_str(), threads, "-",
                flops / t.second / 1e9);
  }
}

using Sgemm = void (*)(int, int, int, int, int, int, float, const float*, int,
                       const float*, int, float, float*, int);
using SetThreads = void (*)(int);

}  // namespace

// f16 weights as a decoder's linear layers read them: B [n, n] a program
// input (packed once, PackedWeightCache), stored transposed, several in turn
// so that they stream from memory as a model's weights do. Median wall
// microseconds per call, by rows of A, on both F16GemmRoutes: with few rows
// a call streams its weight, so its packed bytes decide (bf16x3 packs Bh
// and Bl, the bytes of the f32 widening).
void F16WeightsByRows(int64_t n, const std::vector<uint16_t>& weight,
                      int reps) {
  constexpr int kWeights = 16;
  std::vector<std::vector<uint16_t>> weights(kWeights, weight);
  std::vector<rbln::runtime::BufferView> views(kWeights);
  std::vector<void*> data(kWeights);
  for (int w = 0; w < kWeights; ++w) {
    views[w].data = data[w] = weights[w].data();
    views[w].dtype = rbln::DType::kFloat16;
    views[w].sizes = {n * n};
    views[w].strides = {1};
    views[w].content_address = 0x40000000 + 0x1000000 * int64_t{w};
    views[w].content_version = 1;
  }
  rbln::compiler::InputContentScope scope(views, data, kWeights);
  std::vector<uint16_t> a(256 * n, 0x3555);
  std::vector<float> c(256 * n);
  std::printf("f16 weights %lldx%lld (%d in turn), packed: wall us per call\n",
              static_cast<long long>(n), static_cast<long long>(n), kWeights);
  std::printf("%6s %14s %14s %8s\n", "rows", "f32 route", "bf16x3", "ratio");
  for (int64_t m : {1, 4, 8, 12, 16, 32, 64, 128, 256}) {
    double us[2];
    int i = 0;
    for (auto route : {rbln::compiler::F16GemmRoute::kWidenedF32,
                       rbln::compiler::F16GemmRoute::kBf16x3}) {
      rbln::compiler::SetF16GemmRoute(route);
      GemmProblem p;
      p.type = GemmOperandType::kF16;
      p.trans_b = true;
      p.accumulate = false;
      p.m = m;
      p.n = p.k = p.lda = p.ldb = p.ldc = n;
      auto all = [&] {
        for (int w = 0; w < kWeights; ++w) {
          rbln::compiler::RunGemmBlock(p, a.data(), weights[w].data(),
                                       c.data(), nullptr, 0, 1);
        }
      };
      all();  // the first use of each weight: packed at the second
      us[i++] = Time(all, reps).second / kWeights * 1e6;
    }
    std::printf("%6lld %14.1f %14.1f %8.2f\n", static_cast<long long>(m),
                us[0], us[1], us[1] / us[0]);
  }
  rbln::compiler::SetF16GemmRoute(std::nullopt);
}

int main(int argc, char** argv) {
  int64_t n = 1024;
  int reps = 9;
  std::vector<std::string> openblas;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string arg = argv[i];
    if (arg == "--n") {
      n = std::atoll(argv[i + 1]);
    } else if (arg == "--reps") {
      reps = std::atoi(argv[i + 1]);
    } else if (arg == "--openblas") {
      openblas.push_back(argv[i + 1]);
    } else {
      std::fprintf(stderr, "unknown argument %s\n", arg.c_str());
      return 2;
    }
  }
  if (openblas.empty()) openblas.push_back("libopenblas.so.0");
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const double flops = 2.0 * n * n * n;
  std::vector<float> a(n * n), b(n * n), c(n * n);
  std::vector<uint16_t> a16(n * n), b16(n * n), ah(n * n), bh(n * n);
  for (int64_t i = 0; i < n * n; ++i) {
    a[i] = static_cast<float>(i % 7) * 0.1f;
    b[i] = static_cast<float>(i % 5) * 0.2f;
    uint32_t bits;
    std::memcpy(&bits, &a[i], 4);
    a16[i] = static_cast<uint16_t>(bits >> 16);
    std::memcpy(&bits, &b[i], 4);
    b16[i] = static_cast<uint16_t>(bits >> 16);
    // Halves in [1/8, 1), most with more than bf16's 8 significant bits.
    ah[i] = static_cast<uint16_t>(0x3000 + (i * 37) % 0xc00);
    bh[i] = static_cast<uint16_t>(0x3000 + (i * 53) % 0xc00);
  }
  std::printf("GEMM %lldx%lldx%lld, %d core(s); GFLOP/s from the best 1-thread CPU time "
              "and from the median wall time of %d calls\n",
              static_cast<long long>(n), static_cast<long long>(n),
              static_cast<long long>(n), cores, reps);
  std::printf("%-44s %3s %10s %10s\n", "library", "thr", "cpu", "wall");
  if (rbln::compiler::LoadOnednn()) {
    const std::string name = rbln::compiler::OnednnDescription();
    for (GemmOperandType type : {GemmOperandType::kF32, GemmOperandType::kBF16}) {
      GemmProblem p;
      p.type = type;
      p.accumulate = false;
      p.m = p.n = p.k = p.lda = p.ldb = p.ldc = n;
      const bool bf16 = type == GemmOperandType::kBF16;
      const void* pa = bf16 ? static_cast<const void*>(a16.data()) : a.data();
      const void* pb = bf16 ? static_cast<const void*>(b16.data()) : b.data();
      const std::string label =
          std::string("oneDNN matmul ") + (bf16 ? "bf16" : "f32");
      Row(label, 1, flops,
          Time([&] {
            rbln::compiler::RunGemmBlock(p, pa, pb, c.data(), nullptr, 0, 1);
          }, reps),
          true);
      // rbln_gemm's blocks (4, as on a rebel100 card) over every core.
      Row(label + " (4 blocks)", cores, flops,
          Time(
              [&] {
                std::vector<std::thread> threads;
                for (int t = 0; t < cores; ++t) {
                  threads.emplace_back([&, t] {
                    for (int64_t block = t; block < 4; block += cores) {
                      rbln::compiler::RunGemmBlock(p, pa, pb, c.data(), nullptr,
                                                 block, 4);
                    }
                  });
                }
                for (std::thread& t : threads) t.join();
              },
              reps),
          false);
    }
    for (auto [route, label] :
         {std::pair{rbln::compiler::F16GemmRoute::kWidenedF32,
                    "oneDNN matmul f16 (widened to f32)"},
          std::pair{rbln::compiler::F16GemmRoute::kBf16x3,
                    "oneDNN matmul f16 (bf16x3)"}}) {
      rbln::compiler::SetF16GemmRoute(route);
      GemmProblem p;
      p.type = GemmOperandType::kF16;
      p.accumulate = false;
      p.m = p.n = p.k = p.lda = p.ldb = p.ldc = n;
      Row(label, 1, flops,
          Time([&] {
            rbln::compiler::RunGemmBlock(p, ah.data(), bh.data(), c.data(),
                                         nullptr, 0, 1);
          }, reps),
          true);
    }
    rbln::compiler::SetF16GemmRoute(std::nullopt);
    std::printf("  (%s)\n", name.c_str());
    F16WeightsByRows(n, bh, reps);
    // As compiled programs run the bf16 GEMM: its blocks spread over the
    // chiplet team (4 workers on rebel100, whatever the cores), cut by rows
    // (GemmBlockOf's choice for m >= n) or by columns, C stored as f32 (a
    // separate pass rounds it) or as bf16 by the call. "cpu": GFLOP/s per
    // CPU-second, from the best sum of the workers' thread-CPU times (what
    // the blocks cost, robust to load); "wall": from the median wall time.
    std::printf("bf16 GEMM on the chiplet team              cpu       wall\n");
    std::vector<uint16_t> c16(n * n);
    for (int workers : {1, 2, 4}) {
      rbln::compiler::ChipletTeam& team =
          rbln::compiler::ChipletTeam::Shared(workers);
      for (int64_t blocks : {int64_t{1}, int64_t{2}, int64_t{4}}) {
        if (blocks < workers) continue;
        for (bool columns : {false, true}) {
          if (columns && blocks == 1) continue;
          for (bool store_bf16 : {false, true}) {
            GemmProblem p;
            p.type = GemmOperandType::kBF16;
            p.accumulate = false;
            p.m = p.n = p.k = p.lda = p.ldb = p.ldc = n;
            if (store_bf16) p.epilogue.store = rbln::compiler::StoreType::kBF16;
            GemmProblem q = p;
            q.n = n / blocks;
            const int64_t out_bytes = store_bf16 ? 2 : 4;
            void* out = store_bf16 ? static_cast<void*>(c16.data()) : c.data();
            std::vector<double> cpu(workers);
            auto run_block = [&](int64_t block) {
              if (!columns) {
                rbln::compiler::RunGemmBlock(p, a16.data(), b16.data(), out,
                                             nullptr, block, blocks);
                return;
              }
              rbln::compiler::RunGemmBlock(
                  q, a16.data(), b16.data() + block * q.n,
                  static_cast<char*>(out) + block * q.n * out_bytes, nullptr,
                  0, 1);
            };
            double best_cpu = 1e30;
            auto t = Time(
                [&] {
                  team.Run([&](int worker) {
                    const double start = ThreadCpuSeconds();
                    for (int64_t block = worker; block < blocks;
                         block += workers) {
                      run_block(block);
                    }
                    cpu[worker] = ThreadCpuSeconds() - start;
                  });
                  double total = 0;
                  for (double x : cpu) total += x;
                  best_cpu = std::min(best_cpu, total);
                },
                reps);
            std::printf("  workers %d blocks %lld %-7s store %-4s %10.1f %10.1f\n",
                        workers, static_cast<long long>(blocks),
                        columns ? "columns" : "rows",
                        store_bf16 ? "bf16" : "f32", flops / best_cpu / 1e9,
                        flops / t.second / 1e9);
          }
        }
      }
    }
  } else {
    std::printf("oneDNN: %s\n", rbln::compiler::OnednnDescription().c_str());
  }
  for (const std::string& path : openblas) {
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      std::printf("%s: %s\n", path.c_str(), dlerror());
      continue;
    }
    std::string prefix;
    auto sgemm = reinterpret_cast<Sgemm>(dlsym(handle, "cblas_sgemm"));
    if (sgemm == nullptr) {
      prefix = "scipy_";
      sgemm = reinterpret_cast<Sgemm>(dlsym(handle, "scipy_cblas_sgemm"));
    }
    auto set_threads = reinterpret_cast<SetThreads>(
        dlsym(handle, (prefix + "openblas_set_num_threads").c_str()));
    using Config = const char* (*)();
    auto config = reinterpret_cast<Config>(
        dlsym(handle, (prefix + "openblas_get_config").c_str()));
    if (sgemm == nullptr || set_threads == nullptr) {
      std::printf("%s: no cblas_sgemm/openblas_set_num_threads\n", path.c_str());
      continue;
    }
    const bool sbgemm = dlsym(handle, (prefix + "cblas_sbgemm").c_str()) != nullptr;
    for (int threads : {1, cores}) {
      set_threads(threads);
      Row("OpenBLAS sgemm", threads, flops,
          Time(
              [&] {
                sgemm(101, 111, 111, n, n, n, 1.0f, a.data(), n, b.data(), n,
                      0.0f, c.data(), n);
              },
              reps),
          threads == 1);
    }
    std::printf("  (%s: %s; cblas_sbgemm %s)\n", path.c_str(),
                config ? config() : "?", sbgemm ? "exported" : "not exported");
  }
  return 0;
}
