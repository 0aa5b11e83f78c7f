// spec: P3
// linalg_vector_norm (every ord kind, dims, keepdim, dtype=) and dist
// against double-precision references in every float dtype.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
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

double RefNorm(const std::vector<double>& g, double ord) {
  if (ord == 0) {
    double n = 0;
    for (double v : g) n += v != 0;
    return n;
  }
  if (std::isinf(ord)) {
    double acc = ord > 0 ? 0 : kInf;
    for (double v : g) {
      if (std::isnan(v)) return kNan;
      acc = ord > 0 ? std::max(acc, std::fabs(v)) : std::min(acc, std::fabs(v));
    }
    return acc;
  }
  double sum = 0;
  for (double v : g) sum += std::pow(std::fabs(v), ord);
  return std::pow(sum, 1 / ord);
}

// f32 accumulation of n terms, then one rounding to `out`.
std::vector<double> NormTolerance(ir::DType out,
                                  const std::vector<double>& want, int64_t n,
                                  double ord) {
  std::vector<double> tol;
  const bool exact = std::isinf(ord) || ord == 0;
  // The f32 sum's relative error, scaled by the 1/p-th power and pow's own.
  const double f32_error =
      exact ? 0
            : (n + 4) * std::max({1.0, std::fabs(ord), 1 / std::fabs(ord)}) *
                  UnitRoundoff(ir::FLOAT32);
  for (double w : want) {
    tol.push_back(2 * UnitRoundoff(out) * std::fabs(w) +
                  f32_error * std::fabs(w) + 1e-30);
  }
  return tol;
}

TEST(VectorNormOpsTest, EveryOrdMatchesTheReference) {
  struct Case {
    Shape shape;
    std::vector<int> dims;
    bool keepdim;
  };
  const std::vector<Case> cases = {{{5, 5, 5}, {}, false},
                                   {{4, 6}, {1}, false},
                                   {{4, 6}, {0}, true},
                                   {{2, 3, 4}, {0, 2}, false},
                                   {{1000}, {0}, false}};
  for (ir::DType dtype : {ir::FLOAT32, ir::FLOAT16, ir::BFLOAT16}) {
    for (const Case& c : cases) {
      // Some exact zeros for ord 0 and negative ords.
      HostTensor x = Random(dtype, c.shape, 5, -4.0, 4.0);
      for (size_t i = 0; i < x.values.size(); i += 7) x.values[i] = 0;
      const std::vector<bool> reduced = ReducedMask(c.shape, c.dims);
      const Shape out = ReducedShapeOf(c.shape, reduced, c.keepdim);
      const std::vector<std::vector<double>> groups = Groups(x, reduced);
      for (double ord : {2.0, 1.0, 0.0, kInf, -kInf, 3.0, 0.5, -1.5}) {
        Attrs attrs = {{"ord", FloatA(ord)}, {"keepdim", BoolA(c.keepdim)}};
        if (!c.dims.empty()) attrs["dim"] = StrA(absl::StrJoin(c.dims, ","));
        if (ord == 2.0) attrs.erase("ord");  // The default.
        std::vector<double> want;
        for (const auto& g : groups) {
          want.push_back(RoundTo(dtype, RefNorm(g, ord)));
        }
        const std::string what =
            absl::StrCat(DTypeText(dtype), ShapeText(c.shape), " ord=", ord,
                         " dims=", absl::StrJoin(c.dims, ","));
        auto got = CompileAndRun(OneOpGraph("linalg_vector_norm", {x.type()},
                                            {Type(dtype, out)}, attrs),
                                 {x});
        ASSERT_TRUE(got.ok()) << what << ": " << got.status();
        ExpectClose((*got)[0], want,
                    NormTolerance(dtype, want, groups[0].size(), ord), what);
      }
    }
  }
}

// dtype=float32 on half input: the norm in float32, not rounded to half.
TEST(VectorNormOpsTest, DtypeArgumentGivesTheOutputDtype) {
  const HostTensor x = Tensor(ir::FLOAT16, {3}, {60000, 60000, 3});
  auto got = CompileAndRun(
      OneOpGraph("linalg_vector_norm", {x.type()}, {Type(ir::FLOAT32, {})},
                 {{"dtype", StrA("float32")}}),
      {x});
  ASSERT_TRUE(got.ok()) << got.status();
  const double want = std::sqrt(2.0 * 60000 * 60000 + 9);
  ExpectClose((*got)[0], {want}, {want * 1e-6}, "f16 -> f32 norm");
}

TEST(VectorNormOpsTest, NanPropagatesAndEmptyInputs) {
  const HostTensor x = Tensor(ir::FLOAT32, {2, 3}, {1, kNan, 2, 0, 0, 0});
  for (double ord : {2.0, kInf, -kInf, 1.0}) {
    auto got = CompileAndRun(
        OneOpGraph("linalg_vector_norm", {x.type()}, {Type(ir::FLOAT32, {2})},
                   {{"dim", IntA(1)}, {"ord", FloatA(ord)}}),
        {x});
    ASSERT_TRUE(got.ok()) << got.status();
    ExpectExact((*got)[0], {kNan, 0}, absl::StrCat("ord ", ord));
  }
  const HostTensor empty{ir::FLOAT16, {2, 0}, {}};
  auto zero =
      CompileAndRun(OneOpGraph("linalg_vector_norm", {empty.type()},
                               {Type(ir::FLOAT16, {2})}, {{"dim", IntA(1)}}),
                    {empty});
  ASSERT_TRUE(zero.ok()) << zero.status();
  ExpectExact((*zero)[0], {0, 0}, "2-norm of nothing");
  auto inf = CompileAndRun(
      OneOpGraph("linalg_vector_norm", {empty.type()}, {Type(ir::FLOAT16, {2})},
                 {{"dim", IntA(1)}, {"ord", FloatA(kInf)}}),
      {empty});
  ASSERT_FALSE(inf.ok());
  EXPECT_THAT(std::string(inf.status().message()),
              HasSubstr("does not have an identity"));
}

// dist: the broadcast difference is rounded to the dtype before the norm.
TEST(VectorNormOpsTest, DistMatchesTheNormOfTheDifference) {
  for (ir::DType dtype : {ir::FLOAT32, ir::FLOAT16, ir::BFLOAT16}) {
    const HostTensor a = Random(dtype, {4, 5}, 1);
    const HostTensor b = Random(dtype, {5}, 2);
    for (double p : {2.0, 1.0, 4.0, kInf, 0.0}) {
      std::vector<double> diff;
      for (int i = 0; i < 4; ++i) {
        for (int j = 0; j < 5; ++j) {
          diff.push_back(RoundTo(dtype, a.values[i * 5 + j] - b.values[j]));
        }
      }
      const double want = RefNorm(diff, p);
      auto got =
          CompileAndRun(OneOpGraph("dist", {a.type(), b.type()},
                                   {Type(dtype, {})}, {{"p", FloatA(p)}}),
                        {a, b});
      ASSERT_TRUE(got.ok()) << got.status();
      ExpectClose((*got)[0], {want}, NormTolerance(dtype, {want}, 20, p),
                  absl::StrCat("dist ", DTypeText(dtype), " p=", p));
    }
  }
}

}  // namespace
}  // namespace rbln::compiler
