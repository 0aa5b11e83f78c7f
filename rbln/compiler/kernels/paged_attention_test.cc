// spec: P5, A2
// rbln_paged_attention against a double-precision reference of attention
// over each request's real context: random caches, block tables of
// shuffled block ids (some unused slots, the table wider than the
// context), ragged lengths, decode (one query a request) and prefill
// (several, causal), GQA groups, a sliding window, f32 and bf16 operands
// (f16 output rounding too), strided queries, a sharp softmax, soft-capped
// scores, attention sinks (one that dominates, one of -inf), the
// portable, AVX2+FMA and AVX-512 paths (each one the CPU has; the others
// skipped), and the items cut into one block or several (same result).
#include "rbln/compiler/kernels/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "rbln/compiler/kernels/test_operands.h"

namespace rbln::compiler {
namespace {

struct Case {
  std::string name;
  bool bf16 = false;
  bool i64_table = false;
  int64_t batch = 3, q_len = 1, num_heads = 4, num_kv_heads = 2, head_size = 64;
  int64_t block_size = 16, table_width = 4, num_blocks = 16;
  int64_t sliding_window = 0;
  int64_t query_stride_token = 0;  // 0: contiguous
  double sharpness = 1.0;  // the scale: sharpness / sqrt(head_size)
  double soft_cap = 0.0;   // 0: none
  bool sinks = false;      // gpt-oss's per-head sink logits (kSinks)
};

// Sink logits by head: ordinary ones, one that outweighs every key (the
// output nearly zero), one of -inf (no sink) and zero.
constexpr double kSinks[] = {1.5, -0.5, 25.0, -INFINITY, 0.0, 3.0, -2.0, 0.7};

struct Data {
  std::vector<float> q, cache;  // values (bf16-exact when bf16)
  std::vector<char> q_raw, cache_raw;
  std::vector<int64_t> table, positions;
  std::vector<int32_t> table32;
  std::vector<float> sinks;  // empty: none
};

Data Make(const Case& c, std::mt19937& rng) {
  Data d;
  const int64_t stride = c.query_stride_token ? c.query_stride_token : c.num_heads * c.head_size;
  testing::FillOperand(c.batch * c.q_len * stride, c.bf16, rng, d.q, d.q_raw);
  testing::FillOperand(2 * c.num_kv_heads * c.num_blocks * c.block_size * c.head_size, c.bf16,
                       rng, d.cache, d.cache_raw);
  // Each request's blocks: distinct shuffled ids, block 0 (the null block)
  // never owned.
  std::vector<int64_t> ids(c.num_blocks - 1);
  std::iota(ids.begin(), ids.end(), 1);
  std::shuffle(ids.begin(), ids.end(), rng);
  const int64_t context = c.table_width * c.block_size;
  for (int64_t b = 0; b < c.batch; ++b) {
    // Ragged: request b ends somewhere in its table (the last token of a
    // prefill chunk at `end`, earlier tokens before it).
    const int64_t end = std::uniform_int_distribution<int64_t>(c.q_len - 1, context - 1)(rng);
    for (int64_t j = 0; j < c.table_width; ++j) {
      // Blocks past the request's end hold ids too (stale, never read by
      // the reference); a request may share a block with another.
      d.table.push_back(ids[(b * c.table_width + j) % ids.size()]);
    }
    for (int64_t qi = 0; qi < c.q_len; ++qi) d.positions.push_back(end - (c.q_len - 1 - qi));
  }
  d.table32.assign(d.table.begin(), d.table.end());
  if (c.sinks) {
    for (int64_t h = 0; h < c.num_heads; ++h) d.sinks.push_back(kSinks[h % 8]);
  }
  return d;
}

// out[token, head, :] in double: softmax over the visible keys of its
// request, read through the table.
std::vector<double> Reference(const Case& c, const Data& d) {
  const int64_t group = c.num_heads / c.num_kv_heads, dim = c.head_size;
  const int64_t slots = c.num_blocks * c.block_size;
  const int64_t stride = c.query_stride_token ? c.query_stride_token : c.num_heads * dim;
  const double scale = c.sharpness / std::sqrt(static_cast<double>(dim));
  std::vector<double> out(c.batch * c.q_len * c.num_heads * dim, 0.0);
  for (int64_t t = 0; t < c.batch * c.q_len; ++t) {
    const int64_t b = t / c.q_len, p = d.positions[t];
    const int64_t first = c.sliding_window ? std::max<int64_t>(0, p + 1 - c.sliding_window) : 0;
    for (int64_t h = 0; h < c.num_heads; ++h) {
      const int64_t kv = h / group;
      std::vector<double> scores;
      std::vector<int64_t> key_slots;
      for (int64_t j = first; j <= p; ++j) {
        const int64_t slot = d.table[b * c.table_width + j / c.block_size] * c.block_size +
                             j % c.block_size;
        double s = 0;
        for (int64_t e = 0; e < dim; ++e) {
          s += double(d.q[t * stride + h * dim + e]) * d.cache[(kv * slots + slot) * dim + e];
        }
        s *= scale;
        if (c.soft_cap > 0) s = c.soft_cap * std::tanh(s / c.soft_cap);
        scores.push_back(s);
        key_slots.push_back(slot);
      }
      const double sink = d.sinks.empty() ? -INFINITY : double(d.sinks[h]);
      const double mx = std::max(sink, *std::max_element(scores.begin(), scores.end()));
      double sum = std::exp(sink - mx);  // a key of value zero
      for (double& s : scores) sum += (s = std::exp(s - mx));
      for (size_t j = 0; j < scores.size(); ++j) {
        const int64_t v = ((c.num_kv_heads + kv) * slots + key_slots[j]) * dim;
        for (int64_t e = 0; e < dim; ++e) {
          out[(t * c.num_heads + h) * dim + e] += scores[j] / sum * d.cache[v + e];
        }
      }
    }
  }
  return out;
}

float Bf16Value(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

PagedAttentionProblem ProblemOf(const Case& c) {
  PagedAttentionProblem p;
  p.query_type = p.cache_type = c.bf16 ? GemmOperandType::kBF16 : GemmOperandType::kF32;
  p.block_table_i64 = c.i64_table;
  p.positions_i64 = true;
  p.batch = c.batch;
  p.q_len = c.q_len;
  p.num_heads = c.num_heads;
  p.num_kv_heads = c.num_kv_heads;
  p.head_size = c.head_size;
  p.cache_slots = c.num_blocks * c.block_size;
  p.table_width = c.table_width;
  p.block_size = c.block_size;
  p.sliding_window = c.sliding_window;
  p.scale = static_cast<float>(c.sharpness / std::sqrt(static_cast<double>(c.head_size)));
  p.soft_cap = static_cast<float>(c.soft_cap);
  p.query_stride_token = c.query_stride_token ? c.query_stride_token : c.num_heads * c.head_size;
  p.query_stride_head = c.head_size;
  p.out_stride_token = c.num_heads * c.head_size;
  p.out_stride_head = c.head_size;
  return p;
}

std::vector<float> RunKernel(const Case& c, const Data& d, int64_t blocks, AttentionIsa isa) {
  const PagedAttentionProblem p = ProblemOf(c);
  const int64_t n = c.batch * c.q_len * c.num_heads * c.head_size;
  std::vector<char> out(n * (c.bf16 ? 2 : 4), 0x7f);
  const void* table = c.i64_table ? static_cast<const void*>(d.table.data())
                                  : static_cast<const void*>(d.table32.data());
  for (int64_t block = 0; block < blocks; ++block) {
    RunPagedAttentionBlock(p, d.q_raw.data(), d.cache_raw.data(), table, d.positions.data(),
                           d.sinks.empty() ? nullptr : d.sinks.data(), out.data(), block,
                           blocks, isa);
  }
  std::vector<float> values(n);
  for (int64_t i = 0; i < n; ++i) {
    if (c.bf16) {
      uint16_t bits;
      std::memcpy(&bits, out.data() + 2 * i, 2);
      values[i] = Bf16Value(bits);
    } else {
      std::memcpy(&values[i], out.data() + 4 * i, 4);
    }
  }
  return values;
}

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

// Each ISA's tests run on every CPU; where the CPU lacks the ISA they are
// skipped, saying so.
#define SKIP_IF_UNSUPPORTED(isa)                                               \
  if ((isa) > BestAttentionIsa()) {                                            \
    GTEST_SKIP() << "this CPU has no " << IsaName(isa) << " (best path: "     \
                 << IsaName(BestAttentionIsa()) << ")";                        \
  }

std::vector<Case> Cases() {
  std::vector<Case> cases;
  Case decode;
  decode.name = "decode_f32";
  cases.push_back(decode);
  Case decode_bf16 = decode;
  decode_bf16.name = "decode_bf16_batch16";
  decode_bf16.bf16 = true;
  decode_bf16.batch = 16;
  decode_bf16.num_heads = 8;
  decode_bf16.num_kv_heads = 4;
  decode_bf16.num_blocks = 80;
  decode_bf16.table_width = 8;
  cases.push_back(decode_bf16);
  Case prefill = decode;
  prefill.name = "prefill_f32_i64_table";
  prefill.q_len = 7;
  prefill.i64_table = true;
  cases.push_back(prefill);
  Case prefill_bf16 = prefill;
  prefill_bf16.name = "prefill_bf16_mha_dim40_block32";
  prefill_bf16.bf16 = true;
  prefill_bf16.num_kv_heads = 4;  // no grouping
  prefill_bf16.head_size = 40;    // not a whole number of vectors
  prefill_bf16.block_size = 32;   // more keys a block than a vector holds
  cases.push_back(prefill_bf16);
  Case window = prefill;
  window.name = "sliding_window_gqa4";
  window.sliding_window = 10;
  window.num_heads = 8;
  cases.push_back(window);
  Case strided = decode;
  strided.name = "strided_query_block8";
  strided.query_stride_token = 3 * 4 * 64;  // q of a fused qkv projection
  strided.block_size = 8;
  strided.table_width = 5;
  cases.push_back(strided);
  // Head size 44: 8-wide vectors with a 4-float tail (the AVX2 path's
  // accumulation: a 32-float run, an 8 and a masked 4); 12 keys a block:
  // its scores 8 keys at a time plus 4 one by one.
  Case odd = prefill;
  odd.name = "prefill_f32_dim44_block12";
  odd.head_size = 44;
  odd.block_size = 12;
  odd.table_width = 6;
  cases.push_back(odd);
  // Scores spread over ~[-60, 0] after the max (not ~[-2, 0]): the
  // vector paths' polynomial exp over its whole range, below exp(-87) too.
  Case sharp = prefill;
  sharp.name = "sharp_softmax_f32";
  sharp.sharpness = 32.0;
  cases.push_back(sharp);
  // Gemma 2's soft cap: the sharp scores squashed into (-5, 5) (a cap of
  // 50 in the model); a window and bf16 too.
  Case capped = sharp;
  capped.name = "soft_cap_bf16_window";
  capped.soft_cap = 5.0;
  capped.bf16 = true;
  capped.sliding_window = 12;
  cases.push_back(capped);
  // gpt-oss's attention sinks: a window and GQA (its local layers), bf16;
  // and f32 prefill with 8 heads (every kSinks value).
  Case sinks = window;
  sinks.name = "sinks_bf16_window_gqa4";
  sinks.bf16 = true;
  sinks.sinks = true;
  cases.push_back(sinks);
  Case sinks_f32 = prefill;
  sinks_f32.name = "sinks_f32_prefill";
  sinks_f32.num_heads = 8;
  sinks_f32.sinks = true;
  cases.push_back(sinks_f32);
  return cases;
}

// spec: P5, A2 -- the portable, AVX2+FMA and AVX-512 paths each against
// the double reference (within the same tolerances), a path this CPU lacks
// skipped with a message.
class PagedAttentionTest
    : public ::testing::TestWithParam<std::tuple<Case, AttentionIsa>> {};

TEST_P(PagedAttentionTest, MatchesReference) {
  const Case& c = std::get<0>(GetParam());
  const AttentionIsa isa = std::get<1>(GetParam());
  SKIP_IF_UNSUPPORTED(isa);
  std::mt19937 rng(1234);
  const Data d = Make(c, rng);
  const std::vector<double> want = Reference(c, d);
  // f32: the order of the sums only; bf16: one rounding of the output
  // (values below 1 in magnitude: 2^-8 relative).
  const double tol = c.bf16 ? 8e-3 : 2e-5;
  const std::vector<float> one = RunKernel(c, d, 1, isa);
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(one[i], want[i], tol) << "element " << i << " isa " << IsaName(isa);
  }
  // Items cut into blocks: the same values, bit for bit (SPEC A2).
  for (int64_t blocks : {2, 5}) {
    const std::vector<float> split = RunKernel(c, d, blocks, isa);
    ASSERT_EQ(0, std::memcmp(one.data(), split.data(), one.size() * 4)) << blocks;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, PagedAttentionTest,
    ::testing::Combine(::testing::ValuesIn(Cases()),
                       ::testing::Values(AttentionIsa::kPortable, AttentionIsa::kAvx2,
                                         AttentionIsa::kAvx512)),
    [](const auto& info) {
      return std::get<0>(info.param).name + "_" + IsaName(std::get<1>(info.param));
    });

// Positions past the table clamp to its width; a request with no key
// (a negative position) gives zeros; block ids outside the cache are
// skipped, not read.
class PagedAttentionEdgeTest : public ::testing::TestWithParam<AttentionIsa> {};

TEST_P(PagedAttentionEdgeTest, ClampsAndSkips) {
  SKIP_IF_UNSUPPORTED(GetParam());
  Case c;
  c.batch = 3;
  std::mt19937 rng(7);
  Data d = Make(c, rng);
  d.positions = {-1, 1000, 5};
  d.table[2 * c.table_width + 0] = c.num_blocks;  // request 2's first block: invalid
  c.i64_table = true;
  const PagedAttentionProblem p = ProblemOf(c);
  std::vector<float> out(c.batch * c.num_heads * c.head_size, 7.0f);
  RunPagedAttentionBlock(p, d.q_raw.data(), d.cache_raw.data(), d.table.data(),
                         d.positions.data(), nullptr, out.data(), 0, 1, GetParam());
  const int64_t row = c.num_heads * c.head_size;
  for (int64_t i = 0; i < row; ++i) ASSERT_EQ(out[i], 0.0f) << i;  // no key
  // With sinks too: a sink is a key of value zero.
  std::vector<float> sunk(out.size(), 7.0f);
  const std::vector<float> sinks(kSinks, kSinks + c.num_heads);
  RunPagedAttentionBlock(p, d.q_raw.data(), d.cache_raw.data(), d.table.data(),
                         d.positions.data(), sinks.data(), sunk.data(), 0, 1, GetParam());
  for (int64_t i = 0; i < row; ++i) ASSERT_EQ(sunk[i], 0.0f) << i;
  // Request 1 sees its whole table: the reference at position width - 1.
  Data clamped = d;
  clamped.positions = {0, c.table_width * c.block_size - 1, 0};
  const std::vector<double> want = Reference(c, clamped);
  for (int64_t i = row; i < 2 * row; ++i) ASSERT_NEAR(out[i], want[i], 2e-5) << i;
  // Request 2's keys are all in its invalid first block: none read.
  for (int64_t i = 2 * row; i < 3 * row; ++i) ASSERT_EQ(out[i], 0.0f) << i;
}

// The f16 output rounds to nearest even as c10::Half does.
TEST_P(PagedAttentionEdgeTest, HalfOutputRounding) {
  SKIP_IF_UNSUPPORTED(GetParam());
  // One key, so the output is its value exactly, stored as f16 (an f16
  // cache and query: every value is exact).
  PagedAttentionProblem p;
  p.query_type = p.cache_type = GemmOperandType::kF16;
  p.batch = p.q_len = p.num_heads = p.num_kv_heads = 1;
  p.head_size = 4;
  p.cache_slots = p.block_size = 2;
  p.table_width = 1;
  p.query_stride_token = p.out_stride_token = 4;
  p.query_stride_head = p.out_stride_head = 4;
  const std::vector<uint16_t> q = {0x3c00, 0, 0, 0};
  // keys of slots 0, 1, then values: 1.0, -2.0, 65504, 2^-24 (subnormal).
  std::vector<uint16_t> cache(2 * 2 * 4, 0);
  const std::vector<uint16_t> value = {0x3c00, 0xc000, 0x7bff, 0x0001};
  std::copy(value.begin(), value.end(), cache.begin() + 2 * 4);
  const int64_t table = 0, position = 0;
  std::vector<uint16_t> out(4, 0xffff);
  RunPagedAttentionBlock(p, q.data(), cache.data(), &table, &position, nullptr, out.data(), 0,
                         1, GetParam());
  EXPECT_EQ(out, value);
}

INSTANTIATE_TEST_SUITE_P(Isas, PagedAttentionEdgeTest,
                         ::testing::Values(AttentionIsa::kPortable, AttentionIsa::kAvx2,
                                           AttentionIsa::kAvx512),
                         [](const auto& info) { return std::string(IsaName(info.param)); });

}  // namespace
}  // namespace rbln::compiler
