// The split of halves into bf16 pairs: exact (hi + lo == x, lo = x - hi)
// for every half bit pattern, hi the nearest bf16 (ties to even), the same
// bits on every instruction set, and the K-tripled layouts of A and B.
#include "rbln/compiler/kernels/bf16_split.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "rbln/compiler/testing/test_graphs.h"

namespace rbln::compiler {
namespace {

using testing::Bf16ToFloat;
using testing::HalfValue;

std::vector<SplitIsa> Isas() {
  std::vector<SplitIsa> isas = {SplitIsa::kScalar};
  if (BestSplitIsa() >= SplitIsa::kAvx512) isas.push_back(SplitIsa::kAvx512);
  return isas;
}

TEST(Bf16SplitTest, EveryHalfIsTheExactSumOfItsParts) {
  int subnormals = 0, inexact_hi = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t bits = static_cast<uint16_t>(h);
    const double x = HalfValue(bits);
    uint16_t hi, lo;
    const bool finite = SplitHalf(bits, &hi, &lo);
    const double vh = Bf16ToFloat(hi), vl = Bf16ToFloat(lo);
    if (std::isnan(x)) {
      ASSERT_FALSE(finite) << h;
      ASSERT_TRUE(std::isnan(vh)) << h;
      ASSERT_EQ(vl, 0.0) << h;
      continue;
    }
    ASSERT_EQ(finite, !std::isinf(x)) << h;
    ASSERT_EQ(vh + vl, x) << h;  // exact in double: both have few bits
    ASSERT_EQ(static_cast<float>(vh) + static_cast<float>(vl),
              static_cast<float>(x))
        << h;
    if (std::isinf(x)) {
      ASSERT_EQ(vl, 0.0) << h;
      continue;
    }
    ASSERT_EQ(std::signbit(vh), std::signbit(x)) << h;
    // hi is the nearest bf16, ties to the even one: no neighbour is nearer.
    for (uint16_t next : {static_cast<uint16_t>(hi + 1),
                          static_cast<uint16_t>(hi - 1)}) {
      const double other = Bf16ToFloat(next);
      if (std::isnan(other) || std::isinf(other)) continue;
      ASSERT_LE(std::fabs(x - vh), std::fabs(x - other)) << h;
      if (std::fabs(x - vh) == std::fabs(x - other) && vh != other) {
        ASSERT_EQ(hi & 1, 0) << h << " tie not to even";
      }
    }
    if ((h & 0x7c00) == 0 && (h & 0x3ff) != 0) ++subnormals;
    if (vl != 0) ++inexact_hi;
  }
  EXPECT_EQ(subnormals, 2 * 1023);
  // Halves with more than 8 significant bits need a lo part: most of them.
  EXPECT_GT(inexact_hi, 40000);
}

TEST(Bf16SplitTest, EveryIsaGivesTheScalarBits) {
  // All bit patterns, in rows whose lengths leave tails of every size.
  std::vector<uint16_t> all(65536);
  for (uint32_t h = 0; h < 65536; ++h) all[h] = static_cast<uint16_t>(h);
  for (SplitIsa isa : Isas()) {
    for (int64_t n : {1, 7, 15, 16, 17, 31, 33, 100, 65536}) {
      for (int64_t start = 0; start + n <= 65536; start += n * 7 + 1) {
        // Canaries around the outputs catch writes past the row.
        std::vector<uint16_t> out(3 * (n + 2), 0xabcd);
        uint16_t* hi = &out[1];
        uint16_t* hi2 = &out[n + 3];
        uint16_t* lo = &out[2 * n + 5];
        const bool finite =
            SplitHalfRow(all.data() + start, n, hi, hi2, lo, isa);
        bool want_finite = true;
        for (int64_t j = 0; j < n; ++j) {
          uint16_t h, l;
          want_finite &= SplitHalf(all[start + j], &h, &l);
          ASSERT_EQ(hi[j], h) << static_cast<int>(isa) << " " << start + j;
          ASSERT_EQ(hi2[j], h) << static_cast<int>(isa) << " " << start + j;
          ASSERT_EQ(lo[j], l) << static_cast<int>(isa) << " " << start + j;
        }
        ASSERT_EQ(finite, want_finite) << static_cast<int>(isa) << " " << start;
        for (size_t canary : {size_t{0}, static_cast<size_t>(n + 1),
                              static_cast<size_t>(n + 2),
                              static_cast<size_t>(2 * n + 4),
                              static_cast<size_t>(3 * n + 5)}) {
          ASSERT_EQ(out[canary], 0xabcd) << static_cast<int>(isa) << " " << n;
        }
      }
    }
  }
}

TEST(Bf16SplitTest, OneInfinityInAVectorIsReported) {
  for (SplitIsa isa : Isas()) {
    for (int64_t at : {0, 5, 15, 16, 20}) {
      std::vector<uint16_t> row(21, 0x3c00), hi(21), hi2(21), lo(21);
      row[at] = 0xfc00;  // -inf
      EXPECT_FALSE(SplitHalfRow(row.data(), 21, hi.data(), hi2.data(),
                                lo.data(), isa))
          << at;
      EXPECT_EQ(hi[at], 0xff80) << at;
      row[at] = 0x3c01;
      EXPECT_TRUE(SplitHalfRow(row.data(), 21, hi.data(), hi2.data(),
                               lo.data(), isa))
          << at;
    }
  }
}

// The K-tripled operands pair Ah with Bh, Al with Bh and Ah with Bl.
TEST(Bf16SplitTest, TripledLayouts) {
  const int64_t rows = 3, k = 19, n = 5, ld = 23;
  std::vector<uint16_t> src(rows > n ? rows * ld : n * ld);
  for (size_t i = 0; i < src.size(); ++i) {
    src[i] = static_cast<uint16_t>(0x3000 + 37 * i);
  }
  auto parts = [&](int64_t i) {
    uint16_t h, l;
    SplitHalf(src[i], &h, &l);
    return std::pair<uint16_t, uint16_t>{h, l};
  };
  std::vector<uint16_t> a(rows * 3 * k);
  ASSERT_TRUE(SplitRowsOfA(src.data(), rows, k, ld, a.data()));
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t l = 0; l < k; ++l) {
      auto [h, lo] = parts(i * ld + l);
      ASSERT_EQ(a[i * 3 * k + l], h);
      ASSERT_EQ(a[i * 3 * k + k + l], lo);
      ASSERT_EQ(a[i * 3 * k + 2 * k + l], h);
    }
  }
  // B [k, n] (rows of length n, ld apart; k rows).
  std::vector<uint16_t> src_b(k * ld);
  for (size_t i = 0; i < src_b.size(); ++i) {
    src_b[i] = static_cast<uint16_t>(0xb000 + 41 * i);
  }
  std::vector<uint16_t> b(3 * k * n);
  ASSERT_TRUE(SplitRowsOfB(src_b.data(), k, n, ld, b.data()));
  for (int64_t l = 0; l < k; ++l) {
    for (int64_t j = 0; j < n; ++j) {
      uint16_t h, lo;
      SplitHalf(src_b[l * ld + j], &h, &lo);
      ASSERT_EQ(b[l * n + j], h);
      ASSERT_EQ(b[(k + l) * n + j], h);
      ASSERT_EQ(b[(2 * k + l) * n + j], lo);
    }
  }
  // B stored [n, k].
  std::vector<uint16_t> bt(n * 3 * k);
  ASSERT_TRUE(SplitRowsOfTransposedB(src.data(), n, k, ld, bt.data()));
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t l = 0; l < k; ++l) {
      auto [h, lo] = parts(j * ld + l);
      ASSERT_EQ(bt[j * 3 * k + l], h);
      ASSERT_EQ(bt[j * 3 * k + k + l], h);
      ASSERT_EQ(bt[j * 3 * k + 2 * k + l], lo);
    }
  }
}

}  // namespace
}  // namespace rbln::compiler
