// spec: J6, P6, P8
//
// The binary math ops of binary_math_ops.cc and the scalar-operand forms of
// binary ops (elementwise_util.h), compiled and run on host buffers, against
// double-precision references rounded to the output dtype, over all pairs of
// edge values (inf, NaN, -0, ...) and random values, for every dtype PyTorch
// accepts; the error cases PyTorch raises are errors.
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rbln/compiler/frontend/ops/elementwise_test_util.h"
#include "rbln/compiler/kernels/special_math.h"

namespace rbln::compiler::testing {
namespace {

using ::testing::HasSubstr;

using Binary = std::function<double(double, double)>;
Reference Of(Binary f) {
  return [f](const std::vector<double>& v) { return f(v[0], v[1]); };
}
// The reference on the operands' f32 values, as the kernels compute.
Reference OfF32(std::function<float(float, float)> f) {
  return [f](const std::vector<double>& v) {
    return f(static_cast<float>(v[0]), static_cast<float>(v[1]));
  };
}

double IntRemainder(double a, double b) {
  const int64_t x = a, y = b;
  if (y == -1) return 0;
  const int64_t r = x % y;
  return (r != 0 && (r < 0) != (y < 0)) ? r + y : r;
}

float FloatRemainder(float a, float b) {
  float mod = std::fmod(a, b);
  if (mod != 0 && (b < 0) != (mod < 0)) mod += b;
  return mod;
}

std::vector<double> NonZero(const std::vector<double>& v) {
  std::vector<double> out;
  for (double x : v) {
    if (x != 0) out.push_back(x);
  }
  return out;
}

TEST(BinaryMathOpsTest, RemainderAndFmod) {
  for (ir::DType t : {ir::FLOAT32, ir::FLOAT16, ir::BFLOAT16}) {
    const std::vector<double> v = Values(t, -50, 50, 16);
    ExpectBinary("remainder", t, t, t, v, v, OfF32(&FloatRemainder), 0);
    ExpectBinary("fmod", t, t, t, v, v,
                 OfF32([](float a, float b) { return std::fmod(a, b); }), 0);
  }
  for (ir::DType t : {ir::INT32, ir::INT64}) {
    const double min = t == ir::INT32 ? std::numeric_limits<int32_t>::min()
                                      : -9.2233720368547758e18;
    std::vector<double> a = Values(t, -1000, 1000, 16);
    a.push_back(min);
    const std::vector<double> b = NonZero(Values(t, -30, 30, 16));
    ExpectBinary("remainder", t, t, t, a, b, Of(&IntRemainder), 0);
    ExpectBinary("fmod", t, t, t, a, b,
                 Of([](double x, double y) -> double {
                   return y == -1 ? 0 : static_cast<int64_t>(x) %
                                            static_cast<int64_t>(y);
                 }),
                 0);
  }
}

// ATen raises ZeroDivisionError for an integer divisor 0; the kernel
// reports it (and never traps), also for a scalar divisor.
TEST(BinaryMathOpsTest, IntegerRemainderByZeroRaises) {
  for (const std::string op : {"remainder", "fmod"}) {
    HostTensor x = Tensor(ir::INT32, {3}, {5, 6, 7});
    HostTensor y = Tensor(ir::INT32, {3}, {2, 0, 3});
    auto out = CompileAndRun(
        OneOpGraph(op, {x.type(), y.type()}, {Type(ir::INT32, {3})}), {x, y});
    ASSERT_FALSE(out.ok()) << op;
    EXPECT_THAT(out.status().message(), HasSubstr("ZeroDivisionError")) << op;
    auto scalar = CompileAndRun(
        OneOpGraph(op, {x.type()}, {Type(ir::INT32, {3})},
                   {{"other", IntA(0)}}),
        {x});
    ASSERT_FALSE(scalar.ok()) << op;
    EXPECT_THAT(scalar.status().message(), HasSubstr("ZeroDivisionError"));
  }
}

TEST(BinaryMathOpsTest, BoolRemainderIsNotImplemented) {
  EXPECT_THAT(RunStatus("remainder", {Type(ir::BOOL, {1}), Type(ir::BOOL, {1})},
                        Type(ir::BOOL, {1}))
                  .message(),
              HasSubstr("not implemented"));
}

// A scalar operand on either side ("self" first, "other" second), rounded
// to the tensor's dtype as PyTorch casts a wrapped scalar; ints promote a
// bool tensor, floats an integer one.
TEST(BinaryMathOpsTest, ScalarOperandsOnEitherSide) {
  const std::vector<double> v = {1.1, -2.7, 100.3, 0.25, -0.0};
  for (ir::DType t : {ir::FLOAT32, ir::FLOAT16, ir::BFLOAT16}) {
    HostTensor x = Tensor(t, {5}, v);
    const float s = RoundTo(t, 0.3);
    ExpectMatchesReference(
        OneOpGraph("remainder", {x.type()}, {Type(t, {5})},
                   {{"other", FloatA(0.3)}}),
        {x}, [&](const std::vector<double>& a) {
          return FloatRemainder(a[0], s);
        },
        0, "remainder(x, 0.3)");
    const float r = RoundTo(t, 2.3);
    ExpectMatchesReference(
        OneOpGraph("remainder", {x.type()}, {Type(t, {5})},
                   {{"self", FloatA(2.3)}}),
        {x}, [&](const std::vector<double>& a) {
          return FloatRemainder(r, a[0]);
        },
        0, "remainder(2.3, x)");
    // rsub(x, 1) reaches the compiler as sub(1, x).
    ExpectMatchesReference(
        OneOpGraph("sub", {x.type()}, {Type(t, {5})}, {{"self", IntA(1)}}),
        {x}, [](const std::vector<double>& a) { return 1 - a[0]; }, 0,
        "sub(1, x)");
    // pow's Scalar exponent arrives as "exponent" (x ** 3.0, square).
    ExpectMatchesReference(
        OneOpGraph("pow", {x.type()}, {Type(t, {5})},
                   {{"exponent", FloatA(3.0)}}),
        {x}, [&](const std::vector<double>& a) {
          const float f = a[0];
          return t == ir::FLOAT16 ? std::pow(f, 3.0f) : f * f * f;
        },
        0, "pow(x, 3.0)");
    ExpectMatchesReference(
        OneOpGraph("pow", {x.type()}, {Type(t, {5})}, {{"self", FloatA(2.0)}}),
        {x}, [](const std::vector<double>& a) {
          return std::pow(2.0f, static_cast<float>(a[0]));
        },
        1, "pow(2.0, x)");
  }
  HostTensor i = Tensor(ir::INT64, {4}, {5, -7, 3, 12});
  ExpectMatchesReference(
      OneOpGraph("remainder", {i.type()}, {Type(ir::INT64, {4})},
                 {{"self", IntA(17)}}),
      {i}, [](const std::vector<double>& a) { return IntRemainder(17, a[0]); },
      0, "remainder(17, int64)");
  // An int tensor with a float scalar computes in float32.
  ExpectMatchesReference(
      OneOpGraph("remainder", {i.type()}, {Type(ir::FLOAT32, {4})},
                 {{"other", FloatA(2.5)}}),
      {i}, [](const std::vector<double>& a) {
        return FloatRemainder(a[0], 2.5f);
      },
      0, "remainder(int64, 2.5)");
  EXPECT_THAT(
      RunStatus("sub", {Type(ir::FLOAT32, {1})}, Type(ir::FLOAT32, {1}),
                {{"self", IntA(1)}, {"other", IntA(2)}})
          .message(),
      HasSubstr("one of them must be a tensor input"));
}

TEST(BinaryMathOpsTest, FloatingFunctionsOfTwoArguments) {
  struct Case {
    std::string op;
    std::function<float(float, float)> f;
    bool integers;  // also takes integer/bool operands (computing in f32)
    double f32_ulps;
  };
  const Case cases[] = {
      {"atan2", [](float y, float x) { return std::atan2(y, x); }, true, 2},
      {"copysign", [](float a, float b) { return std::copysign(a, b); }, true,
       0},
      {"hypot", [](float a, float b) { return std::hypot(a, b); }, false, 1},
      {"special_zeta", [](float s, float q) { return rbln_zetaf(s, q); }, true,
       0},
      {"igamma", [](float a, float x) { return rbln_igammaf(a, x); }, false,
       0},
      {"igammac", [](float a, float x) { return rbln_igammacf(a, x); }, false,
       0},
  };
  for (const Case& c : cases) {
    for (ir::DType t : kAllDTypes) {
      const bool accepted = IsFloatDType(t) || c.integers;
      if (!accepted) {
        EXPECT_THAT(RunStatus(c.op, {Type(t, {1}), Type(t, {1})},
                              Type(FloatResult(t), {1}))
                        .message(),
                    HasSubstr("not implemented"))
            << c.op << " " << ir::DType_Name(t);
        continue;
      }
      const std::vector<double> v = Values(t, -5, 5, 12);
      const ir::DType out = FloatResult(t);
      ExpectBinary(c.op, t, t, out, v, v, OfF32(c.f),
                   out == ir::FLOAT32 ? c.f32_ulps : 1);
    }
  }
}

// fmax/fmin ignore a NaN operand and keep x on ties (fmax(-0, +0) = -0), as
// torch 2.13; integers and bool take max/min.
TEST(BinaryMathOpsTest, FmaxFmin) {
  for (ir::DType t : kAllDTypes) {
    const std::vector<double> v = Values(t, -5, 5, 8);
    for (bool max : {true, false}) {
      ExpectBinary(max ? "fmax" : "fmin", t, t, t, v, v,
                   Of([max](double a, double b) {
                     if (std::isnan(a)) return b;
                     if (std::isnan(b)) return a;
                     return max ? (a < b ? b : a) : (a > b ? b : a);
                   }),
                   0);
    }
  }
}

// nextafter: f32 by libm; half types step their own bits (torch 2.13:
// f16 nextafter(-0, 1) = 2^-24, nextafter(inf, 0) = 65504).
TEST(BinaryMathOpsTest, NextAfter) {
  ExpectBinary("nextafter", ir::FLOAT32, ir::FLOAT32, ir::FLOAT32,
               Values(ir::FLOAT32, -3, 3, 6), Values(ir::FLOAT32, -3, 3, 6),
               OfF32([](float a, float b) { return std::nextafter(a, b); }),
               0);
  const std::vector<std::vector<double>> f16_cases = {
      // x, y, nextafter(x, y)
      {0.0, -1.0, -std::ldexp(1.0, -24)}, {-0.0, 1.0, std::ldexp(1.0, -24)},
      {1.0, 2.0, 1.0009765625},           {kInf, 0.0, 65504.0},
      {65504.0, kInf, kInf},              {0.0, 0.0, 0.0},
      {96.0625, -71.1875, 96.0},          {-1.0, -2.0, -1.0009765625},
      {1.0, kNaN, kNaN},                  {kNaN, 1.0, kNaN},
  };
  const std::vector<std::vector<double>> bf16_cases = {
      {0.0, 1.0, std::ldexp(1.0, -133)},
      {-11.3125, 62.0, -11.25},
      {1.0, 0.0, 0.99609375},
      {2.796875, 1.625, 2.78125},
  };
  for (const auto& [t, cases] :
       {std::pair{ir::FLOAT16, f16_cases}, std::pair{ir::BFLOAT16, bf16_cases}}) {
    std::vector<double> x, y, want;
    for (const auto& c : cases) {
      x.push_back(c[0]);
      y.push_back(c[1]);
      want.push_back(c[2]);
    }
    const Shape shape = {static_cast<int64_t>(x.size())};
    HostTensor a = Tensor(t, shape, x), b = Tensor(t, shape, y);
    auto out = CompileAndRun(
        OneOpGraph("nextafter", {a.type(), b.type()}, {Type(t, shape)}),
        {a, b});
    ASSERT_TRUE(out.ok()) << out.status();
    ExpectExact((*out)[0], want, "nextafter " + ir::DType_Name(t));
  }
}

// ldexp(x, e) = x * pow(2, e), the power in e's floating dtype, else in x's
// (float32 for integer x); torch 2.13 gives f16 ldexp(3, -30) = 0 (2^-30
// underflows in f16) but f32 for an f32 exponent.
TEST(BinaryMathOpsTest, Ldexp) {
  struct Case {
    ir::DType x, e, out, power;
  };
  const Case cases[] = {
      {ir::FLOAT16, ir::INT64, ir::FLOAT16, ir::FLOAT16},
      {ir::FLOAT16, ir::FLOAT16, ir::FLOAT16, ir::FLOAT16},
      {ir::FLOAT16, ir::FLOAT32, ir::FLOAT32, ir::FLOAT32},
      {ir::FLOAT32, ir::FLOAT16, ir::FLOAT32, ir::FLOAT16},
      {ir::INT32, ir::INT32, ir::FLOAT32, ir::FLOAT32},
      {ir::BFLOAT16, ir::FLOAT16, ir::FLOAT32, ir::FLOAT16},
      {ir::BOOL, ir::BOOL, ir::FLOAT32, ir::FLOAT32},
      {ir::FLOAT32, ir::INT32, ir::FLOAT32, ir::FLOAT32},
  };
  for (const Case& c : cases) {
    const std::vector<double> x = Values(c.x, -10, 10, 4);
    std::vector<double> e = {-30, -2, 0, 1, 3, 16, 130};
    if (IsFloatDType(c.e)) e.insert(e.end(), {0.5, -2.5, 2.7});
    if (c.e == ir::BOOL) e = {0, 1};
    for (double& v : e) v = RoundTo(c.e, v);
    ExpectBinary("ldexp", c.x, c.e, c.out, x, e,
                 Of([&](double a, double b) {
                   const double power = RoundTo(
                       c.power, std::pow(2.0f, static_cast<float>(b)));
                   return static_cast<double>(static_cast<float>(a)) * power;
                 }),
                 0);
  }
}

TEST(BinaryMathOpsTest, FrexpHasTwoOutputs) {
  for (ir::DType t : kFloatDTypes) {
    std::vector<double> v = Values(t, -1000, 1000, 16);
    v.push_back(RoundTo(t, 6e-8));
    if (t == ir::FLOAT32) v.push_back(1e-40);  // an f32 subnormal
    const Shape shape = {static_cast<int64_t>(v.size())};
    HostTensor x = Tensor(t, shape, v);
    ir::Graph g = OneOpGraph("frexp", {x.type()},
                             {Type(t, shape), Type(ir::INT32, shape)});
    auto mantissa = [](double a) {
      int e;
      return std::isfinite(a) ? std::frexp(a, &e) : a;
    };
    auto exponent = [](double a) {
      int e = 0;
      if (std::isfinite(a)) std::frexp(a, &e);
      return static_cast<double>(e);
    };
    ExpectMatchesReference(
        g, {x}, [&](const std::vector<double>& a) { return mantissa(a[0]); },
        0, "frexp mantissa " + ir::DType_Name(t), 0);
    ExpectMatchesReference(
        g, {x}, [&](const std::vector<double>& a) { return exponent(a[0]); },
        0, "frexp exponent " + ir::DType_Name(t), 1);
  }
  EXPECT_THAT(RunStatus("frexp", {Type(ir::INT32, {1})}, Type(ir::INT32, {1}))
                  .message(),
              HasSubstr("takes 1 input(s) and 2 output(s)"));
}

TEST(BinaryMathOpsTest, BitwiseAndLogicalXor) {
  for (ir::DType t : {ir::INT32, ir::INT64, ir::BOOL}) {
    std::vector<double> v = Values(t, -1000, 1000, 8);
    if (t == ir::INT32) v.push_back(std::numeric_limits<int32_t>::min());
    auto bits = [](double a) { return static_cast<int64_t>(a); };
    ExpectBinary("bitwise_and", t, t, t, v, v,
                 Of([&](double a, double b) { return bits(a) & bits(b); }), 0);
    ExpectBinary("bitwise_or", t, t, t, v, v,
                 Of([&](double a, double b) { return bits(a) | bits(b); }), 0);
    ExpectBinary("bitwise_xor", t, t, t, v, v,
                 Of([&](double a, double b) { return bits(a) ^ bits(b); }), 0);
    ExpectUnary("bitwise_not", t, t, v, [&](const std::vector<double>& a) {
      return t == ir::BOOL ? 1 - a[0] : ~bits(a[0]);
    }, 0);
  }
  for (ir::DType t : kAllDTypes) {
    const std::vector<double> v = Values(t, -3, 3, 4);
    ExpectBinary("logical_xor", t, t, ir::BOOL, v, v,
                 Of([](double a, double b) {
                   return static_cast<double>((a != 0) != (b != 0));
                 }),
                 0);
  }
  EXPECT_THAT(RunStatus("bitwise_and",
                        {Type(ir::FLOAT32, {1}), Type(ir::FLOAT32, {1})},
                        Type(ir::FLOAT32, {1}))
                  .message(),
              HasSubstr("not implemented"));
}

// torch 2.13: a count outside [0, bits) shifts everything out: 0 to the
// left, the sign to the right; left shifts wrap.
TEST(BinaryMathOpsTest, Shifts) {
  for (ir::DType t : {ir::INT32, ir::INT64}) {
    const int bits = t == ir::INT32 ? 32 : 64;
    const std::vector<double> x = {5, -5, 7, -7, 2147483647, -2147483648.0};
    const std::vector<double> n = {0, 1, 31, 32, 33, -1, 63, 64};
    ExpectBinary("bitwise_left_shift", t, t, t, x, n,
                 Of([&](double a, double b) -> double {
                   if (b < 0 || b >= bits) return 0;
                   const uint64_t u = static_cast<int64_t>(a);
                   const uint64_t r = u << static_cast<int>(b);
                   return t == ir::INT32 ? static_cast<int32_t>(r)
                                         : static_cast<int64_t>(r);
                 }),
                 0);
    ExpectBinary("bitwise_right_shift", t, t, t, x, n,
                 Of([&](double a, double b) -> double {
                   const int64_t v = static_cast<int64_t>(a);
                   if (b < 0 || b >= bits) return v < 0 ? -1 : 0;
                   return v >> static_cast<int>(b);
                 }),
                 0);
  }
}

}  // namespace
}  // namespace rbln::compiler::testing
