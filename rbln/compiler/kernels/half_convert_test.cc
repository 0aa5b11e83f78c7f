// HalfToFloat against an independent decoding of every half bit pattern,
// on each instruction set this CPU has; strided matrices with row tails
// shorter than a vector, and nothing written outside the rows.
#include "rbln/compiler/kernels/half_convert.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "rbln/compiler/testing/test_graphs.h"

namespace rbln::compiler {
namespace {

using testing::HalfValue;

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

std::vector<HalfIsa> Isas() {
  std::vector<HalfIsa> isas;
  for (HalfIsa isa : {HalfIsa::kScalar, HalfIsa::kF16c, HalfIsa::kAvx512}) {
    if (isa <= BestHalfIsa()) isas.push_back(isa);
  }
  return isas;
}

TEST(HalfToFloatTest, ScalarDecodesEveryBitPattern) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float got = HalfToFloat(static_cast<uint16_t>(h));
    const double want = HalfValue(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << h;
      // Quiet, with the sign and payload kept.
      ASSERT_EQ(Bits(got), ((h & 0x8000u) << 16) | 0x7fc00000u | ((h & 0x3ffu) << 13)) << h;
    } else {
      ASSERT_EQ(static_cast<double>(got), want) << h;
      ASSERT_EQ(std::signbit(got), (h & 0x8000) != 0) << h;
    }
  }
}

TEST(HalfToFloatTest, EveryIsaGivesTheScalarBits) {
  std::vector<uint16_t> all(65536);
  for (uint32_t h = 0; h < 65536; ++h) all[h] = static_cast<uint16_t>(h);
  for (HalfIsa isa : Isas()) {
    std::vector<float> out(all.size());
    HalfToFloat(all.data(), 1, all.size(), all.size(), out.data(), out.size(), isa);
    for (uint32_t h = 0; h < 65536; ++h) {
      ASSERT_EQ(Bits(out[h]), Bits(HalfToFloat(static_cast<uint16_t>(h))))
          << HalfIsaName(isa) << " bits " << h;
    }
  }
}

TEST(HalfToFloatTest, StridedRowsWithTails) {
  for (HalfIsa isa : Isas()) {
    for (int64_t cols : {1, 7, 8, 15, 16, 17, 37, 64}) {
      const int64_t rows = 5, ld_src = cols + 3, ld_dst = cols + 5;
      std::vector<uint16_t> src(rows * ld_src);
      for (size_t i = 0; i < src.size(); ++i) {
        src[i] = static_cast<uint16_t>(i * 2654435761u >> 7);
      }
      const float sentinel = -12345.0f;
      std::vector<float> dst(rows * ld_dst, sentinel);
      HalfToFloat(src.data(), rows, cols, ld_src, dst.data(), ld_dst, isa);
      for (int64_t i = 0; i < rows; ++i) {
        for (int64_t j = 0; j < ld_dst; ++j) {
          const float got = dst[i * ld_dst + j];
          if (j >= cols) {
            ASSERT_EQ(got, sentinel) << HalfIsaName(isa) << " " << i << "," << j;
          } else {
            ASSERT_EQ(Bits(got), Bits(HalfToFloat(src[i * ld_src + j])))
                << HalfIsaName(isa) << " cols " << cols << " at " << i << "," << j;
          }
        }
      }
    }
  }
}

TEST(Bf16ToFloatTest, EveryBitPatternBecomesTheHighHalfOfAFloat) {
  // Strided rows with tails (the vector path and its scalar tail).
  const int64_t rows = 65536 / 37 + 1, cols = 37, ld_src = 40, ld_dst = 41;
  std::vector<uint16_t> src(rows * ld_src);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint16_t>(i);
  const float sentinel = -12345.0f;
  std::vector<float> dst(rows * ld_dst, sentinel);
  Bf16ToFloat(src.data(), rows, cols, ld_src, dst.data(), ld_dst);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < ld_dst; ++j) {
      const uint32_t got = Bits(dst[i * ld_dst + j]);
      if (j >= cols) {
        ASSERT_EQ(got, Bits(sentinel)) << i << "," << j;
      } else {
        ASSERT_EQ(got, static_cast<uint32_t>(src[i * ld_src + j]) << 16) << i << "," << j;
      }
    }
  }
  std::vector<uint16_t> all(65536);
  for (uint32_t h = 0; h < 65536; ++h) all[h] = static_cast<uint16_t>(h);
  std::vector<float> out(all.size());
  Bf16ToFloat(all.data(), 1, all.size(), all.size(), out.data(), out.size());
  for (uint32_t h = 0; h < 65536; ++h) ASSERT_EQ(Bits(out[h]), h << 16) << h;
}

TEST(HalfToFloatTest, BestIsaIsNamed) {
  EXPECT_STRNE(HalfIsaName(BestHalfIsa()), "");
  RecordProperty("isa", HalfIsaName(BestHalfIsa()));
}

}  // namespace
}  // namespace rbln::compiler
