// spec: J6, P6
//
// The unary math ops of unary_math_ops.cc, compiled and run on host buffers
// for every input dtype, against double-precision references (<cmath>,
// libstdc++'s std::cyl_bessel_i; special_math.h, checked against mpmath by
// special_math_test, for digamma/polygamma/erfinv) rounded to the output
// dtype. Half outputs are computed in f32 and rounded once, so they match
// within one unit in the last place (the reference rounds from double).
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rbln/compiler/frontend/ops/elementwise_test_util.h"
#include "rbln/compiler/kernels/special_math.h"

namespace rbln::compiler::testing {
namespace {

using ::testing::HasSubstr;

struct FloatFunctionCase {
  std::string op;
  std::function<double(double)> ref;
  double lo, hi;     // where the random inputs are drawn
  double f32_ulps;   // libm's float functions are within ~2 ulps
};

double Sign(double x) { return (0 < x) - (x < 0); }

// e^-|x| I_nu(|x|), nu = 0, 1, with the sign of x for nu = 1; beyond
// |x| = 500 (where I_nu overflows double) its asymptotic series to 1/x^3.
double ScaledBesselI(int nu, double x) {
  if (std::isnan(x)) return x;
  const double a = std::fabs(x);
  double v;
  if (a > 500) {
    const double series =
        nu == 0 ? 1 + 1 / (8 * a) + 9 / (128 * a * a) +
                      225 / (3072 * a * a * a)
                : 1 - 3 / (8 * a) - 15 / (128 * a * a) -
                      315 / (3072 * a * a * a);
    v = std::isinf(a) ? 0.0 : series / std::sqrt(2 * M_PI * a);
  } else {
    v = std::cyl_bessel_i(nu, a) * std::exp(-a);
  }
  return nu == 0 ? v : std::copysign(v, x);
}

// I_nu(x); ATen gives NaN at +-inf.
double BesselI(int nu, double x) {
  if (std::isinf(x)) return kNaN;
  if (std::fabs(x) > 700) return std::copysign(kInf, nu == 0 ? 1.0 : x);
  const double v = std::cyl_bessel_i(nu, std::fabs(x));
  return nu == 0 ? v : std::copysign(v, x);
}

std::vector<FloatFunctionCase> FloatFunctionCases() {
  auto scaled_i = [](int nu) {
    return [nu](double x) { return ScaledBesselI(nu, x); };
  };
  return {
      {"sin", [](double x) { return std::sin(x); }, -10, 10, 2},
      {"cos", [](double x) { return std::cos(x); }, -10, 10, 2},
      {"tan", [](double x) { return std::tan(x); }, -1.5, 1.5, 2},
      {"asin", [](double x) { return std::asin(x); }, -1, 1, 2},
      {"acos", [](double x) { return std::acos(x); }, -1, 1, 2},
      {"atan", [](double x) { return std::atan(x); }, -10, 10, 2},
      {"sinh", [](double x) { return std::sinh(x); }, -10, 10, 2},
      {"cosh", [](double x) { return std::cosh(x); }, -10, 10, 2},
      {"asinh", [](double x) { return std::asinh(x); }, -10, 10, 2},
      {"acosh", [](double x) { return std::acosh(x); }, 1, 10, 2},
      {"atanh", [](double x) { return std::atanh(x); }, -1, 1, 2},
      {"erf", [](double x) { return std::erf(x); }, -3, 3, 2},
      {"erfc", [](double x) { return std::erfc(x); }, -3, 3, 2},
      {"exp2", [](double x) { return std::exp2(x); }, -20, 20, 2},
      {"expm1", [](double x) { return std::expm1(x); }, -1e-3, 1e-3, 2},
      {"log1p", [](double x) { return std::log1p(x); }, -1e-3, 1e-3, 2},
      {"log2", [](double x) { return std::log2(x); }, 0, 100, 2},
      {"log10", [](double x) { return std::log10(x); }, 0, 100, 2},
      // Our lgamma is libm's lgammaf (as ATen's), without its signgam write.
      {"lgamma",
       [](double x) { return std::lgamma(static_cast<float>(x)); }, -5, 10,
       0},
      {"digamma", [](double x) { return rbln_digammaf(x); }, -5, 10, 0},
      {"erfinv", [](double x) { return rbln_erfinvf(x); }, -1, 1, 0},
      {"i0", [](double x) { return BesselI(0, x); }, -20, 20, 4},
      {"special_i0e", scaled_i(0), -40, 40, 4},
      {"special_i1", [](double x) { return BesselI(1, x); }, -20, 20, 4},
      {"special_i1e", scaled_i(1), -40, 40, 4},
      {"reciprocal", [](double x) { return 1 / x; }, -10, 10, 1},
      {"angle",
       [](double x) { return std::isnan(x) ? x : (x < 0 ? M_PI : 0.0); },
       -10, 10, 0},
  };
}

class FloatFunctionTest : public ::testing::TestWithParam<FloatFunctionCase> {};

// Every input dtype: floats keep theirs, integers and bool give float32.
TEST_P(FloatFunctionTest, MatchesReferenceOnEveryDType) {
  const FloatFunctionCase& c = GetParam();
  for (ir::DType t : kAllDTypes) {
    const std::vector<double> values = Values(t, c.lo, c.hi);
    const ir::DType out = FloatResult(t);
    // Half results of an f32 computation: within 1 ulp of the exact value.
    const double ulps = out == ir::FLOAT32 ? c.f32_ulps : 1;
    ExpectUnary(c.op, t, out, values, [&](const std::vector<double>& x) {
      // The kernel computes in f32: its input is the f32 value of x.
      return c.ref(static_cast<float>(x[0]));
    }, ulps);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Ops, FloatFunctionTest, ::testing::ValuesIn(FloatFunctionCases()),
    [](const ::testing::TestParamInfo<FloatFunctionCase>& info) {
      return info.param.op;
    });

// expm1/log1p keep small arguments: MLIR 16's math lowering (exp(x) - 1,
// log(1 + x)) would round 1e-6 away.
TEST(UnaryMathOpsTest, Expm1AndLog1pKeepTinyArguments) {
  for (const std::string op : {"expm1", "log1p"}) {
    ExpectUnary(op, ir::FLOAT32, ir::FLOAT32, {1e-6, -3e-7, 1e-20},
                [&](const std::vector<double>& x) {
                  const float v = static_cast<float>(x[0]);
                  return op == "expm1" ? std::expm1(v) : std::log1p(v);
                },
                1);
  }
}

TEST(UnaryMathOpsTest, PolygammaOfEveryOrder) {
  for (int64_t n : {0, 1, 2, 3, 5}) {
    for (ir::DType t : kAllDTypes) {
      ExpectUnary("polygamma", t, FloatResult(t), Values(t, -4, 6),
                  [n](const std::vector<double>& x) {
                    return rbln_polygammaf(n, static_cast<float>(x[0]));
                  },
                  FloatResult(t) == ir::FLOAT32 ? 0 : 1, {{"n", IntA(n)}});
    }
  }
  EXPECT_THAT(RunStatus("polygamma", {Type(ir::FLOAT32, {1})},
                        Type(ir::FLOAT32, {1}))
                  .message(),
              HasSubstr("needs the attr n"));
  EXPECT_THAT(RunStatus("polygamma", {Type(ir::FLOAT32, {1})},
                        Type(ir::FLOAT32, {1}), {{"n", IntA(-1)}})
                  .message(),
              HasSubstr("negative n"));
}

// sign/sgn: NaN and -0 give +0; integers keep their dtype; bool is itself.
TEST(UnaryMathOpsTest, SignOnEveryDType) {
  for (const std::string op : {"sign", "sgn"}) {
    for (ir::DType t : kAllDTypes) {
      ExpectUnary(op, t, t, Values(t, -5, 5),
                  [t](const std::vector<double>& x) {
                    return t == ir::BOOL ? x[0]
                                         : (std::isnan(x[0]) ? 0 : Sign(x[0]));
                  },
                  0);
    }
  }
}

// trunc and round (ties to even) keep integers; frac is float-only.
TEST(UnaryMathOpsTest, TruncRoundFrac) {
  for (ir::DType t : kAllDTypes) {
    if (t == ir::BOOL) continue;
    const std::vector<double> values = Values(t, -100, 100);
    ExpectUnary("trunc", t, t, values,
                [](const std::vector<double>& x) { return std::trunc(x[0]); },
                0);
    ExpectUnary("round", t, t, values,
                [](const std::vector<double>& x) {
                  return std::nearbyint(x[0]);
                },
                0);
    if (IsFloatDType(t)) {
      ExpectUnary("frac", t, t, values,
                  [](const std::vector<double>& x) {
                    return x[0] - std::trunc(x[0]);
                  },
                  1);
    }
  }
  ExpectUnary("round", ir::FLOAT32, ir::FLOAT32, {0.5, 1.5, 2.5, -0.5, -2.5},
              [](const std::vector<double>& x) {
                return std::nearbyint(x[0]);
              },
              0);
  for (const std::string op : {"frac", "trunc"}) {
    EXPECT_THAT(RunStatus(op, {Type(op == "frac" ? ir::INT32 : ir::BOOL, {1})},
                          Type(op == "frac" ? ir::INT32 : ir::BOOL, {1}))
                    .message(),
                HasSubstr("not implemented"));
  }
}

// round(x, decimals) as ATen's round_decimals: in f32 with 10^|d| as a
// float, nearbyint(x * 10^d) / 10^d (d >= 0) or nearbyint(x / 10^-d) * 10^-d.
TEST(UnaryMathOpsTest, RoundWithDecimals) {
  for (int64_t d : {0, 2, 3, -1, -2}) {
    for (ir::DType t : kFloatDTypes) {
      ExpectUnary("round", t, t, Values(t, -2000, 2000),
                  [d](const std::vector<double>& x) {
                    const float v = static_cast<float>(x[0]);
                    const float p = static_cast<float>(std::pow(10.0, std::abs(d)));
                    if (d < 0) return std::nearbyint(v / p) * p;
                    return std::nearbyint(v * p) / p;
                  },
                  1, {{"decimals", IntA(d)}});
    }
  }
  // PyTorch has no integer round_decimals kernel.
  EXPECT_THAT(RunStatus("round", {Type(ir::INT64, {1})}, Type(ir::INT64, {1}),
                        {{"decimals", IntA(0)}})
                  .message(),
              HasSubstr("not implemented"));
}

TEST(UnaryMathOpsTest, ClassPredicatesOnEveryDType) {
  struct Predicate {
    std::string op;
    std::function<bool(double)> test;
  };
  const Predicate predicates[] = {
      {"isnan", [](double x) { return std::isnan(x); }},
      {"isinf", [](double x) { return std::isinf(x); }},
      {"isfinite", [](double x) { return std::isfinite(x); }},
      {"isposinf", [](double x) { return x == kInf; }},
      {"isneginf", [](double x) { return x == -kInf; }},
      {"signbit", [](double x) { return std::signbit(x); }},
  };
  for (const Predicate& p : predicates) {
    for (ir::DType t : kAllDTypes) {
      ExpectUnary(p.op, t, ir::BOOL, Values(t, -10, 10),
                  [&](const std::vector<double>& x) {
                    return p.test(x[0]) ? 1.0 : 0.0;
                  },
                  0);
    }
  }
}

}  // namespace
}  // namespace rbln::compiler::testing
