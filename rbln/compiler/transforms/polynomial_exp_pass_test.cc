// spec: P5, A2
//
// The expanded exp against exp in double over a sample of every float from
// -110 to 90 (and the edges), and the same bits whether an element is
// computed by the vectorized loop body or its scalar remainder.
#include "rbln/compiler/transforms/passes.h"

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Pass/PassManager.h"
#include "rbln/compiler/frontend/frontend.h"
#include "rbln/compiler/pipelines/mlir_setup.h"
#include "rbln/compiler/pipelines/pipelines.h"
#include "rbln/compiler/testing/op_test_util.h"

namespace rbln::compiler {
namespace {

using testing::HostTensor;
using testing::OneOpGraph;
using testing::RunOne;
using testing::Type;

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Distance from the double `want` in units of the last place of its float
// neighbourhood (the smallest subnormal's below FLT_MIN).
double UlpError(float got, double want) {
  int exponent;
  std::frexp(want, &exponent);
  const double ulp = std::max(std::ldexp(1.0, exponent - 24),
                              std::ldexp(1.0, -149));
  return std::fabs(got - want) / ulp;
}

HostTensor Exp(const std::vector<double>& x) {
  const int64_t n = static_cast<int64_t>(x.size());
  ir::Graph g = OneOpGraph("exp", {Type(ir::FLOAT32, {n})},
                           {Type(ir::FLOAT32, {n})});
  return RunOne(g, {HostTensor{ir::FLOAT32, {n}, x}});
}

TEST(PolynomialExpPassTest, NoExpLeftForLibm) {
  auto context = CreateCompilerContext();
  ir::Graph g = OneOpGraph("exp", {Type(ir::FLOAT32, {8})},
                           {Type(ir::FLOAT32, {8})});
  auto module = ImportGraph(g, context.get());
  ASSERT_TRUE(module.ok()) << module.status();
  int exps = 0;
  (*module)->walk([&](mlir::math::ExpOp) { ++exps; });
  ASSERT_EQ(exps, 1);
  mlir::PassManager pm(context.get());
  pm.addNestedPass<mlir::func::FuncOp>(CreatePolynomialExpPass());
  ASSERT_TRUE(mlir::succeeded(pm.run(**module)));
  exps = 0;
  (*module)->walk([&](mlir::math::ExpOp) { ++exps; });
  EXPECT_EQ(exps, 0);
}

TEST(PolynomialExpPassTest, WithinOnePointThreeUlpOfExp) {
  // Every 997th float of [-110, 90] (by bit pattern, both signs).
  std::vector<double> x;
  for (uint32_t u = 0; u <= 0x42B40000u; u += 997) x.push_back(FromBits(u));
  for (uint32_t u = 0x80000000u; u <= 0xC2DC0000u; u += 997) {
    x.push_back(FromBits(u));
  }
  const HostTensor got = Exp(x);
  ASSERT_EQ(got.values.size(), x.size());
  double worst = 0;
  double worst_at = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = std::exp(x[i]);
    const float g = static_cast<float>(got.values[i]);
    if (want >= FLT_MAX) {
      EXPECT_GE(g, FLT_MAX) << "exp(" << x[i] << ")";
      continue;
    }
    const double err = UlpError(g, want);
    if (err > worst) worst = err, worst_at = x[i];
  }
  EXPECT_LE(worst, 1.3) << "at exp(" << worst_at << ")";
}

TEST(PolynomialExpPassTest, EdgesAsExpf) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<double> x = {0.0,    -0.0,    1.0,   -1.0,    kInf,
                           -kInf,  88.72283, 88.7229, 88.8, 1000.0,
                           -87.33, -100.0,  -103.9, -104.5, -1000.0,
                           1e-30,  -1e-30,  0.5};
  for (double& v : x) v = static_cast<float>(v);
  const HostTensor got = Exp(x);
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = std::exp(static_cast<float>(x[i]));
    const float g = static_cast<float>(got.values[i]);
    if (want == 0 || std::isinf(want)) {
      EXPECT_EQ(g, want) << "exp(" << x[i] << ")";
    } else {
      EXPECT_LE(UlpError(g, std::exp(x[i])), 1.3) << "exp(" << x[i] << ")";
    }
  }
  const HostTensor nan = Exp({std::numeric_limits<double>::quiet_NaN()});
  EXPECT_TRUE(std::isnan(nan.values[0]));
}

// LLVM vectorizes the expanded loop; an element's bits must not depend on
// whether the vector body or the scalar remainder computes it (a chiplet
// worker's slice moves that boundary, SPEC A2). Rotating the input by one
// moves every element to another lane and some into the remainder.
TEST(PolynomialExpPassTest, VectorAndScalarCodeAgreeBitForBit) {
  constexpr int n = 1003;
  std::vector<double> x(n);
  for (int i = 0; i < n; ++i) {
    x[i] = static_cast<float>(-90.0 + 180.0 * i / n + 1e-3 * (i % 7));
  }
  std::vector<double> rotated(x.begin() + 1, x.end());
  rotated.push_back(x[0]);
  const HostTensor a = Exp(x);
  const HostTensor b = Exp(rotated);
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(a.values[(i + 1) % n], b.values[i]) << "exp(" << rotated[i] << ")";
  }
}

}  // namespace
}  // namespace rbln::compiler
