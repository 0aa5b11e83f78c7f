// rbln_grouped_gemm_mxfp4 against a double-precision reference on the
// dequantized weights: groups of 0 rows, GEMV-sized (fused) and larger
// (oneDNN) ones, rows outside every group, f32 and bf16 A, int32 and int64
// offsets, each ISA, any block count bit-identical.
// spec: P5, A2
#include "rbln/compiler/kernels/mxfp4_grouped_gemm.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace rbln::compiler {
namespace {

constexpr double kFp4[16] = {0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6};

uint16_t ToBf16(float f) {  // round to nearest even
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits += 0x7FFF + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
}

float FromBf16(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

struct Case {
  int64_t m, n, k;
  std::vector<int64_t> offsets;  // group ends
  GemmOperandType type;
  bool offsets_i64;
};

void Check(const Case& t, Mxfp4Isa isa) {
  const int64_t groups = t.offsets.size();
  std::mt19937 rng(static_cast<uint32_t>(t.m * 131 + t.n * 7 + t.k + groups));
  std::uniform_int_distribution<int> byte(0, 255), scale(120, 130);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint8_t> blocks(groups * t.n * t.k / 2), scales(groups * t.n * t.k / 32);
  for (auto& b : blocks) b = byte(rng);
  for (auto& s : scales) s = scale(rng);
  std::vector<float> a32(t.m * t.k);
  std::vector<uint16_t> a16(t.m * t.k);
  for (int64_t i = 0; i < t.m * t.k; ++i) {
    a16[i] = ToBf16(normal(rng));
    a32[i] = t.type == GemmOperandType::kBF16 ? FromBf16(a16[i]) : normal(rng);
  }
  const void* a = t.type == GemmOperandType::kBF16 ? static_cast<const void*>(a16.data())
                                                    : static_cast<const void*>(a32.data());
  std::vector<int32_t> off32(t.offsets.begin(), t.offsets.end());
  const void* offsets = t.offsets_i64 ? static_cast<const void*>(t.offsets.data())
                                      : static_cast<const void*>(off32.data());
  // Dequantized weights: the test's own decoding, and the library's.
  std::vector<double> w(groups * t.n * t.k);
  for (int64_t row = 0; row < groups * t.n; ++row) {
    for (int64_t j = 0; j < t.k; ++j) {
      const uint8_t byte_value = blocks[row * t.k / 2 + j / 2];
      const int nibble = j % 2 == 0 ? byte_value & 15 : byte_value >> 4;
      w[row * t.k + j] = kFp4[nibble] * std::ldexp(1.0, scales[row * t.k / 32 + j / 32] - 127);
    }
  }
  std::vector<float> deq(groups * t.n * t.k);
  DequantizeMxfp4Rows(blocks.data(), scales.data(), groups * t.n, t.k, deq.data());
  for (size_t i = 0; i < w.size(); ++i) ASSERT_EQ(deq[i], static_cast<float>(w[i])) << i;

  Mxfp4GroupedGemmProblem p;
  p.type = t.type;
  p.offsets_i64 = t.offsets_i64;
  p.groups = groups;
  p.m = t.m;
  p.n = t.n;
  p.k = t.k;
  p.lda = t.k;
  p.ldc = t.n;
  std::vector<float> first;
  for (int64_t blocks_count : {1, 3, 7}) {
    std::vector<float> c(t.m * t.n, -7.0f);  // rows outside the groups keep it
    for (int64_t blk = 0; blk < blocks_count; ++blk) {
      RunMxfp4GroupedGemmBlock(p, a, blocks.data(), scales.data(), offsets, c.data(), blk,
                               blocks_count, isa);
    }
    if (first.empty()) {
      first = c;
    } else {
      ASSERT_EQ(0, std::memcmp(first.data(), c.data(), c.size() * 4)) << blocks_count;
    }
  }
  int64_t start = 0;
  std::vector<int> group_of(t.m, -1);
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t r = start; r < std::min(t.offsets[g], t.m); ++r) group_of[r] = g;
    start = t.offsets[g];
  }
  for (int64_t r = 0; r < t.m; ++r) {
    for (int64_t col = 0; col < t.n; ++col) {
      const float got = first[r * t.n + col];
      if (group_of[r] < 0) {
        ASSERT_EQ(got, -7.0f);
        continue;
      }
      double want = 0, magnitude = 0;
      for (int64_t j = 0; j < t.k; ++j) {
        const double product = a32[r * t.k + j] * w[(group_of[r] * t.n + col) * t.k + j];
        want += product;
        magnitude += std::fabs(product);
      }
      // f32 accumulation of exact products.
      ASSERT_NEAR(got, want, 4e-6 * magnitude + 1e-30)
          << "row " << r << " col " << col << " rows in group "
          << t.offsets[group_of[r]] - (group_of[r] ? t.offsets[group_of[r] - 1] : 0);
    }
  }
}

TEST(Mxfp4GroupedGemmTest, MatchesTheDequantizedProduct) {
  const std::vector<Case> cases = {
      // Decode: one row per group (gpt-oss's top-4), one empty group.
      {4, 40, 64, {1, 2, 2, 3, 4}, GemmOperandType::kF32, false},
      {4, 40, 64, {1, 2, 2, 3, 4}, GemmOperandType::kBF16, true},
      // Groups of 8 (the last fused size), 9 and 20 rows (oneDNN), and rows
      // 37..39 in no group.
      {40, 24, 96, {8, 17, 37}, GemmOperandType::kF32, false},
      {40, 24, 96, {8, 17, 37}, GemmOperandType::kBF16, false},
  };
  for (const Case& t : cases) {
    Check(t, Mxfp4Isa::kPortable);
    if (BestMxfp4Isa() == Mxfp4Isa::kAvx2) Check(t, Mxfp4Isa::kAvx2);
  }
}

}  // namespace
}  // namespace rbln::compiler
