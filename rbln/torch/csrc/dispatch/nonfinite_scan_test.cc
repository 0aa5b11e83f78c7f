// spec: H1, H8 -- the NaN/Inf check's scan finds every NaN and infinity.
#include "rbln/torch/csrc/dispatch/nonfinite_scan.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace rbln::torch_backend {
namespace {

constexpr ScanIsa kIsas[] = {ScanIsa::kScalar, ScanIsa::kAvx2, ScanIsa::kAvx512, ScanIsa::kBest};

// What the check must see in one 16-bit pattern, decoded from its fields
// (not from the magnitude ordering the scan relies on).
struct Kind {
  bool nan = false;
  bool inf = false;
};

Kind Decode16(uint16_t bits, FloatFormat format) {
  const int mantissa_bits = format == FloatFormat::kFloat16 ? 10 : 7;
  const uint32_t exponent = (bits & 0x7FFF) >> mantissa_bits;
  const uint32_t all_ones = format == FloatFormat::kFloat16 ? 0x1F : 0xFF;
  const uint32_t mantissa = bits & ((1u << mantissa_bits) - 1);
  return {exponent == all_ones && mantissa != 0, exponent == all_ones && mantissa == 0};
}

// The verdict the check draws from a buffer: NaN found, else inf found.
Kind Verdict(uint64_t peak, FloatFormat format) {
  return {IsNanBits(peak, format), IsInfBits(peak, format)};
}

// Reference over a buffer: any NaN; any inf (only meaningful without NaN,
// since the peak of a buffer holding both is a NaN).
Kind Reference16(const uint16_t* p, int64_t n, FloatFormat format) {
  Kind k;
  for (int64_t i = 0; i < n; ++i) {
    const Kind e = Decode16(p[i], format);
    k.nan |= e.nan;
    k.inf |= e.inf;
  }
  if (k.nan) k.inf = false;
  return k;
}

void ExpectSame(Kind want, Kind got, const std::string& what) {
  EXPECT_EQ(want.nan, got.nan) << what;
  EXPECT_EQ(want.inf, got.inf) << what;
}

class ScanTest : public ::testing::TestWithParam<ScanIsa> {
 protected:
  void SetUp() override {
    if (!ScanIsaSupported(GetParam())) GTEST_SKIP() << "CPU lacks this instruction set";
  }
};

TEST_P(ScanTest, EverySixteenBitPatternAlone) {
  for (FloatFormat format : {FloatFormat::kFloat16, FloatFormat::kBFloat16}) {
    for (uint32_t b = 0; b < 65536; ++b) {
      const uint16_t bits = static_cast<uint16_t>(b);
      const uint64_t peak = PeakMagnitudeBits(&bits, 1, format, GetParam());
      ASSERT_EQ(peak, bits & 0x7FFFu) << b;
      ExpectSame(Decode16(bits, format), Verdict(peak, format), std::to_string(b));
    }
  }
}

// Every pattern inside a buffer of finite values, at a position that walks
// over the vector body and the tail, with the buffer's start unaligned.
TEST_P(ScanTest, EverySixteenBitPatternInABuffer) {
  std::mt19937 rng(7);
  for (FloatFormat format : {FloatFormat::kFloat16, FloatFormat::kBFloat16}) {
    for (int64_t n : {1, 2, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 161, 300}) {
      std::vector<uint16_t> storage(n + 2);
      uint16_t* buf = storage.data() + 1;  // 2-byte aligned only.
      for (int64_t i = 0; i < n; ++i) {
        // Finite values of both signs: exponent below all ones.
        uint16_t v = static_cast<uint16_t>(rng());
        if (Decode16(v, format).nan || Decode16(v, format).inf) v &= 0xBFFF;
        buf[i] = v;
      }
      for (uint32_t b = 0; b < 65536; ++b) {
        const int64_t at = b % n;
        const uint16_t keep = buf[at];
        buf[at] = static_cast<uint16_t>(b);
        ExpectSame(Reference16(buf, n, format),
                   Verdict(PeakMagnitudeBits(buf, n, format, GetParam()), format),
                   "pattern " + std::to_string(b) + " at " + std::to_string(at) + " of " +
                       std::to_string(n));
        buf[at] = keep;
        if (testing::Test::HasFailure()) return;
      }
    }
  }
}

// A few non-finite patterns at every position of every length up to 200,
// from addresses with every alignment (odd bytes too), with junk bytes on
// both sides of the buffer that the scan must not read.
TEST_P(ScanTest, NonFiniteAtEveryPositionAndAlignment) {
  for (FloatFormat format : {FloatFormat::kFloat16, FloatFormat::kBFloat16}) {
    const uint16_t inf = format == FloatFormat::kFloat16 ? 0x7C00 : 0x7F80;
    const uint16_t specials[] = {inf, static_cast<uint16_t>(inf | 0x8000),
                                 static_cast<uint16_t>(inf | 1), static_cast<uint16_t>(0xFFFF),
                                 static_cast<uint16_t>(inf | 0x0200 | 0x8000)};
    for (int misalign = 0; misalign < 3; ++misalign) {
      for (int64_t n = 0; n <= 200; ++n) {
        std::vector<char> raw(2 * n + 64, 0);
        char* base = raw.data() + 16 + misalign;
        // Junk around the buffer: NaN patterns just outside it.
        std::memset(raw.data(), 0xFF, 16 + misalign);
        std::memset(base + 2 * n, 0xFF, raw.size() - 16 - misalign - 2 * n);
        std::vector<uint16_t> values(n, 0x3C00);  // 1.0 in float16; finite in bfloat16.
        std::memcpy(base, values.data(), 2 * n);
        ASSERT_EQ(PeakMagnitudeBits(base, n, format, GetParam()), n == 0 ? 0u : 0x3C00u) << n;
        for (uint16_t special : specials) {
          for (int64_t at = 0; at < n; ++at) {
            values[at] = special;
            std::memcpy(base, values.data(), 2 * n);
            values[at] = 0x3C00;
            ASSERT_EQ(PeakMagnitudeBits(base, n, format, GetParam()), special & 0x7FFFu)
                << "n " << n << " at " << at << " misalign " << misalign;
          }
        }
      }
    }
  }
}

TEST_P(ScanTest, NanAndInfTogetherReadAsNan) {
  std::vector<uint16_t> v(100, 0x3C00);
  v[3] = 0xFC00;  // -inf
  v[97] = 0x7C01;  // NaN
  const uint64_t peak = PeakMagnitudeBits(v.data(), 100, FloatFormat::kFloat16, GetParam());
  EXPECT_TRUE(IsNanBits(peak, FloatFormat::kFloat16));
  EXPECT_FALSE(IsInfBits(peak, FloatFormat::kFloat16));
}

TEST_P(ScanTest, Float32) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const float specials[] = {nan, -nan, inf, -inf, std::numeric_limits<float>::signaling_NaN()};
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  for (int misalign = 0; misalign < 4; ++misalign) {
    for (int64_t n = 0; n <= 150; ++n) {
      std::vector<char> raw(4 * n + 64, static_cast<char>(0xFF));
      char* base = raw.data() + 16 + misalign;
      std::vector<float> values(n);
      float peak = 0;
      for (float& x : values) {
        x = normal(rng) * 1e30f;
        peak = std::max(peak, std::fabs(x));
      }
      std::memcpy(base, values.data(), 4 * n);
      const uint64_t got = PeakMagnitudeBits(base, n, FloatFormat::kFloat32, GetParam());
      uint32_t want;
      std::memcpy(&want, &peak, 4);
      ASSERT_EQ(got, want) << n;
      for (float special : specials) {
        for (int64_t at = 0; at < n; ++at) {
          const float keep = values[at];
          values[at] = special;
          std::memcpy(base, values.data(), 4 * n);
          values[at] = keep;
          const uint64_t p = PeakMagnitudeBits(base, n, FloatFormat::kFloat32, GetParam());
          ASSERT_EQ(IsNanBits(p, FloatFormat::kFloat32), std::isnan(special)) << n << " " << at;
          ASSERT_EQ(IsInfBits(p, FloatFormat::kFloat32), std::isinf(special)) << n << " " << at;
        }
      }
    }
  }
}

TEST_P(ScanTest, Float64) {
  const double specials[] = {std::numeric_limits<double>::quiet_NaN(),
                             -std::numeric_limits<double>::infinity(),
                             std::numeric_limits<double>::infinity()};
  for (int64_t n = 1; n <= 40; ++n) {
    std::vector<double> values(n, -2.5);
    ASSERT_FALSE(IsNanBits(PeakMagnitudeBits(values.data(), n, FloatFormat::kFloat64,
                                             GetParam()),
                           FloatFormat::kFloat64));
    for (double special : specials) {
      for (int64_t at = 0; at < n; ++at) {
        values[at] = special;
        const uint64_t p = PeakMagnitudeBits(values.data(), n, FloatFormat::kFloat64, GetParam());
        values[at] = -2.5;
        ASSERT_EQ(IsNanBits(p, FloatFormat::kFloat64), std::isnan(special));
        ASSERT_EQ(IsInfBits(p, FloatFormat::kFloat64), std::isinf(special));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isas, ScanTest, ::testing::ValuesIn(kIsas),
                         [](const ::testing::TestParamInfo<ScanIsa>& info) {
                           switch (info.param) {
                             case ScanIsa::kScalar:
                               return "Scalar";
                             case ScanIsa::kAvx2:
                               return "Avx2";
                             case ScanIsa::kAvx512:
                               return "Avx512";
                             default:
                               return "Best";
                           }
                         });

}  // namespace
}  // namespace rbln::torch_backend
