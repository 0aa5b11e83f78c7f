// spec: J6, P6
//
// hardtanh, elu and leaky_relu (activation_ops.cc) against double-precision
// references of ATen's formulas (Activation.cpp, Elu.h: coefficients in
// float, expm1 for elu's negative side) rounded to the output dtype.
#include <cmath>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rbln/compiler/frontend/ops/elementwise_test_util.h"

namespace rbln::compiler::testing {
namespace {

using ::testing::HasSubstr;

// hardtanh = clamp(x, min_val, max_val): NaN stays, ties keep x, integer
// bounds truncate (hardtanh of int32 is int32 in PyTorch).
TEST(ActivationOpsTest, Hardtanh) {
  for (ir::DType t : {ir::FLOAT32, ir::FLOAT16, ir::BFLOAT16, ir::INT32,
                      ir::INT64}) {
    for (const auto& [lo, hi] : {std::pair{-1.0, 1.0}, std::pair{0.0, 6.0},
                                 std::pair{-2.3, 3.7}}) {
      const double min = IsFloatDType(t) ? RoundTo(t, lo) : std::trunc(lo);
      const double max = IsFloatDType(t) ? RoundTo(t, hi) : std::trunc(hi);
      Attrs attrs;
      if (lo != -1.0) attrs["min_val"] = FloatA(lo);
      if (hi != 1.0) attrs["max_val"] = FloatA(hi);
      ExpectUnary("hardtanh", t, t, Values(t, -10, 10),
                  [&](const std::vector<double>& x) {
                    if (std::isnan(x[0])) return x[0];
                    return x[0] < min ? min : (x[0] > max ? max : x[0]);
                  },
                  0, attrs);
    }
  }
  EXPECT_THAT(RunStatus("hardtanh", {Type(ir::BOOL, {1})}, Type(ir::BOOL, {1}))
                  .message(),
              HasSubstr("not implemented"));
}

TEST(ActivationOpsTest, Elu) {
  for (ir::DType t : kFloatDTypes) {
    for (const auto& [alpha, scale, input_scale] :
         {std::tuple{1.0, 1.0, 1.0}, std::tuple{1.6732632423543772,
                                                1.0507009873554805, 1.0},
          std::tuple{0.5, 2.0, 1.5}}) {
      const Attrs attrs = {{"alpha", FloatA(alpha)},
                           {"scale", FloatA(scale)},
                           {"input_scale", FloatA(input_scale)}};
      ExpectUnary("elu", t, t, Values(t, -6, 6),
                  [&](const std::vector<double>& x) {
                    const float v = x[0];
                    const float negative = static_cast<float>(alpha) *
                                           static_cast<float>(scale);
                    if (v < 0) {
                      return static_cast<double>(
                          std::expm1(v * static_cast<float>(input_scale)) *
                          negative);
                    }
                    return static_cast<double>(v * static_cast<float>(scale));
                  },
                  t == ir::FLOAT32 ? 2 : 1, attrs);
    }
  }
  EXPECT_THAT(RunStatus("elu", {Type(ir::INT32, {1})}, Type(ir::INT32, {1}))
                  .message(),
              HasSubstr("not implemented"));
}

TEST(ActivationOpsTest, LeakyRelu) {
  for (ir::DType t : kFloatDTypes) {
    for (double slope : {0.01, 0.2, -0.5}) {
      ExpectUnary("leaky_relu", t, t, Values(t, -10, 10),
                  [&](const std::vector<double>& x) {
                    const float v = x[0];
                    return static_cast<double>(
                        v > 0 ? v : v * static_cast<float>(slope));
                  },
                  0, {{"negative_slope", FloatA(slope)}});
    }
  }
}

}  // namespace
}  // namespace rbln::compiler::testing
