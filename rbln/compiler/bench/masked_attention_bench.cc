// rbln_masked_attention on this CPU (docs/benchmarks.md, "Masked attention
// kernel"): Llama-3.2-1B's attention (32 query heads, 8 kv heads, head size
// 64) over a bf16 static KV cache of 1024 slots with the bf16 mask
// transformers builds (0 where a key is visible, -inf past the filled
// positions): decode (one query a sequence) per batch and filled length,
// and a 128-token prefill. One call runs every work item on 1 thread (one
// block), as one chiplet worker would, with the CPU's best path.
//
// Per shape: the best thread-CPU microseconds of a call (robust to other
// load), the median wall microseconds, and the visible (query, key) pairs
// per best CPU microsecond.
//
//   bazel run -c opt //rbln/compiler/bench:masked_attention_bench -- [--reps 15]
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "rbln/compiler/bench/library_bench_timing.h"
#include "rbln/compiler/kernels/masked_attention.h"

namespace {

using rbln::compiler::AttentionMaskType;
using rbln::compiler::GemmOperandType;
using rbln::compiler::MaskedAttentionProblem;

constexpr int64_t kHeads = 32, kKvHeads = 8, kHeadSize = 64, kSlots = 1024;
constexpr uint16_t kBf16Zero = 0x0000, kBf16NegInf = 0xff80;

// `filled` positions of the cache hold keys; the query rows are the last
// q_len of them (causal among themselves).
void Run(int64_t batch, int64_t q_len, int64_t filled, int reps) {
  MaskedAttentionProblem p;
  p.query_type = p.kv_type = p.out_type = GemmOperandType::kBF16;
  p.mask_type = AttentionMaskType::kBF16;
  p.batch = batch;
  p.heads = kHeads;
  p.kv_heads = kKvHeads;
  p.q_len = q_len;
  p.kv_len = kSlots;
  p.head_dim = p.value_dim = kHeadSize;
  p.scale = 1.0f / std::sqrt(static_cast<float>(kHeadSize));
  const int64_t q_strides[3] = {kHeads * q_len * kHeadSize, q_len * kHeadSize, kHeadSize};
  const int64_t kv_strides[3] = {kKvHeads * kSlots * kHeadSize, kSlots * kHeadSize, kHeadSize};
  const int64_t mask_strides[4] = {q_len * kSlots, 0, kSlots, 1};  // [B, 1, L, S]
  std::copy(q_strides, q_strides + 3, p.query_strides);
  std::copy(q_strides, q_strides + 3, p.out_strides);
  std::copy(kv_strides, kv_strides + 3, p.key_strides);
  std::copy(kv_strides, kv_strides + 3, p.value_strides);
  std::copy(mask_strides, mask_strides + 4, p.mask_strides);

  std::mt19937 rng(1);
  std::uniform_int_distribution<uint16_t> bits(0x3c00, 0x3f80);  // bf16 in [2^-7, 1)
  auto fill = [&](std::vector<uint16_t>& v, int64_t n) {
    v.resize(n);
    for (uint16_t& x : v) x = bits(rng) | (rng() & 1 ? 0x8000 : 0);
  };
  std::vector<uint16_t> query, keys, values, out(batch * kHeads * q_len * kHeadSize);
  fill(query, batch * kHeads * q_len * kHeadSize);
  fill(keys, batch * kKvHeads * kSlots * kHeadSize);
  fill(values, batch * kKvHeads * kSlots * kHeadSize);
  std::vector<uint16_t> mask(batch * q_len * kSlots, kBf16NegInf);
  int64_t pairs = 0;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < q_len; ++i) {
      const int64_t visible = filled - q_len + i + 1;
      std::fill_n(&mask[(b * q_len + i) * kSlots], visible, kBf16Zero);
      pairs += kHeads * visible;
    }
  }
  auto call = [&] {
    rbln::compiler::RunMaskedAttentionBlock(p, query.data(), keys.data(), values.data(),
                                            mask.data(), out.data(), /*logsumexp=*/nullptr,
                                            0, 1);
  };
  const auto [best_s, median_s] = rbln::compiler::bench::Time(call, reps);
  const double best = best_s * 1e6, median = median_s * 1e6;
  std::printf("%5lld %5lld %7lld %10.1f %10.1f %10.1f\n", static_cast<long long>(batch),
              static_cast<long long>(q_len), static_cast<long long>(filled), best, median,
              pairs / best);
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 15;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--reps") reps = std::max(1, std::atoi(argv[i + 1]));
  }
  std::printf("bf16, %lld/%lld heads x %lld, %lld-slot cache, one thread\n",
              static_cast<long long>(kHeads), static_cast<long long>(kKvHeads),
              static_cast<long long>(kHeadSize), static_cast<long long>(kSlots));
  std::printf("%5s %5s %7s %10s %10s %10s\n", "batch", "q_len", "filled", "best_cpu_us",
              "median_us", "pairs/us");
  for (int64_t batch : {1, 8}) {
    for (int64_t filled : {160, 512, 1024}) Run(batch, 1, filled, reps);
  }
  Run(1, 128, 128, reps);
  return 0;
}
