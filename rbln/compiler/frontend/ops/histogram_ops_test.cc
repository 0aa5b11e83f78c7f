// spec: P3
// histc against a reference that computes each bin as ATen's kernel does
// (each step rounded to the input dtype), with a static range, the data's
// range, out-of-range elements and NaN.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "rbln/compiler/frontend/ops/reduction_reference.h"
#include "rbln/compiler/testing/op_test_util.h"

namespace rbln::compiler {
namespace {

using namespace testing;  // NOLINT: the op test helpers.

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

std::vector<double> RefHistc(const HostTensor& x, int64_t bins, double lo,
                             double hi) {
  const ir::DType t = x.dtype;
  if (lo == hi && !x.values.empty()) {
    lo = INFINITY;
    hi = -INFINITY;
    for (double v : x.values) {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  }
  if (lo == hi) {
    lo -= 1;
    hi += 1;
  }
  const double left = RoundTo(t, lo), right = RoundTo(t, hi);
  std::vector<double> hist(bins, 0);
  for (double e : x.values) {
    if (!(e >= left && e <= right)) continue;
    double v = RoundTo(t, e - left);
    v = RoundTo(t, v * RoundTo(t, bins));
    v = RoundTo(t, v / RoundTo(t, right - left));
    int64_t pos = static_cast<int64_t>(v);
    if (pos == bins) pos -= 1;
    hist[pos] = RoundTo(t, hist[pos] + 1);
  }
  return hist;
}

TEST(HistogramOpsTest, HistcMatchesAtensBinning) {
  for (ir::DType dtype : {ir::FLOAT32, ir::FLOAT16, ir::BFLOAT16}) {
    HostTensor x = Random(dtype, {10, 20}, 7, -1.0, 11.0);
    x.values[3] = kNan;
    x.values[4] = 10;  // the right edge: last bin
    x.values[5] = 0;
    for (int64_t bins : {1, 3, 7, 100}) {
      for (auto [lo, hi] : std::vector<std::pair<double, double>>{
               {0, 10}, {0, 0}, {2.5, 2.5}}) {
        HostTensor in = x;
        if (lo == hi) {
          // The data's range: no NaN then (ATen raises on it).
          in.values[3] = 1;
        }
        const std::string what = absl::StrCat(DTypeText(dtype), " bins=", bins,
                                              " range=[", lo, ", ", hi, "]");
        auto got = CompileAndRun(
            OneOpGraph("histc", {in.type()}, {Type(dtype, {bins})},
                       {{"bins", IntA(bins)},
                        {"min", FloatA(lo)},
                        {"max", FloatA(hi)}}),
            {in});
        ASSERT_TRUE(got.ok()) << what << ": " << got.status();
        ExpectExact((*got)[0], RefHistc(in, bins, lo, hi), what);
      }
    }
  }
}

// Counts accumulate in the output dtype, as ATen: bf16 stops at 256.
TEST(HistogramOpsTest, CountsRoundInTheDtype) {
  const HostTensor x{ir::BFLOAT16, {300}, std::vector<double>(300, 0.5)};
  auto got = CompileAndRun(
      OneOpGraph("histc", {x.type()}, {Type(ir::BFLOAT16, {2})},
                 {{"bins", IntA(2)}, {"min", FloatA(0)}, {"max", FloatA(1)}}),
      {x});
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectExact((*got)[0], RefHistc(x, 2, 0, 1), "300 counts in bf16");
}

}  // namespace
}  // namespace rbln::compiler
