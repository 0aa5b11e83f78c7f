// spec: P5
// SkinnyBf16Gemm against a double-precision reference, on each instruction
// set this CPU has: B stored [n, k] and [k, n], strided and batched, k not a
// multiple of the vector lengths, n = 1, m = 1 .. kSkinnyBf16MaxRows; and
// the same bits whatever range of columns a call computes.
#include "rbln/compiler/kernels/bf16_skinny_gemm.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "rbln/compiler/kernels/test_operands.h"

namespace rbln::compiler {
namespace {

using testing::FillOperand;

std::vector<SkinnyIsa> Isas() {
  std::vector<SkinnyIsa> isas = {SkinnyIsa::kPortable};
  for (SkinnyIsa isa : {SkinnyIsa::kAvx2, SkinnyIsa::kAvx512Bf16}) {
    if (BestSkinnyIsa() >= isa) isas.push_back(isa);
  }
  return isas;
}

// A strided, batched problem: rows of A and B padded, batches apart.
GemmProblem Problem(bool trans_b, int64_t batch, int64_t m, int64_t n,
                    int64_t k) {
  GemmProblem q;
  q.type = GemmOperandType::kBF16;
  q.trans_b = trans_b;
  q.accumulate = false;
  q.batch = batch;
  q.m = m;
  q.n = n;
  q.k = k;
  q.lda = k + 3;
  q.ldb = (trans_b ? k : n) + 5;
  q.ldc = n;
  q.stride_a = m * q.lda + 7;
  q.stride_b = (trans_b ? n : k) * q.ldb + 2;
  q.stride_c = m * n;
  return q;
}

struct Operands {
  std::vector<float> a, b;
  std::vector<char> a_raw, b_raw;
};

Operands Make(const GemmProblem& q, std::mt19937& rng) {
  Operands o;
  FillOperand(q.batch * q.stride_a, true, rng, o.a, o.a_raw);
  FillOperand(q.batch * q.stride_b, true, rng, o.b, o.b_raw);
  return o;
}

float BValue(const GemmProblem& q, const std::vector<float>& b, int64_t bt,
             int64_t l, int64_t j) {
  return b[bt * q.stride_b + (q.trans_b ? j * q.ldb + l : l * q.ldb + j)];
}

void ExpectNearReference(const GemmProblem& q, const Operands& o,
                         const std::vector<float>& c, const char* isa) {
  for (int64_t bt = 0; bt < q.batch; ++bt) {
    for (int64_t i = 0; i < q.m; ++i) {
      for (int64_t j = 0; j < q.n; ++j) {
        double sum = 0, magnitude = 0;
        for (int64_t l = 0; l < q.k; ++l) {
          const double p = static_cast<double>(
                               o.a[bt * q.stride_a + i * q.lda + l]) *
                           BValue(q, o.b, bt, l, j);
          sum += p;
          magnitude += std::fabs(p);
        }
        // f32 accumulation in any order, products rounded or not.
        const double bound = (q.k + 2) * std::ldexp(1.0, -24) * magnitude * 1.001;
        ASSERT_NEAR(c[(bt * q.m + i) * q.n + j], sum, bound)
            << isa << " trans_b " << q.trans_b << " batch " << q.batch
            << " m " << q.m << " n " << q.n << " k " << q.k << " at " << bt
            << "," << i << "," << j;
      }
    }
  }
}

TEST(SkinnyBf16GemmTest, MatchesDoubleReference) {
  std::mt19937 rng(7);
  const int64_t shapes[][2] = {{1, 1},  {1, 37},  {5, 16},  {13, 100},
                               {33, 257}, {7, 300}, {20, 15}, {3, 513}};
  for (SkinnyIsa isa : Isas()) {
    for (bool trans_b : {true, false}) {
      for (int64_t batch : {1, 3}) {
        for (int64_t m = 1; m <= kSkinnyBf16MaxRows; ++m) {
          for (const auto& nk : shapes) {
            const GemmProblem q = Problem(trans_b, batch, m, nk[0], nk[1]);
            ASSERT_TRUE(SkinnyBf16Applies(q));
            const Operands o = Make(q, rng);
            std::vector<float> c(batch * m * q.n, std::nanf(""));
            SkinnyBf16Gemm(q, o.a_raw.data(), o.b_raw.data(), c.data(), isa);
            ExpectNearReference(q, o, c, SkinnyIsaName(isa));
          }
        }
      }
    }
  }
}

// Columns [0, j) and [j, n) in two calls give the bits of one call, for
// every split point (tiles, panels and vector tails cut anywhere).
TEST(SkinnyBf16GemmTest, ColumnBlocksGiveTheSameBits) {
  std::mt19937 rng(11);
  for (SkinnyIsa isa : Isas()) {
    for (bool trans_b : {true, false}) {
      for (int64_t m :
           std::vector<int64_t>{1, 2, 3, 5, 8, 13, kSkinnyBf16MaxRows}) {
        const GemmProblem q = Problem(trans_b, 2, m, 41, 300);
        const Operands o = Make(q, rng);
        std::vector<float> whole(q.batch * m * q.n);
        SkinnyBf16Gemm(q, o.a_raw.data(), o.b_raw.data(), whole.data(), isa);
        for (int64_t j = 1; j < q.n; ++j) {
          std::vector<float> parts(whole.size());
          for (auto [first, end] : {std::pair{int64_t{0}, j}, std::pair{j, q.n}}) {
            GemmProblem part = q;
            part.n = end - first;
            const int64_t offset = trans_b ? first * q.ldb : first;
            std::vector<float> c(q.batch * m * part.n);
            SkinnyBf16Gemm(part,
                           o.a_raw.data(),
                           o.b_raw.data() + offset * sizeof(uint16_t),
                           c.data(), isa);
            for (int64_t r = 0; r < q.batch * m; ++r) {
              std::memcpy(&parts[r * q.n + first], &c[r * part.n],
                          part.n * sizeof(float));
            }
          }
          ASSERT_EQ(0, std::memcmp(parts.data(), whole.data(),
                                   whole.size() * sizeof(float)))
              << SkinnyIsaName(isa) << " trans_b " << trans_b << " m " << m
              << " split at " << j;
        }
      }
    }
  }
}

TEST(SkinnyBf16GemmTest, AppliesToFewBf16RowsOnly) {
  GemmProblem q = Problem(true, 1, 1, 8, 8);
  EXPECT_TRUE(SkinnyBf16Applies(q));
  q.m = kSkinnyBf16MaxRows + 1;
  EXPECT_FALSE(SkinnyBf16Applies(q));
  q.m = 0;
  EXPECT_FALSE(SkinnyBf16Applies(q));
  q.m = 1;
  q.type = GemmOperandType::kF32;
  EXPECT_FALSE(SkinnyBf16Applies(q));
  q.type = GemmOperandType::kF16;
  EXPECT_FALSE(SkinnyBf16Applies(q));
}

// Where oneDNN has no bf16 kernels every skinny problem takes the kernel;
// where it has, only Linear weights (B stored [n, k]) of few rows on
// AVX-512 BF16.
TEST(SkinnyBf16GemmTest, PreferredWithoutBf16KernelsOrForWeightsOnAvx512Bf16) {
  GemmProblem q = Problem(true, 1, 4, 8, 8);
  EXPECT_TRUE(SkinnyBf16Preferred(q, false));
  EXPECT_EQ(SkinnyBf16Preferred(q, true),
            BestSkinnyIsa() == SkinnyIsa::kAvx512Bf16);
  q.trans_b = false;
  EXPECT_TRUE(SkinnyBf16Preferred(q, false));
  EXPECT_FALSE(SkinnyBf16Preferred(q, true));
  q.trans_b = true;
  q.m = kSkinnyBf16MaxRowsBesideOnednn + 1;
  EXPECT_TRUE(SkinnyBf16Preferred(q, false));
  EXPECT_FALSE(SkinnyBf16Preferred(q, true));
  q.m = kSkinnyBf16MaxRows + 1;
  EXPECT_FALSE(SkinnyBf16Preferred(q, false));
  EXPECT_FALSE(SkinnyBf16Preferred(q, true));
}

}  // namespace
}  // namespace rbln::compiler
