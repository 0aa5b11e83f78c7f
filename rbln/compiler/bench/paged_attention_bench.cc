// rbln_paged_attention's paths on this CPU (docs/benchmarks.md, "Paged
// attention kernel"): Llama-3.2-1B's attention (32 query heads, 8 kv heads,
// head size 64; vLLM's block size 16) over a bf16 or f32 KV cache, decode
// (one query a request) and a 16-token prefill chunk, per batch and context
// length, every request's context its own shuffled blocks. One call runs
// every work item on 1 thread (one block), as one chiplet worker would.
//
// The paths alternate call by call (portable, AVX2, AVX-512 as the CPU
// has them), so load on the machine falls on each alike. Per path: the
// best thread-CPU microseconds of a call (robust to other load) and the
// median wall microseconds; then each vector path's speed-up over the
// portable one (best CPU).
//
//   bazel run -c opt //rbln/compiler/bench:paged_attention_bench -- [--reps 15]
//       [--only avx2]  (one path, e.g. under perf)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "rbln/compiler/bench/library_bench_timing.h"
#include "rbln/compiler/kernels/paged_attention.h"

namespace {

using rbln::compiler::AttentionIsa;
using rbln::compiler::GemmOperandType;
using rbln::compiler::PagedAttentionProblem;
using rbln::compiler::bench::ThreadCpuSeconds;
using rbln::compiler::bench::WallSeconds;

constexpr int64_t kHeads = 32, kKvHeads = 8, kHeadSize = 64, kBlockSize = 16;

const char* IsaName(AttentionIsa isa) {
  switch (isa) {
    case AttentionIsa::kPortable:
      return "portable";
    case AttentionIsa::kAvx2:
      return "avx2";
    case AttentionIsa::kAvx512:
      return "avx512";
  }
  return "?";
}

const char* only = nullptr;

void Run(bool bf16, int64_t batch, int64_t q_len, int64_t context, int reps) {
  PagedAttentionProblem p;
  p.query_type = p.cache_type = bf16 ? GemmOperandType::kBF16 : GemmOperandType::kF32;
  p.block_table_i64 = false;
  p.positions_i64 = true;
  p.batch = batch;
  p.q_len = q_len;
  p.num_heads = kHeads;
  p.num_kv_heads = kKvHeads;
  p.head_size = kHeadSize;
  p.block_size = kBlockSize;
  p.table_width = context / kBlockSize;
  const int64_t num_blocks = batch * p.table_width + 1;  // block 0: the null block
  p.cache_slots = num_blocks * kBlockSize;
  p.scale = 1.0f / std::sqrt(static_cast<float>(kHeadSize));
  p.query_stride_token = p.out_stride_token = kHeads * kHeadSize;
  p.query_stride_head = p.out_stride_head = kHeadSize;

  const int64_t bytes = bf16 ? 2 : 4;
  std::mt19937 rng(1);
  std::uniform_int_distribution<uint16_t> bits(0x3c00, 0x3f80);  // bf16 in [2^-7, 1)
  auto fill = [&](std::vector<char>& v, int64_t n) {
    v.resize(n * bytes);
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t b = bits(rng) | (rng() & 1 ? 0x8000 : 0);
      if (bf16) {
        std::memcpy(&v[2 * i], &b, 2);
      } else {
        const uint32_t u = static_cast<uint32_t>(b) << 16;
        std::memcpy(&v[4 * i], &u, 4);
      }
    }
  };
  std::vector<char> query, cache, out(batch * q_len * kHeads * kHeadSize * bytes);
  fill(query, batch * q_len * kHeads * kHeadSize);
  fill(cache, 2 * kKvHeads * p.cache_slots * kHeadSize);
  std::vector<int32_t> table(batch * p.table_width);
  std::iota(table.begin(), table.end(), 1);
  std::shuffle(table.begin(), table.end(), rng);
  std::vector<int64_t> positions;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t qi = 0; qi < q_len; ++qi) positions.push_back(context - q_len + qi);
  }

  std::vector<AttentionIsa> isas;
  for (AttentionIsa isa : {AttentionIsa::kPortable, AttentionIsa::kAvx2, AttentionIsa::kAvx512}) {
    if (isa <= rbln::compiler::BestAttentionIsa() &&
        (only == nullptr || std::strcmp(only, IsaName(isa)) == 0)) {
      isas.push_back(isa);
    }
  }
  auto call = [&](AttentionIsa isa) {
    rbln::compiler::RunPagedAttentionBlock(p, query.data(), cache.data(), table.data(),
                                           positions.data(), /*sinks=*/nullptr, out.data(),
                                           0, 1, isa);
  };
  std::vector<std::vector<double>> cpu(isas.size()), wall(isas.size());
  for (AttentionIsa isa : isas) call(isa);  // warm-up
  for (int r = 0; r < reps; ++r) {
    for (size_t k = 0; k < isas.size(); ++k) {
      const double c = ThreadCpuSeconds(), w = WallSeconds();
      call(isas[k]);
      cpu[k].push_back(ThreadCpuSeconds() - c);
      wall[k].push_back(WallSeconds() - w);
    }
  }
  double portable = 0;
  for (size_t k = 0; k < isas.size(); ++k) {
    std::sort(cpu[k].begin(), cpu[k].end());
    std::sort(wall[k].begin(), wall[k].end());
    const double best = cpu[k].front() * 1e6, median = wall[k][wall[k].size() / 2] * 1e6;
    if (isas[k] == AttentionIsa::kPortable) portable = best;
    std::printf("%-5s %5lld %5lld %7lld  %-9s %10.1f %10.1f", bf16 ? "bf16" : "f32",
                static_cast<long long>(batch), static_cast<long long>(q_len),
                static_cast<long long>(context), IsaName(isas[k]), best, median);
    if (portable > 0) std::printf(" %8.2fx", portable / best);
    std::printf("\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 15;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string arg = argv[i];
    if (arg == "--reps") {
      reps = std::atoi(argv[i + 1]);
    } else if (arg == "--only") {
      only = argv[i + 1];
    } else {
      std::fprintf(stderr, "unknown argument %s\n", arg.c_str());
      return 2;
    }
  }
  std::printf("best path on this CPU: %s\n", IsaName(rbln::compiler::BestAttentionIsa()));
  std::printf("%-5s %5s %5s %7s  %-9s %10s %10s %9s\n", "cache", "batch", "q_len", "context",
              "path", "cpu us", "wall us", "speed-up");
  for (bool bf16 : {true, false}) {
    for (int64_t batch : {1, 16}) {
      for (int64_t context : {128, 512, 2048}) Run(bf16, batch, 1, context, reps);
    }
  }
  Run(true, 1, 16, 512, reps);
  Run(true, 4, 16, 2048, reps);
  return 0;
}
