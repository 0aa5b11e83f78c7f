// spec: P3, P5
// addmv, addbmm and _trilinear against double-precision references in every
// dtype they take, with alpha/beta (beta 0 ignores a NaN self).
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

// f32 accumulation of `terms` products of magnitude <= `scale`, rounded once.
std::vector<double> Tolerance(ir::DType t, const std::vector<double>& want,
                              int64_t terms, double scale) {
  std::vector<double> tol;
  for (double w : want) {
    tol.push_back(IsFloatDType(t)
                      ? 2 * UnitRoundoff(t) * std::fabs(w) +
                            (terms + 2) * UnitRoundoff(ir::FLOAT32) * terms *
                                scale
                      : 0);
  }
  return tol;
}

HostTensor Operand(ir::DType t, const Shape& shape, uint32_t seed) {
  return Random(t, shape, seed, -3.0, 3.0);
}

const ir::DType kTypes[] = {ir::FLOAT32, ir::FLOAT16, ir::BFLOAT16, ir::INT32,
                            ir::INT64};

TEST(LinalgOpsTest, AddmvMatchesTheReference) {
  for (ir::DType t : kTypes) {
    for (const Shape& self_shape : {Shape{5}, Shape{1}, Shape{}}) {
      for (auto [beta, alpha] :
           std::vector<std::pair<double, double>>{{1, 1}, {0.5, -2}, {0, 3}}) {
        if (!IsFloatDType(t) && (beta != std::floor(beta))) continue;
        HostTensor self = Operand(t, self_shape, 1);
        if (beta == 0 && IsFloatDType(t)) self.values[0] = kNan;
        const HostTensor mat = Operand(t, {5, 7}, 2), vec = Operand(t, {7}, 3);
        std::vector<double> want;
        for (int i = 0; i < 5; ++i) {
          double dot = 0;
          for (int j = 0; j < 7; ++j)
            dot += mat.values[i * 7 + j] * vec.values[j];
          const double s =
              self.values[self_shape.empty() || self_shape[0] == 1 ? 0 : i];
          want.push_back(RoundTo(t, (beta == 0 ? 0 : beta * s) + alpha * dot));
        }
        const std::string what =
            absl::StrCat("addmv ", DTypeText(t), ShapeText(self_shape),
                         " beta=", beta, " alpha=", alpha);
        auto got = CompileAndRun(
            OneOpGraph("addmv", {self.type(), mat.type(), vec.type()},
                       {Type(t, {5})},
                       {{"beta", FloatA(beta)}, {"alpha", FloatA(alpha)}}),
            {self, mat, vec});
        ASSERT_TRUE(got.ok()) << what << ": " << got.status();
        ExpectClose((*got)[0], want,
                    Tolerance(t, want, 7, 9 * std::fabs(alpha)), what);
      }
    }
  }
}

// A bf16 sum over batches that per-batch rounding changes: 256 + 1 + 1
// is 256 in bf16 step by step, 258 rounded once.
TEST(LinalgOpsTest, AddbmmRoundsAfterEachBatch) {
  const HostTensor self = Tensor(ir::BFLOAT16, {1, 1}, {256});
  const HostTensor b1 = Tensor(ir::BFLOAT16, {2, 1, 1}, {1, 1});
  const HostTensor b2 = Tensor(ir::BFLOAT16, {2, 1, 1}, {1, 1});
  auto got =
      CompileAndRun(OneOpGraph("addbmm", {self.type(), b1.type(), b2.type()},
                               {Type(ir::BFLOAT16, {1, 1})}),
                    {self, b1, b2});
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectExact((*got)[0], {256}, "256 + 1 + 1 in bf16");
}

TEST(LinalgOpsTest, AddbmmSumsTheBatch) {
  for (ir::DType t : kTypes) {
    for (int64_t batches : {3, 1, 0}) {
      const HostTensor self = Operand(t, {4, 6}, 4);
      const HostTensor b1 = Operand(t, {batches, 4, 5}, 5);
      const HostTensor b2 = Operand(t, {batches, 5, 6}, 6);
      const double beta = IsFloatDType(t) ? 0.5 : 2, alpha = -1;
      std::vector<double> want;
      for (int i = 0; i < 4; ++i) {
        for (int j = 0; j < 6; ++j) {
          // ATen's loop of addmm_: rounded to the dtype after each batch.
          double acc = beta * self.values[i * 6 + j];
          if (batches == 0) acc = RoundTo(t, acc);
          for (int b = 0; b < batches; ++b) {
            double product = 0;
            for (int k = 0; k < 5; ++k) {
              product += b1.values[(b * 4 + i) * 5 + k] *
                         b2.values[(b * 5 + k) * 6 + j];
            }
            acc = RoundTo(t, acc + alpha * product);
          }
          want.push_back(acc);
        }
      }
      const std::string what =
          absl::StrCat("addbmm ", DTypeText(t), " batches=", batches);
      auto got = CompileAndRun(
          OneOpGraph("addbmm", {self.type(), b1.type(), b2.type()},
                     {Type(t, {4, 6})},
                     {{"beta", FloatA(beta)}, {"alpha", FloatA(alpha)}}),
          {self, b1, b2});
      ASSERT_TRUE(got.ok()) << what << ": " << got.status();
      ExpectClose((*got)[0], want, Tolerance(t, want, 5 * batches, 9), what);
    }
  }
}

// bilinear's contraction: out[n, o] = sum_ij x1[n, i] w[o, i, j] x2[n, j].
TEST(LinalgOpsTest, TrilinearAsBilinear) {
  for (ir::DType t : {ir::FLOAT32, ir::FLOAT16, ir::BFLOAT16}) {
    const HostTensor x1 = Operand(t, {3, 4}, 1), w = Operand(t, {5, 4, 6}, 2),
                     x2 = Operand(t, {3, 6}, 3);
    std::vector<double> want;
    for (int n = 0; n < 3; ++n) {
      for (int o = 0; o < 5; ++o) {
        double acc = 0;
        for (int i = 0; i < 4; ++i) {
          for (int j = 0; j < 6; ++j) {
            acc += x1.values[n * 4 + i] * w.values[(o * 4 + i) * 6 + j] *
                   x2.values[n * 6 + j];
          }
        }
        want.push_back(acc);
      }
    }
    auto got =
        CompileAndRun(OneOpGraph("_trilinear", {x1.type(), w.type(), x2.type()},
                                 {Type(t, {3, 5})},
                                 {{"expand1", StrA("1,3")},
                                  {"expand2", StrA("0")},
                                  {"expand3", StrA("1,2")},
                                  {"sumdim", StrA("2,3")},
                                  {"unroll_dim", IntA(1)}}),
                      {x1, w, x2});
    ASSERT_TRUE(got.ok()) << got.status();
    ExpectClose((*got)[0], want, Tolerance(t, want, 24, 27),
                "_trilinear " + DTypeText(t));
  }
}

}  // namespace
}  // namespace rbln::compiler
