// spec: P3
// var and var_mean against double-precision references: correction,
// keepdim, dim lists, every float dtype, and ATen's edge cases (N <=
// correction, empty reductions).
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rbln/compiler/frontend/ops/reduction_reference.h"
#include "rbln/compiler/testing/op_test_util.h"

namespace rbln::compiler {
namespace {

using ::testing::HasSubstr;
using namespace testing;  // NOLINT: the op test helpers.

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

struct Moments {
  std::vector<double> var, mean;
};

Moments RefMoments(const HostTensor& x, const std::vector<bool>& reduced,
                   double correction) {
  Moments m;
  for (const std::vector<double>& g : Groups(x, reduced)) {
    double sum = 0;
    for (double v : g) sum += v;
    const double mean = sum / g.size();
    double m2 = 0;
    for (double v : g) m2 += (v - mean) * (v - mean);
    const double n = g.size();
    m.var.push_back(m2 / (n > correction ? n - correction : 0.0));
    m.mean.push_back(mean);
  }
  return m;
}

struct Case {
  Shape shape;
  std::vector<int> dims;
  bool keepdim;
  double correction;  // < 0: attr absent (1)
};

Attrs CaseAttrs(const Case& c) {
  Attrs attrs;
  if (c.dims.size() == 1) {
    attrs["dim"] = IntA(c.dims[0]);
  } else if (!c.dims.empty()) {
    attrs["dim"] = StrA(absl::StrJoin(c.dims, ","));
  }
  if (c.keepdim) attrs["keepdim"] = BoolA(true);
  if (c.correction >= 0) attrs["correction"] = FloatA(c.correction);
  return attrs;
}

TEST(MomentOpsTest, VarAndVarMeanMatchTheReference) {
  const std::vector<Case> cases = {
      {{5, 5, 5}, {}, false, -1},     {{5, 5, 5}, {1}, false, 1},
      {{5, 5, 5}, {1}, true, 0},      {{4, 6}, {0, 1}, true, 2.5},
      {{3, 7, 2}, {-1, 0}, false, 1}, {{300}, {0}, false, 1},
  };
  for (ir::DType dtype : {ir::FLOAT32, ir::FLOAT16, ir::BFLOAT16}) {
    for (const Case& c : cases) {
      const HostTensor x = Random(dtype, c.shape, 3, -3.0, 5.0);
      const std::vector<bool> reduced = ReducedMask(c.shape, c.dims);
      const Shape out = ReducedShapeOf(c.shape, reduced, c.keepdim);
      const Moments want =
          RefMoments(x, reduced, c.correction < 0 ? 1 : c.correction);
      const std::string what = DTypeText(dtype) + ShapeText(c.shape) +
                               " dims=" + absl::StrJoin(c.dims, ",");
      // Exact in double, rounded once: within one rounding of the result.
      auto tol = [&](const std::vector<double>& w) {
        std::vector<double> t;
        for (double v : w) {
          t.push_back(1.01 * UnitRoundoff(dtype) * std::fabs(v) + 1e-12);
        }
        return t;
      };
      auto var = CompileAndRun(
          OneOpGraph("var", {x.type()}, {Type(dtype, out)}, CaseAttrs(c)), {x});
      ASSERT_TRUE(var.ok()) << what << ": " << var.status();
      ExpectClose((*var)[0], want.var, tol(want.var), "var " + what);
      auto both = CompileAndRun(
          OneOpGraph("var_mean", {x.type()},
                     {Type(dtype, out), Type(dtype, out)}, CaseAttrs(c)),
          {x});
      ASSERT_TRUE(both.ok()) << what << ": " << both.status();
      ExpectClose((*both)[0], want.var, tol(want.var), "var_mean[0] " + what);
      ExpectClose((*both)[1], want.mean, tol(want.mean), "var_mean[1] " + what);
    }
  }
}

// N <= correction: m2 / 0 (inf, or NaN for a constant row); an empty
// reduction gives NaN for both outputs, as ATen.
TEST(MomentOpsTest, DegenerateCorrectionsAndEmptyReductions) {
  const HostTensor x = Tensor(ir::FLOAT32, {2, 2}, {1, 3, 5, 5});
  auto out =
      CompileAndRun(OneOpGraph("var", {x.type()}, {Type(ir::FLOAT32, {2})},
                               {{"dim", IntA(1)}, {"correction", FloatA(2)}}),
                    {x});
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectExact((*out)[0], {kInf, kNan}, "correction == N");
  const HostTensor one = Tensor(ir::FLOAT16, {1}, {4});
  out = CompileAndRun(OneOpGraph("var", {one.type()}, {Type(ir::FLOAT16, {})}),
                      {one});
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectExact((*out)[0], {kNan}, "one element, correction 1");
  const HostTensor empty{ir::BFLOAT16, {3, 0}, {}};
  out = CompileAndRun(
      OneOpGraph("var_mean", {empty.type()},
                 {Type(ir::BFLOAT16, {3}), Type(ir::BFLOAT16, {3})},
                 {{"dim", IntA(1)}}),
      {empty});
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectExact((*out)[0], {kNan, kNan, kNan}, "empty var");
  ExpectExact((*out)[1], {kNan, kNan, kNan}, "empty mean");
}

// Large offsets: a one-pass E[x^2] - E[x]^2 in f32 would lose the variance.
TEST(MomentOpsTest, TwoPassesKeepSmallVarianceOfLargeValues) {
  std::vector<double> values;
  for (int i = 0; i < 1000; ++i) values.push_back(10000 + (i % 2 ? 0.5 : -0.5));
  const HostTensor x = Tensor(ir::FLOAT32, {1000}, values);
  auto out =
      CompileAndRun(OneOpGraph("var", {x.type()}, {Type(ir::FLOAT32, {})},
                               {{"correction", FloatA(0)}}),
                    {x});
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectClose((*out)[0], {0.25}, {1e-7}, "var of 10000 +- 0.5");
}

TEST(MomentOpsTest, IntegerInputsAreRejectedAsInPyTorch) {
  const HostTensor x = Tensor(ir::INT64, {3}, {1, 2, 3});
  auto out =
      CompileAndRun(OneOpGraph("var", {x.type()}, {Type(ir::INT64, {})}), {x});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(std::string(out.status().message()),
              HasSubstr("std and var only support floating point"));
}

}  // namespace
}  // namespace rbln::compiler
