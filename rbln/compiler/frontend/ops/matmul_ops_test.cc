// spec: P3, P5
// The matmul family against a double-precision reference with PyTorch's
// shape rules (1-D operands, batch broadcasting), through the full pipeline
// (BLAS when available) and, for f32, through loops only.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "rbln/compiler/frontend/frontend.h"
#include "rbln/compiler/pipelines/mlir_setup.h"
#include "rbln/compiler/pipelines/pipelines.h"
#include "rbln/compiler/testing/op_test_util.h"

namespace rbln::compiler {
namespace {

using ::testing::HasSubstr;
using namespace testing;  // NOLINT: the op test helpers.

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
const ir::DType kFloatTypes[] = {ir::FLOAT32, ir::FLOAT16, ir::BFLOAT16};

// a @ b (b^T when `b_transposed`) in double, with |a| @ |b| for tolerances.
struct Ref {
  Shape shape;
  std::vector<double> values, abs;
  int64_t k = 0;
};

Ref RefMatmul(const HostTensor& a, const HostTensor& b, bool b_transposed) {
  Shape as = a.shape, bs = b.shape;
  const bool a1 = as.size() == 1, b1 = bs.size() == 1;
  if (a1) as.insert(as.begin(), 1);
  if (b1) bs.push_back(1);
  if (b_transposed) std::swap(bs[bs.size() - 1], bs[bs.size() - 2]);
  const int64_t m = as[as.size() - 2], k = as.back(), n = bs.back();
  const size_t batch_rank = std::max(as.size(), bs.size()) - 2;
  Shape batch(batch_rank);
  auto dim = [&](const Shape& s, size_t i) -> int64_t {  // i-th batch dim
    const size_t lead = batch_rank - (s.size() - 2);
    return i < lead ? 1 : s[i - lead];
  };
  for (size_t i = 0; i < batch_rank; ++i) {
    batch[i] = std::max(dim(as, i), dim(bs, i));
  }
  Ref r;
  r.k = k;
  r.shape = batch;
  if (!a1) r.shape.push_back(m);
  if (!b1) r.shape.push_back(n);
  const int64_t count = NumElements(batch);
  for (int64_t bi = 0; bi < count; ++bi) {
    // Offsets of this batch in a and b, broadcasting size-1 dims.
    int64_t rest = bi, a_off = 0, b_off = 0, a_scale = m * k, b_scale = k * n;
    for (int i = static_cast<int>(batch_rank) - 1; i >= 0; --i) {
      const int64_t idx = rest % batch[i];
      rest /= batch[i];
      const int64_t ad = dim(as, i), bd = dim(bs, i);
      a_off += (ad == 1 ? 0 : idx) * a_scale;
      b_off += (bd == 1 ? 0 : idx) * b_scale;
      a_scale *= ad;
      b_scale *= bd;
    }
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0, abs = 0;
        for (int64_t p = 0; p < k; ++p) {
          const double x = a.values[a_off + i * k + p];
          const double y = b_transposed ? b.values[b_off + j * k + p]
                                        : b.values[b_off + p * n + j];
          sum += x * y;
          abs += std::fabs(x * y);
        }
        r.values.push_back(sum);
        r.abs.push_back(abs);
      }
    }
  }
  return r;
}

// One ulp of the output plus f32 accumulation error over k products.
std::vector<double> Tolerance(ir::DType out, const std::vector<double>& want,
                              const std::vector<double>& abs, int64_t k) {
  std::vector<double> tol;
  for (size_t i = 0; i < want.size(); ++i) {
    tol.push_back(2 * UnitRoundoff(out) * std::fabs(want[i]) +
                  (k + 2) * UnitRoundoff(ir::FLOAT32) * abs[i] + 1e-30);
  }
  return tol;
}

// The full pipeline without the BLAS stage.
std::vector<Stage> LoopStages() {
  std::vector<Stage> stages = FusionStages();
  for (const auto* part : {&BufferizationStages(), &LoweringStages()}) {
    stages.insert(stages.end(), part->begin(), part->end());
  }
  return stages;
}

// Runs `graph` through the full pipeline and, for f32, through loops only
// (no BLAS stage); checks both against `want`.
void ExpectBothPaths(const ir::Graph& graph,
                     const std::vector<HostTensor>& inputs,
                     const std::vector<double>& want,
                     const std::vector<double>& tol, const std::string& what) {
  auto out = CompileAndRun(graph, inputs);
  ASSERT_TRUE(out.ok()) << what << ": " << out.status();
  ExpectClose((*out)[0], want, tol, what);
  if (inputs[0].dtype != ir::FLOAT32) return;
  auto context = CreateCompilerContext();
  auto program = CompileWith(graph, LoopStages(), context.get());
  ASSERT_TRUE(program.ok()) << what << ": " << program.status();
  auto loops = RunProgram(**program, inputs);
  ASSERT_TRUE(loops.ok()) << loops.status();
  ExpectClose((*loops)[0], want, tol, what + " (loops)");
}

TEST(MatmulOpsTest, MatmulMatchesTheReference) {
  struct Case {
    Shape a, b;
  };
  const std::vector<Case> cases = {
      {{2, 3}, {3, 4}},
      {{5}, {5}},
      {{5}, {5, 3}},
      {{4, 5}, {5}},
      {{2, 3, 4}, {4, 5}},
      {{2, 3, 4}, {2, 4, 5}},
      {{2, 1, 3, 4}, {5, 4, 2}},
      {{3, 4}, {2, 4, 5}},
      {{5}, {2, 5, 3}},
      {{2, 3, 5}, {5}},
      {{2, 0}, {0, 3}},
      {{0, 3}, {3, 2}},
      {{17, 33}, {33, 9}},
  };
  for (ir::DType dtype : kFloatTypes) {
    for (const Case& c : cases) {
      const HostTensor a = Random(dtype, c.a, 1), b = Random(dtype, c.b, 2);
      const Ref ref = RefMatmul(a, b, false);
      const std::string what = "matmul " + DTypeText(dtype) + ShapeText(c.a) +
                               " @ " + ShapeText(c.b);
      ExpectBothPaths(
          OneOpGraph("matmul", {a.type(), b.type()}, {Type(dtype, ref.shape)}),
          {a, b}, ref.values, Tolerance(dtype, ref.values, ref.abs, ref.k),
          what);
    }
  }
}

TEST(MatmulOpsTest, MmAndBmm) {
  for (ir::DType dtype : kFloatTypes) {
    const HostTensor a = Random(dtype, {3, 4}, 3), b = Random(dtype, {4, 2}, 4);
    Ref ref = RefMatmul(a, b, false);
    ExpectBothPaths(
        OneOpGraph("mm", {a.type(), b.type()}, {Type(dtype, {3, 2})}), {a, b},
        ref.values, Tolerance(dtype, ref.values, ref.abs, ref.k), "mm");
    const HostTensor x = Random(dtype, {3, 2, 5}, 5),
                     y = Random(dtype, {3, 5, 4}, 6);
    ref = RefMatmul(x, y, false);
    ExpectBothPaths(
        OneOpGraph("bmm", {x.type(), y.type()}, {Type(dtype, {3, 2, 4})}),
        {x, y}, ref.values, Tolerance(dtype, ref.values, ref.abs, ref.k),
        "bmm");
  }
}

TEST(MatmulOpsTest, IntegerMatmulIsExact) {
  const HostTensor a = Random(ir::INT32, {2, 3, 4}, 7, -100, 100);
  const HostTensor b = Random(ir::INT32, {4, 5}, 8, -100, 100);
  auto out = CompileAndRun(
      OneOpGraph("matmul", {a.type(), b.type()}, {Type(ir::INT32, {2, 3, 5})}),
      {a, b});
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectExact((*out)[0], RefMatmul(a, b, false).values, "int32");
}

TEST(MatmulOpsTest, AddmmAppliesAlphaAndBeta) {
  struct Case {
    Shape bias;
    double alpha, beta;
  };
  for (ir::DType dtype : kFloatTypes) {
    for (const Case& c : std::vector<Case>{
             {{4}, 1, 1}, {{3, 4}, 2, 0.5}, {{1}, -1, 3}, {{3, 1}, 0.5, 1}}) {
      const HostTensor bias = Random(dtype, c.bias, 9);
      const HostTensor a = Random(dtype, {3, 6}, 10),
                       b = Random(dtype, {6, 4}, 11);
      const Ref ref = RefMatmul(a, b, false);
      std::vector<double> want, abs;
      for (int64_t i = 0; i < 12; ++i) {
        const int64_t r = i / 4, col = i % 4;
        double bv;
        if (c.bias.size() == 1) {
          bv = bias.values[c.bias[0] == 1 ? 0 : col];
        } else {
          bv = bias.values[c.bias[1] == 1 ? r : r * 4 + col];
        }
        want.push_back(c.alpha * ref.values[i] + c.beta * bv);
        abs.push_back(std::fabs(c.alpha) * ref.abs[i] + std::fabs(c.beta * bv));
      }
      const std::string what = "addmm " + DTypeText(dtype) + ShapeText(c.bias);
      ExpectBothPaths(
          OneOpGraph("addmm", {bias.type(), a.type(), b.type()},
                     {Type(dtype, {3, 4})},
                     {{"alpha", FloatA(c.alpha)}, {"beta", FloatA(c.beta)}}),
          {bias, a, b}, want, Tolerance(dtype, want, abs, ref.k), what);
    }
  }
}

// alpha = 0 and beta = 0 with inf and NaN in the operands, as torch 2.13 CPU
// prints them: beta = 0 ignores the bias in every dtype; alpha = 0 ignores
// the product on float32 and integers (ATen's gemm has BLAS semantics), but
// ATen's half kernels compute 0 * product, so inf or NaN there give NaN.
TEST(MatmulOpsTest, AddmmWithZeroAlphaOrBetaAsATen) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  for (ir::DType dtype : {ir::FLOAT32, ir::FLOAT16, ir::BFLOAT16}) {
    const bool half = dtype != ir::FLOAT32;
    const HostTensor bias = Tensor(dtype, {2, 2}, {1, kNan, kInf, 2});
    const HostTensor a = Tensor(dtype, {2, 2}, {kInf, 1, 1, kNan});
    const HostTensor b = Tensor(dtype, {2, 2}, {1, 1, 1, 1});
    struct Case {
      double alpha, beta;
      std::vector<double> want;
    };
    const std::vector<Case> cases = {
        {0, 1, half ? std::vector<double>{kNan, kNan, kNan, kNan}
                    : std::vector<double>{1, kNan, kInf, 2}},
        {1, 0, {kInf, kInf, kNan, kNan}},
        {0, 0, half ? std::vector<double>{kNan, kNan, kNan, kNan}
                    : std::vector<double>{0, 0, 0, 0}},
        {0, 2, half ? std::vector<double>{kNan, kNan, kNan, kNan}
                    : std::vector<double>{2, kNan, kInf, 4}},
    };
    for (const Case& c : cases) {
      const std::string what = "addmm " + DTypeText(dtype) + " alpha=" +
                               std::to_string(c.alpha) +
                               " beta=" + std::to_string(c.beta);
      ExpectBothPaths(
          OneOpGraph("addmm", {bias.type(), a.type(), b.type()},
                     {Type(dtype, {2, 2})},
                     {{"alpha", FloatA(c.alpha)}, {"beta", FloatA(c.beta)}}),
          {bias, a, b}, c.want, std::vector<double>(4, 0.0), what);
    }
  }
  // Finite operands: alpha = 0 leaves beta * bias in every dtype.
  for (ir::DType dtype : {ir::FLOAT32, ir::FLOAT16, ir::BFLOAT16, ir::INT32,
                          ir::INT64}) {
    const HostTensor bias = Tensor(dtype, {2, 1}, {3, -5});
    const HostTensor a = Tensor(dtype, {2, 3}, {1, 2, 3, 4, 5, 6});
    const HostTensor b = Tensor(dtype, {3, 2}, {1, 0, 0, 1, 1, 1});
    ExpectBothPaths(
        OneOpGraph("addmm", {bias.type(), a.type(), b.type()},
                   {Type(dtype, {2, 2})},
                   {{"alpha", FloatA(0)}, {"beta", FloatA(2)}}),
        {bias, a, b}, {6, 6, -10, -10}, std::vector<double>(4, 0.0),
        "addmm alpha=0 " + DTypeText(dtype));
  }
}

// Half types accumulate in f32 and round once: a row of 4096 ones times a
// column of ones is 4096 (an f16 accumulator stops at 2048, bf16 at 256),
// and 4097 ones give 4096 in f16 (4097 rounded once) -- on both paths.
TEST(MatmulOpsTest, HalfProductsAccumulateInF32) {
  for (ir::DType dtype : {ir::FLOAT16, ir::BFLOAT16}) {
    for (int64_t k : {4096, 4097}) {
      const HostTensor a{dtype, {2, k}, std::vector<double>(2 * k, 1.0)};
      const HostTensor b{dtype, {k, 3}, std::vector<double>(k * 3, 1.0)};
      const double want = RoundTo(dtype, static_cast<double>(k));
      ExpectBothPaths(
          OneOpGraph("mm", {a.type(), b.type()}, {Type(dtype, {2, 3})}),
          {a, b}, std::vector<double>(6, want), std::vector<double>(6, 0.0),
          "mm " + DTypeText(dtype) + " k=" + std::to_string(k));
    }
  }
}

// beta = 0 ignores the bias, NaN included (PyTorch).
TEST(MatmulOpsTest, AddmmWithBetaZeroIgnoresNanBias) {
  const HostTensor bias = Tensor(ir::FLOAT32, {2}, {kNan, 1});
  const HostTensor a = Random(ir::FLOAT32, {2, 3}, 12),
                   b = Random(ir::FLOAT32, {3, 2}, 13);
  const Ref ref = RefMatmul(a, b, false);
  ExpectBothPaths(
      OneOpGraph("addmm", {bias.type(), a.type(), b.type()},
                 {Type(ir::FLOAT32, {2, 2})}, {{"beta", FloatA(0)}}),
      {bias, a, b}, ref.values,
      Tolerance(ir::FLOAT32, ref.values, ref.abs, ref.k), "beta=0");
}

TEST(MatmulOpsTest, LinearMatchesTheReference) {
  struct Case {
    Shape x, w;
    bool bias;
  };
  for (ir::DType dtype : kFloatTypes) {
    for (const Case& c : std::vector<Case>{{{2, 3, 4}, {5, 4}, true},
                                           {{4}, {5, 4}, true},
                                           {{6, 4}, {3, 4}, false},
                                           {{3, 4}, {4}, false},
                                           {{2, 4}, {0, 4}, true}}) {
      const HostTensor x = Random(dtype, c.x, 14), w = Random(dtype, c.w, 15);
      const bool w2d = c.w.size() == 2;
      const HostTensor b = Random(dtype, {w2d ? c.w[0] : 1}, 16);
      Ref ref = RefMatmul(x, w, /*b_transposed=*/w2d);
      std::vector<HostTensor> inputs = {x, w};
      if (c.bias) {
        inputs.push_back(b);
        for (size_t i = 0; i < ref.values.size(); ++i) {
          const double bv = b.values[i % b.values.size()];
          ref.values[i] += bv;
          ref.abs[i] += std::fabs(bv);
        }
      }
      std::vector<ir::TensorType> types;
      for (const HostTensor& t : inputs) types.push_back(t.type());
      const std::string what =
          "linear " + DTypeText(dtype) + ShapeText(c.x) + " " + ShapeText(c.w);
      ExpectBothPaths(OneOpGraph("linear", types, {Type(dtype, ref.shape)}),
                      inputs, ref.values,
                      Tolerance(dtype, ref.values, ref.abs, ref.k), what);
    }
  }
}

// Products stay named ops through fusion (SPEC P3, P5): the BLAS rewrite
// needs to find them, and their reduction dim must not be fused into.
TEST(MatmulOpsTest, ProductsStayNamedOpsThroughFusion) {
  struct Case {
    std::string op;
    std::vector<ir::TensorType> inputs;
    ir::TensorType out;
    int matmuls, batch_matmuls, transposed, generics, copies;
  };
  const ir::DType h = ir::FLOAT16, f = ir::FLOAT32;
  for (const Case& c : std::vector<Case>{
           // f32 2-D: the matmul writes the output itself.
           {"mm",
            {Type(f, {3, 4}), Type(f, {4, 5})},
            Type(f, {3, 5}),
            1,
            0,
            0,
            0,
            0},
           // f16: two conversions and the rounding epilogue.
           {"mm",
            {Type(h, {3, 4}), Type(h, {4, 5})},
            Type(h, {3, 5}),
            1,
            0,
            0,
            3,
            0},
           // Batch broadcast: both operands are copied to the common batch
           // [2, 3]; the result is a reshape, copied by a linalg.copy.
           {"matmul",
            {Type(f, {2, 1, 3, 4}), Type(f, {3, 4, 5})},
            Type(f, {2, 3, 3, 5}),
            0,
            1,
            0,
            2,
            1},
           {"linear",
            {Type(f, {2, 3, 4}), Type(f, {5, 4}), Type(f, {5})},
            Type(f, {2, 3, 5}),
            0,
            0,
            1,
            1,
            0},
       }) {
    auto context = CreateCompilerContext();
    auto module =
        ImportGraph(OneOpGraph(c.op, c.inputs, {c.out}), context.get());
    ASSERT_TRUE(module.ok()) << module.status();
    for (bool fused : {false, true}) {
      if (fused) ASSERT_TRUE(RunStages(**module, FusionStages(), "t").ok());
      const std::string what = c.op + (fused ? " after fusion" : "");
      EXPECT_EQ(Count<mlir::linalg::MatmulOp>(**module), c.matmuls) << what;
      EXPECT_EQ(Count<mlir::linalg::BatchMatmulOp>(**module), c.batch_matmuls)
          << what;
      EXPECT_EQ(Count<mlir::linalg::MatmulTransposeBOp>(**module), c.transposed)
          << what;
      EXPECT_EQ(Count<mlir::linalg::GenericOp>(**module), c.generics) << what;
      EXPECT_EQ(Count<mlir::linalg::CopyOp>(**module), c.copies) << what;
    }
  }
}

TEST(MatmulOpsTest, BadOperandsAreErrors) {
  const ir::DType f = ir::FLOAT32;
  auto s = CompileAndRun(
      OneOpGraph("mm", {Type(f, {2, 3}), Type(f, {4, 5})}, {Type(f, {2, 5})}),
      {});
  EXPECT_THAT(
      s.status().message(),
      HasSubstr("mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)"));
  s = CompileAndRun(OneOpGraph("bmm", {Type(f, {2, 2, 3}), Type(f, {1, 3, 5})},
                               {Type(f, {2, 2, 5})}),
                    {});
  EXPECT_THAT(s.status().message(), HasSubstr("does not broadcast"));
  s = CompileAndRun(
      OneOpGraph("matmul", {Type(f, {2, 2, 3}), Type(f, {3, 3, 5})},
                 {Type(f, {3, 2, 5})}),
      {});
  EXPECT_THAT(s.status().message(), HasSubstr("do not broadcast"));
  s = CompileAndRun(
      OneOpGraph("mm", {Type(f, {2, 3}), Type(ir::FLOAT16, {3, 5})},
                 {Type(f, {2, 5})}),
      {});
  EXPECT_THAT(s.status().message(), HasSubstr("expected all inputs"));
  s = CompileAndRun(OneOpGraph("matmul", {Type(f, {2, 3}), Type(f, {3, 5})},
                               {Type(f, {5, 2})}),
                    {});
  EXPECT_THAT(s.status().message(), HasSubstr("expected [2,5]"));
}

}  // namespace
}  // namespace rbln::compiler
