// spec: P5, A2
// rbln_masked_attention against a double-precision reference of masked
// softmax attention: a static KV cache's mask (keys past each query's
// position hidden by -inf, as transformers' StaticCache gives), a padding
// row that sees no key, finite biases and holes inside the visible range,
// bool, f32 and bf16 masks, one mask for all heads (stride 0) or one per
// head, causal with and without a mask, GQA groups, f32 and bf16 operands
// with f32, bf16 and f16 outputs, a strided query, logsumexp, every ISA
// path the CPU has, and the items cut into one block or several (same
// bits).
#include "rbln/compiler/kernels/masked_attention.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "rbln/compiler/kernels/half_convert.h"
#include "rbln/compiler/kernels/test_operands.h"

namespace rbln::compiler {
namespace {

enum class MaskKind { kNone, kStaticCache, kBiases };

struct Case {
  std::string name;
  bool bf16 = false;  // query, keys and values
  GemmOperandType out_type = GemmOperandType::kF32;
  AttentionMaskType mask_type = AttentionMaskType::kF32;
  MaskKind mask = MaskKind::kStaticCache;
  bool per_head_mask = false;
  bool causal = false;
  int64_t batch = 2, heads = 4, kv_heads = 2, q_len = 5, kv_len = 70, dim = 64, value_dim = 64;
  int64_t query_row_stride = 0;  // 0: contiguous
  int64_t first_position = 20;   // query 0's position in the cache
};

struct Data {
  std::vector<float> q, k, v;
  std::vector<char> q_raw, k_raw, v_raw;
  std::vector<double> mask;  // [B, Hm, L, S] biases, -inf hidden
  std::vector<char> mask_raw;
  int64_t mask_heads = 1;
};

Data Make(const Case& c, std::mt19937& rng) {
  Data d;
  const int64_t qrow = c.query_row_stride ? c.query_row_stride : c.dim;
  testing::FillOperand(c.batch * c.heads * c.q_len * qrow, c.bf16, rng, d.q, d.q_raw);
  testing::FillOperand(c.batch * c.kv_heads * c.kv_len * c.dim, c.bf16, rng, d.k, d.k_raw);
  testing::FillOperand(c.batch * c.kv_heads * c.kv_len * c.value_dim, c.bf16, rng, d.v,
                       d.v_raw);
  d.mask_heads = c.per_head_mask ? c.heads : 1;
  const int64_t n = c.batch * d.mask_heads * c.q_len * c.kv_len;
  std::uniform_real_distribution<double> bias(-2.0, 2.0);
  for (int64_t x = 0; x < n; ++x) {
    const int64_t j = x % c.kv_len, i = x / c.kv_len % c.q_len;
    const int64_t h = x / (c.kv_len * c.q_len) % d.mask_heads, b = x / (c.kv_len * c.q_len * d.mask_heads);
    // Batch 1's queries start later in the cache; head 1 sees fewer keys.
    const int64_t position = c.first_position + 9 * b + i - (h == 1 ? 3 : 0);
    double m = j <= position ? 0.0 : -INFINITY;
    if (c.mask == MaskKind::kBiases && m == 0.0) {
      // Finite biases (exact in bf16) and holes inside the range.
      m = j % 7 == 3 ? -INFINITY : std::round(bias(rng) * 8) / 8;
    }
    if (b == 1 && i == 2) m = -INFINITY;  // a padding row: sees nothing
    d.mask.push_back(m);
  }
  for (double m : d.mask) {
    const float f = static_cast<float>(m);
    if (c.mask_type == AttentionMaskType::kBool) {
      d.mask_raw.push_back(m == 0.0 ? 1 : 0);
    } else if (c.mask_type == AttentionMaskType::kF32) {
      d.mask_raw.insert(d.mask_raw.end(), reinterpret_cast<const char*>(&f),
                        reinterpret_cast<const char*>(&f) + 4);
    } else {  // kBF16: the values above are exact
      uint32_t u;
      std::memcpy(&u, &f, 4);
      const uint16_t h = static_cast<uint16_t>(u >> 16);
      d.mask_raw.insert(d.mask_raw.end(), reinterpret_cast<const char*>(&h),
                        reinterpret_cast<const char*>(&h) + 2);
    }
  }
  return d;
}

bool HasMask(const Case& c) { return c.mask != MaskKind::kNone; }

// out [B, H, L, Ev], logsumexp [B, H, L] and out_abs (sum_j p_j |v_j|, the
// scale of the weights' rounding error) in double.
void Reference(const Case& c, const Data& d, std::vector<double>& out, std::vector<double>& lse,
               std::vector<double>& out_abs) {
  const int64_t group = c.heads / c.kv_heads;
  const int64_t qrow = c.query_row_stride ? c.query_row_stride : c.dim;
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.dim));
  out.assign(c.batch * c.heads * c.q_len * c.value_dim, 0.0);
  out_abs = out;
  lse.assign(c.batch * c.heads * c.q_len, -INFINITY);
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t h = 0; h < c.heads; ++h) {
      const int64_t kv = b * c.kv_heads + h / group;
      for (int64_t i = 0; i < c.q_len; ++i) {
        const int64_t row = (b * c.heads + h) * c.q_len + i;
        std::vector<double> s(c.kv_len, -INFINITY);
        double mx = -INFINITY;
        for (int64_t j = 0; j < c.kv_len; ++j) {
          const int64_t mh = c.per_head_mask ? h : 0;
          const double m = HasMask(c)
              ? d.mask[((b * d.mask_heads + mh) * c.q_len + i) * c.kv_len + j] : 0.0;
          if (m == -INFINITY || (c.causal && j > i)) continue;
          double dot = 0;
          for (int64_t e = 0; e < c.dim; ++e) {
            dot += double(d.q[row * qrow + e]) * d.k[(kv * c.kv_len + j) * c.dim + e];
          }
          s[j] = dot * scale + (c.mask_type == AttentionMaskType::kBool ? 0.0 : m);
          mx = std::max(mx, s[j]);
        }
        if (mx == -INFINITY) continue;  // sees nothing: zeros
        double sum = 0;
        for (double& x : s) sum += (x = std::exp(x - mx));
        lse[row] = mx + std::log(sum);
        for (int64_t j = 0; j < c.kv_len; ++j) {
          for (int64_t e = 0; e < c.value_dim; ++e) {
            const double pv = s[j] / sum * d.v[(kv * c.kv_len + j) * c.value_dim + e];
            out[row * c.value_dim + e] += pv;
            out_abs[row * c.value_dim + e] += std::fabs(pv);
          }
        }
      }
    }
  }
}

MaskedAttentionProblem ProblemOf(const Case& c, int64_t mask_heads) {
  MaskedAttentionProblem p;
  p.query_type = p.kv_type = c.bf16 ? GemmOperandType::kBF16 : GemmOperandType::kF32;
  p.out_type = c.out_type;
  p.mask_type = HasMask(c) ? c.mask_type : AttentionMaskType::kNone;
  p.causal = c.causal;
  p.batch = c.batch, p.heads = c.heads, p.kv_heads = c.kv_heads, p.q_len = c.q_len;
  p.kv_len = c.kv_len, p.head_dim = c.dim, p.value_dim = c.value_dim;
  p.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.dim)));
  const int64_t qrow = c.query_row_stride ? c.query_row_stride : c.dim;
  const int64_t q[] = {c.heads * c.q_len * qrow, c.q_len * qrow, qrow};
  const int64_t k[] = {c.kv_heads * c.kv_len * c.dim, c.kv_len * c.dim, c.dim};
  const int64_t v[] = {c.kv_heads * c.kv_len * c.value_dim, c.kv_len * c.value_dim,
                       c.value_dim};
  const int64_t o[] = {c.heads * c.q_len * c.value_dim, c.q_len * c.value_dim, c.value_dim};
  const int64_t m[] = {mask_heads * c.q_len * c.kv_len, mask_heads > 1 ? c.q_len * c.kv_len : 0,
                       c.kv_len, 1};
  for (int x = 0; x < 3; ++x) {
    p.query_strides[x] = q[x], p.key_strides[x] = k[x], p.value_strides[x] = v[x];
    p.out_strides[x] = o[x];
  }
  for (int x = 0; x < 4; ++x) p.mask_strides[x] = m[x];
  return p;
}

float OutValue(GemmOperandType type, const char* at) {
  float f;
  if (type == GemmOperandType::kF32) {
    std::memcpy(&f, at, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, at, 2);
  if (type == GemmOperandType::kF16) {
    HalfToFloat(&h, 1, 1, 1, &f, 1);
    return f;
  }
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  std::memcpy(&f, &u, 4);
  return f;
}

const char* IsaName(AttentionIsa isa) {
  return isa == AttentionIsa::kAvx512 ? "avx512" : isa == AttentionIsa::kAvx2 ? "avx2"
                                                                             : "portable";
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  cases.push_back({"static_cache_f32"});
  cases.push_back({"static_cache_bf16_bf16_out", true, GemmOperandType::kBF16,
                   AttentionMaskType::kBF16});
  cases.push_back({"bool_mask_f16_out", true, GemmOperandType::kF16, AttentionMaskType::kBool});
  cases.push_back({"biases_and_holes_per_head", false, GemmOperandType::kF32,
                   AttentionMaskType::kF32, MaskKind::kBiases, true});
  cases.push_back({"biases_bf16_mask", true, GemmOperandType::kBF16, AttentionMaskType::kBF16,
                   MaskKind::kBiases});
  Case causal{"causal_no_mask", true, GemmOperandType::kBF16, AttentionMaskType::kNone,
              MaskKind::kNone, false, true};
  causal.kv_len = 5;
  cases.push_back(causal);
  cases.push_back({"causal_and_mask", false, GemmOperandType::kF32, AttentionMaskType::kF32,
                   MaskKind::kStaticCache, false, true});
  Case decode{"decode_gqa8_strided_query", true, GemmOperandType::kBF16,
              AttentionMaskType::kBF16};
  decode.q_len = 1, decode.heads = 16, decode.kv_heads = 2, decode.query_row_stride = 80;
  decode.value_dim = 40;
  cases.push_back(decode);
  // Decode rows read bf16 keys and values in place on the AVX-512 path,
  // up to 4 rows that see the same keys at a time: groups of 4 and 2 over
  // several 512-key blocks with holes, a value dim off the 64 floats held
  // in registers; rows of one kv head with different ranges (per head).
  Case decode_blocks{"decode_gqa6_long_cache_biases", true, GemmOperandType::kBF16,
                     AttentionMaskType::kBF16, MaskKind::kBiases};
  decode_blocks.q_len = 1, decode_blocks.heads = 12, decode_blocks.kv_heads = 2;
  decode_blocks.kv_len = 1100, decode_blocks.first_position = 700;
  decode_blocks.value_dim = 72;
  cases.push_back(decode_blocks);
  Case decode_heads{"decode_per_head_mask_bf16", true, GemmOperandType::kF32,
                    AttentionMaskType::kF32, MaskKind::kStaticCache, true};
  decode_heads.q_len = 1, decode_heads.heads = 8, decode_heads.kv_heads = 2;
  cases.push_back(decode_heads);
  // Rows whose keys span the kernel's 512-key blocks (the running max
  // rescales what the first block summed).
  Case long_cache{"long_cache_biases_bf16", true, GemmOperandType::kBF16,
                  AttentionMaskType::kBF16, MaskKind::kBiases};
  long_cache.kv_len = 1100, long_cache.q_len = 3, long_cache.first_position = 700;
  long_cache.dim = long_cache.value_dim = 16;
  cases.push_back(long_cache);
  // Items of >= 16 query rows (a prefill): the AVX-512 path scores tiles of
  // 4 rows against keys transposed in groups of 16 -- a last tile of 2
  // rows, rows of one tile with different ranges, a head dim and key count
  // off the 16 lanes, a value dim past the 64 floats held in registers.
  Case tiles{"prefill_tiles_bf16_causal", true, GemmOperandType::kBF16,
             AttentionMaskType::kBF16, MaskKind::kStaticCache, false, true};
  tiles.heads = 4, tiles.kv_heads = 2, tiles.q_len = 15, tiles.first_position = 0;
  tiles.dim = 24, tiles.value_dim = 80;
  cases.push_back(tiles);
  Case tile_holes{"prefill_tiles_biases_per_head", false, GemmOperandType::kF32,
                  AttentionMaskType::kF32, MaskKind::kBiases, true};
  tile_holes.heads = 4, tile_holes.kv_heads = 1, tile_holes.q_len = 5;
  cases.push_back(tile_holes);
  Case tile_blocks{"prefill_tiles_long_cache_bf16", true, GemmOperandType::kBF16,
                   AttentionMaskType::kBF16, MaskKind::kBiases};
  tile_blocks.kv_len = 1100, tile_blocks.heads = 8, tile_blocks.q_len = 6;
  tile_blocks.first_position = 700, tile_blocks.dim = tile_blocks.value_dim = 16;
  cases.push_back(tile_blocks);
  return cases;
}

class MaskedAttentionTest : public ::testing::TestWithParam<std::tuple<Case, AttentionIsa>> {};

TEST_P(MaskedAttentionTest, MatchesReference) {
  const auto& [c, isa] = GetParam();
  if (isa > BestAttentionIsa()) {
    GTEST_SKIP() << "this CPU has no " << IsaName(isa) << " (best path: "
                 << IsaName(BestAttentionIsa()) << ")";
  }
  std::mt19937 rng(7);
  const Data d = Make(c, rng);
  std::vector<double> want, want_lse, want_abs;
  Reference(c, d, want, want_lse, want_abs);
  const MaskedAttentionProblem p = ProblemOf(c, d.mask_heads);
  const int64_t n = c.batch * c.heads * c.q_len * c.value_dim;
  const int64_t obytes = c.out_type == GemmOperandType::kF32 ? 4 : 2;
  std::vector<std::vector<char>> outs;
  std::vector<std::vector<float>> lses;
  for (int64_t blocks : {1, 3}) {
    std::vector<char> out(n * obytes, 0x7f);
    std::vector<float> lse(c.batch * c.heads * c.q_len, 12345.0f);
    for (int64_t block = 0; block < blocks; ++block) {
      RunMaskedAttentionBlock(p, d.q_raw.data(), d.k_raw.data(), d.v_raw.data(),
                              HasMask(c) ? d.mask_raw.data() : nullptr, out.data(),
                              lse.data(), block, blocks, isa);
    }
    outs.push_back(out);
    lses.push_back(lse);
  }
  EXPECT_EQ(outs[0], outs[1]) << "the result depends on the blocks (SPEC A2)";
  EXPECT_EQ(lses[0], lses[1]);
  // f32 sums over <= ~720 keys of <= 64 products (2e-5), the output's one
  // rounding (bf16 2^-8, f16 2^-11 relative) and, with bf16 values, each
  // weight's (2^-8 of sum p |v|; bounds with a factor 2 of margin).
  const double out_u = c.out_type == GemmOperandType::kBF16  ? 0x1p-8
                       : c.out_type == GemmOperandType::kF16 ? 0x1p-11
                                                             : 0.0;
  const double weight_u = c.bf16 ? 0x1p-8 : 0.0;
  for (int64_t x = 0; x < n; ++x) {
    const double tol = 2e-5 + out_u * std::fabs(want[x]) + weight_u * want_abs[x];
    ASSERT_NEAR(OutValue(c.out_type, outs[0].data() + x * obytes), want[x], tol)
        << "element " << x << " (row " << x / c.value_dim << ")";
  }
  for (size_t r = 0; r < want_lse.size(); ++r) {
    if (std::isinf(want_lse[r])) {
      EXPECT_EQ(lses[0][r], -INFINITY) << "row " << r << " sees no key";
    } else {
      EXPECT_NEAR(lses[0][r], want_lse[r], 1e-5 * (1 + std::fabs(want_lse[r]))) << "row " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, MaskedAttentionTest,
    ::testing::Combine(::testing::ValuesIn(Cases()),
                       ::testing::Values(AttentionIsa::kPortable, AttentionIsa::kAvx2,
                                         AttentionIsa::kAvx512)),
    [](const auto& info) {
      return std::get<0>(info.param).name + "_" + IsaName(std::get<1>(info.param));
    });

// As PyTorch's softmax: a row with a NaN score, or a +inf one (q.k
// overflowing), is NaN; the other rows are untouched.
TEST(MaskedAttentionEdgeTest, NanOrInfScoresGiveNanRows) {
  for (AttentionIsa isa : {AttentionIsa::kPortable, AttentionIsa::kAvx2, AttentionIsa::kAvx512}) {
    if (isa > BestAttentionIsa()) continue;
    Case c{"edge"};
    c.mask = MaskKind::kNone;
    c.mask_type = AttentionMaskType::kNone;
    std::mt19937 rng(3);
    Data d = Make(c, rng);
    float* q = reinterpret_cast<float*>(d.q_raw.data());
    q[5] = NAN;                                       // (b 0, head 0, row 0)
    for (int64_t e = 0; e < c.dim; ++e) q[c.dim + e] = 3e38f;  // row 1: q.k = +-inf
    const MaskedAttentionProblem p = ProblemOf(c, 1);
    std::vector<float> out(c.batch * c.heads * c.q_len * c.value_dim);
    RunMaskedAttentionBlock(p, d.q_raw.data(), d.k_raw.data(), d.v_raw.data(), nullptr,
                            out.data(), nullptr, 0, 1, isa);
    for (int64_t row = 0; row < c.batch * c.heads * c.q_len; ++row) {
      for (int64_t e = 0; e < c.value_dim; ++e) {
        const float x = out[row * c.value_dim + e];
        if (row < 2) {
          EXPECT_TRUE(std::isnan(x)) << IsaName(isa) << " row " << row << ": " << x;
        } else {
          EXPECT_TRUE(std::isfinite(x)) << IsaName(isa) << " row " << row << ": " << x;
        }
      }
    }
  }
}

}  // namespace
}  // namespace rbln::compiler
