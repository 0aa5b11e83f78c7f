// spec: P3, P5
// paged_attention (vLLM serving's attention over its KV cache, issue 31)
// compiled with the full pipeline against a double-precision reference of
// attention over each request's real context: block tables of shuffled
// block ids wider than the context, ragged lengths, decode and prefill
// (causal), GQA, a sliding window, a soft cap, attention sinks (f32 and
// bf16 logits), f32, bf16 and f16, int32 and int64 indices; bad shapes
// raise with the op's name.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rbln/compiler/testing/op_test_util.h"

namespace rbln::compiler {
namespace {

using ::testing::HasSubstr;
using namespace testing;  // NOLINT: the op test helpers.

// The block table and positions of `s`: each request's blocks distinct
// shuffled ids (block 0, the null block, unused), its last query at a
// random position of its table.
std::pair<HostTensor, HostTensor> Indices(const PagedAttentionShape& s, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<double> ids(s.num_blocks - 1);
  std::iota(ids.begin(), ids.end(), 1);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<double> table, positions;
  const int64_t context = s.table_width * s.block_size;
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t j = 0; j < s.table_width; ++j) {
      table.push_back(ids[(b * s.table_width + j) % ids.size()]);
    }
    const int64_t end = std::uniform_int_distribution<int64_t>(s.q_len - 1, context - 1)(rng);
    for (int64_t q = 0; q < s.q_len; ++q) positions.push_back(end - (s.q_len - 1 - q));
  }
  return {Tensor(s.index_dtype, {s.batch, s.table_width}, table),
          Tensor(s.index_dtype, {s.batch * s.q_len}, positions)};
}

std::vector<double> Reference(const PagedAttentionShape& s, const HostTensor& q,
                              const HostTensor& cache, const HostTensor& table,
                              const HostTensor& positions, const HostTensor* sinks) {
  const int64_t group = s.heads / s.kv_heads, slots = s.num_blocks * s.block_size;
  std::vector<double> out(q.values.size(), 0.0);
  for (int64_t t = 0; t < s.batch * s.q_len; ++t) {
    const int64_t b = t / s.q_len, p = positions.values[t];
    const int64_t first = s.sliding_window ? std::max<int64_t>(0, p + 1 - s.sliding_window) : 0;
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t kv = h / group;
      std::vector<double> w;
      std::vector<int64_t> key_slots;
      for (int64_t j = first; j <= p; ++j) {
        const int64_t slot =
            static_cast<int64_t>(table.values[b * s.table_width + j / s.block_size]) *
                s.block_size + j % s.block_size;
        double dot = 0;
        for (int64_t e = 0; e < s.dim; ++e) {
          dot += q.values[(t * s.heads + h) * s.dim + e] *
                 cache.values[(kv * slots + slot) * s.dim + e];
        }
        double score = dot / std::sqrt(static_cast<double>(s.dim));
        if (s.soft_cap > 0) score = s.soft_cap * std::tanh(score / s.soft_cap);
        w.push_back(score);
        key_slots.push_back(slot);
      }
      // A sink: a key of value zero in the softmax's denominator.
      const double sink = sinks ? sinks->values[h] : -INFINITY;
      const double mx = std::max(sink, *std::max_element(w.begin(), w.end()));
      double sum = std::exp(sink - mx);
      for (double& x : w) sum += (x = std::exp(x - mx));
      for (size_t j = 0; j < w.size(); ++j) {
        for (int64_t e = 0; e < s.dim; ++e) {
          out[(t * s.heads + h) * s.dim + e] +=
              w[j] / sum * cache.values[((s.kv_heads + kv) * slots + key_slots[j]) * s.dim + e];
        }
      }
    }
  }
  for (double& v : out) v = RoundTo(s.dtype, v);
  return out;
}

TEST(PagedAttentionOpsTest, MatchesTheReference) {
  std::vector<PagedAttentionShape> shapes;
  PagedAttentionShape decode;  // 3 requests, one query each, GQA 2
  shapes.push_back(decode);
  PagedAttentionShape prefill = decode;
  prefill.q_len = 5;
  prefill.heads = 8;
  prefill.index_dtype = ir::INT32;
  shapes.push_back(prefill);
  PagedAttentionShape window = prefill;
  window.sliding_window = 9;
  window.block_size = 8;
  window.table_width = 6;
  window.dim = 40;
  shapes.push_back(window);
  PagedAttentionShape capped = window;  // scores ~[-2, 2] squashed into (-1, 1)
  capped.soft_cap = 1.0;
  shapes.push_back(capped);
  PagedAttentionShape sinks = window;  // gpt-oss: sinks on its windowed layers
  sinks.sinks = sinks.heads;
  shapes.push_back(sinks);
  PagedAttentionShape bf16_sinks = prefill;
  bf16_sinks.sinks = bf16_sinks.heads;
  bf16_sinks.sinks_dtype = ir::BFLOAT16;
  shapes.push_back(bf16_sinks);
  uint32_t seed = 1;
  for (const PagedAttentionShape& base : shapes) {
    for (ir::DType t : {ir::FLOAT32, ir::BFLOAT16, ir::FLOAT16}) {
      PagedAttentionShape s = base;
      s.dtype = t;
      const HostTensor q = Random(t, {s.batch * s.q_len, s.heads, s.dim}, seed++, -1, 1);
      const HostTensor cache =
          Random(t, {2, s.kv_heads, s.num_blocks * s.block_size, s.dim}, seed++, -1, 1);
      const auto [table, positions] = Indices(s, seed++);
      // Sinks around the scores' range (~[-2, 2]): each changes its head.
      const HostTensor sinks = Random(s.sinks_dtype, {s.heads}, seed++, -2, 3);
      std::vector<HostTensor> inputs = {q, cache, table, positions};
      if (s.sinks > 0) inputs.push_back(sinks);
      const HostTensor got = RunOne(PagedAttentionGraph(s), inputs);
      const std::vector<double> want =
          Reference(s, q, cache, table, positions, s.sinks > 0 ? &sinks : nullptr);
      // Outputs are averages of values in [-1, 1]: f32 sums, one rounding.
      std::vector<double> tol(want.size(), 2 * UnitRoundoff(t) + 1e-5);
      ExpectClose(got, want, tol,
                  absl::StrCat(DTypeText(t), " q_len ", s.q_len, " window ", s.sliding_window,
                               " soft cap ", s.soft_cap, " sinks ", s.sinks));
    }
  }
}

TEST(PagedAttentionOpsTest, BadShapesRaise) {
  PagedAttentionShape s;
  ir::Graph g = PagedAttentionGraph(s);
  (*g.mutable_nodes(0)->mutable_attrs())["block_size"].set_i(5);  // does not divide 192
  absl::StatusOr<std::vector<HostTensor>> out = CompileAndRun(g, {});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("paged_attention"));
  EXPECT_THAT(out.status().message(), HasSubstr("block_size 5"));
  s.heads = 3;  // not groups of 2 kv heads
  out = CompileAndRun(PagedAttentionGraph(s), {});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("3 query heads"));
  s = PagedAttentionShape();
  s.soft_cap = -1.0;
  out = CompileAndRun(PagedAttentionGraph(s), {});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("soft_cap must be positive, got -1"));
  s = PagedAttentionShape();
  s.sinks = s.heads + 1;  // not one per query head
  out = CompileAndRun(PagedAttentionGraph(s), {});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("sinks must be [4] (one per query head)"));
}

}  // namespace
}  // namespace rbln::compiler
