// Decode-step GEMMs (a few rows of A against a linear layer's weight, B
// stored [n, k]): the skinny bf16 kernel (kernels/bf16_skinny_gemm.h, B
// read as stored; --isa picks a lower instruction set) against oneDNN's f32
// matmul
// on an f32 copy of the weight (what the widened route runs at best: a
// weight input, packed once where oneDNN packs), on 1
// worker and on every core (columns split over the chiplet team). Several
// weights in turn so that they stream from memory as a model's do.
//
// Then the bf16 GEMM as rbln_gemm runs it ("bf16 route", microseconds).
// Per row: microseconds of one GEMM -- on 1 worker the best thread-CPU time
// (the caller's thread runs it; robust to other load), on several the
// median wall time -- and the GB/s of the bytes its B holds (bf16: 2 per
// element, f32 packed: 4).
//
//   bazel run -c opt //rbln/compiler/bench:skinny_gemm_bench -- [--reps 21]
//       [--isa avx2]  (the kernel's instruction set, at most the CPU's best)
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "rbln/compiler/bench/library_bench_timing.h"
#include "rbln/compiler/execution/chiplet_team.h"
#include "rbln/compiler/kernels/bf16_skinny_gemm.h"
#include "rbln/compiler/kernels/input_content.h"
#include "rbln/compiler/kernels/onednn_gemm.h"
#include "rbln/runtime/executable.h"

namespace {

using rbln::compiler::GemmOperandType;
using rbln::compiler::GemmProblem;
using rbln::compiler::bench::Time;

constexpr int kWeights = 3;

}  // namespace

int main(int argc, char** argv) {
  int reps = 21;
  rbln::compiler::SkinnyIsa isa = rbln::compiler::BestSkinnyIsa();
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string arg = argv[i];
    if (arg == "--reps") {
      reps = std::atoi(argv[i + 1]);
    } else if (arg == "--isa") {
      // A lower instruction set than the best, for an A/B on one CPU.
      bool found = false;
      for (int v = 0; v <= static_cast<int>(isa); ++v) {
        const auto candidate = static_cast<rbln::compiler::SkinnyIsa>(v);
        if (argv[i + 1] == std::string(SkinnyIsaName(candidate))) {
          isa = candidate;
          found = true;
        }
      }
      if (!found) {
        std::fprintf(stderr, "--isa %s: not on this CPU\n", argv[i + 1]);
        return 2;
      }
    } else {
      std::fprintf(stderr, "unknown argument %s\n", arg.c_str());
      return 2;
    }
  }
  const bool onednn = rbln::compiler::LoadOnednn();
  const int cores =
      static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // (Not OnednnDescription(): it plans a bf16 matmul, which oneDNN 2.6
  // has none of below avx512_core.)
  std::printf("skinny bf16 kernel: %s; oneDNN %s\n",
              rbln::compiler::SkinnyIsaName(isa),
              onednn ? "loaded" : "not loaded");
  std::printf("%5s %6s %6s %4s %12s %8s %14s %8s %8s %12s\n", "m", "n", "k",
              "thr", "bf16 skinny", "GB/s", "oneDNN f32", "GB/s", "speedup",
              "bf16 route");
  for (auto [n, k] : {std::pair<int64_t, int64_t>{8192, 2048}, {2048, 8192}}) {
    std::vector<std::vector<uint16_t>> b16(kWeights);
    std::vector<std::vector<float>> b32(kWeights);
    // The f32 copies and the bf16 weights, all program inputs.
    std::vector<rbln::runtime::BufferView> views(2 * kWeights);
    std::vector<void*> data(2 * kWeights);
    for (int w = 0; w < kWeights; ++w) {
      b16[w].resize(n * k);
      b32[w].resize(n * k);
      for (int64_t i = 0; i < n * k; ++i) {
        b16[w][i] = static_cast<uint16_t>(0x3c00 + (i * 37 + w) % 0x300);
        const uint32_t bits = static_cast<uint32_t>(b16[w][i]) << 16;
        std::memcpy(&b32[w][i], &bits, 4);
      }
      views[w].data = data[w] = b32[w].data();
      views[w].dtype = rbln::DType::kFloat32;
      views[w].sizes = {n * k};
      views[w].strides = {1};
      views[w].content_address = 0x40000000 + 0x10000000 * int64_t{w};
      views[w].content_version = 1;
      views[kWeights + w] = views[w];
      views[kWeights + w].data = data[kWeights + w] = b16[w].data();
      views[kWeights + w].dtype = rbln::DType::kBFloat16;
      views[kWeights + w].content_address += 0x8000000;
    }
    rbln::compiler::InputContentScope scope(views, data, 2 * kWeights);
    std::vector<uint16_t> a16(24 * k, 0x3f80);
    std::vector<float> a32(24 * k, 1.0f);
    std::vector<float> c(24 * n);
    for (int64_t m : {1, 4, 8, 12, 16, 24}) {
      for (int threads : {1, cores}) {
        rbln::compiler::ChipletTeam& team =
            rbln::compiler::ChipletTeam::Shared(threads);
        GemmProblem p;
        p.trans_b = true;
        p.accumulate = false;
        p.m = m;
        p.n = n;
        p.k = p.lda = p.ldb = k;
        p.ldc = n;
        auto skinny = [&] {
          for (int w = 0; w < kWeights; ++w) {
            team.Run([&](int worker) {
              GemmProblem q = p;
              q.type = GemmOperandType::kBF16;
              const int64_t first = n * worker / threads;
              q.n = n * (worker + 1) / threads - first;
              // Each worker's own dense part of C (the caller's epilogue
              // would store it).
              rbln::compiler::SkinnyBf16Gemm(q, a16.data(),
                                             b16[w].data() + first * k,
                                             c.data() + m * first, isa);
            });
          }
        };
        // The best thread-CPU time on 1 worker, else the median wall time.
        auto seconds = [&](const std::pair<double, double>& t) {
          return (threads == 1 ? t.first : t.second) / kWeights;
        };
        const double t16 = seconds(Time(skinny, reps));
        double t32 = 0;
        if (onednn && threads == 1 && m == 1) {
          GemmProblem f32 = p;
          f32.type = GemmOperandType::kF32;
          std::printf("  (oneDNN f32: %s)\n",
                      rbln::compiler::GemmImplementation(f32).c_str());
        }
        if (onednn) {
          auto packed = [&] {
            for (int w = 0; w < kWeights; ++w) {
              team.Run([&](int worker) {
                GemmProblem q = p;
                q.type = GemmOperandType::kF32;
                rbln::compiler::RunGemmBlock(q, a32.data(), b32[w].data(),
                                             c.data(), nullptr, worker,
                                             threads);
              });
            }
          };
          packed();  // packs each weight
          t32 = seconds(Time(packed, reps));
        }
        // The bf16 GEMM as compiled programs run it (RunGemmBlock): the
        // skinny kernel where SkinnyBf16Preferred, else oneDNN (on f32
        // copies below avx512_core).
        double route = 0;
        if (onednn) {
          auto bf16 = [&] {
            for (int w = 0; w < kWeights; ++w) {
              team.Run([&](int worker) {
                GemmProblem q = p;
                q.type = GemmOperandType::kBF16;
                rbln::compiler::RunGemmBlock(q, a16.data(), b16[w].data(),
                                             c.data(), nullptr, worker,
                                             threads);
              });
            }
          };
          bf16();
          route = seconds(Time(bf16, reps));
        }
        const double bytes = static_cast<double>(n) * k;
        std::printf(
            "%5lld %6lld %6lld %4d %12.1f %8.1f %14.1f %8.1f %8.2f %12.1f\n",
            static_cast<long long>(m), static_cast<long long>(n),
            static_cast<long long>(k), threads, t16 * 1e6,
            2 * bytes / t16 / 1e9, t32 * 1e6,
            t32 > 0 ? 4 * bytes / t32 / 1e9 : 0.0, t32 > 0 ? t32 / t16 : 0.0,
            route * 1e6);
      }
    }
  }
  return 0;
}
