// spec: P3, A2
//
// Reductions whose reduced loops stay innermost carry their accumulators
// through scf.for (one load and one store per output element, not per
// reduced element) and keep the sequential results bit for bit: sums in
// index order, argmax's first index of the max with NaN winning.
#include "rbln/compiler/transforms/passes.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "rbln/compiler/pipelines/mlir_setup.h"
#include "rbln/compiler/testing/op_test_util.h"

namespace rbln::compiler {
namespace {

using testing::HostTensor;
using testing::IntA;
using testing::OneOpGraph;
using testing::Random;
using testing::RunOne;
using testing::Type;

mlir::OwningOpRef<mlir::ModuleOp> RunPass(mlir::MLIRContext* context, const char* text) {
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(text, context);
  EXPECT_TRUE(module);
  if (!module) return module;
  mlir::PassManager pm(context);
  pm.addNestedPass<mlir::func::FuncOp>(CreateRegisterAccumulatorPass());
  EXPECT_TRUE(mlir::succeeded(pm.run(*module)));
  return module;
}

TEST(RegisterAccumulatorPassTest, ReducedLoopCarriesTheAccumulators) {
  auto context = CreateCompilerContext();
  // A 2-row max with its index, as a partitioned worker's argmax slice.
  auto module = RunPass(context.get(), R"mlir(
    func.func @kernel(%x: memref<2x100xf32>, %v: memref<2xf32>, %i: memref<2xi64>) {
      linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>,
                                       affine_map<(d0, d1) -> (d0)>,
                                       affine_map<(d0, d1) -> (d0)>],
                      iterator_types = ["parallel", "reduction"]}
          ins(%x : memref<2x100xf32>) outs(%v, %i : memref<2xf32>, memref<2xi64>) {
      ^bb0(%in: f32, %acc: f32, %acc_i: i64):
        %k = linalg.index 1 : index
        %ki = arith.index_cast %k : index to i64
        %gt = arith.cmpf ogt, %in, %acc : f32
        %m = arith.select %gt, %in, %acc : f32
        %j = arith.select %gt, %ki, %acc_i : i64
        linalg.yield %m, %j : f32, i64
      }
      return
    })mlir");
  ASSERT_TRUE(module);
  EXPECT_EQ(testing::Count<mlir::linalg::GenericOp>(*module), 0);
  int carrying = 0;
  module->walk([&](mlir::scf::ForOp loop) {
    if (loop.getNumRegionIterArgs() == 2) ++carrying;
  });
  EXPECT_EQ(carrying, 1);
  // Per row: two loads of the accumulators, one of the input per element.
  EXPECT_EQ(testing::Count<mlir::memref::LoadOp>(*module), 3);
  EXPECT_EQ(testing::Count<mlir::memref::StoreOp>(*module), 2);
}

TEST(RegisterAccumulatorPassTest, OtherGenericsKeepTheirLowering) {
  auto context = CreateCompilerContext();
  auto module = RunPass(context.get(), R"mlir(
    func.func private @report(i64)
    func.func @kernel(%x: memref<16x33xf32>, %out: memref<16xf32>, %y: memref<33x16xf32>,
                      %col: memref<16xf32>) {
      // A payload that calls out (a gather's index check).
      linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>,
                                       affine_map<(d0, d1) -> (d0)>],
                      iterator_types = ["parallel", "reduction"]}
          ins(%x : memref<16x33xf32>) outs(%out : memref<16xf32>) {
      ^bb0(%in: f32, %acc: f32):
        %c = arith.constant 1 : i64
        func.call @report(%c) : (i64) -> ()
        %s = arith.addf %acc, %in : f32
        linalg.yield %s : f32
      }
      // Rows innermost (interchanged): they vectorize as they are.
      linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>,
                                       affine_map<(d0, d1) -> (d1)>],
                      iterator_types = ["reduction", "parallel"]}
          ins(%y : memref<33x16xf32>) outs(%col : memref<16xf32>) {
      ^bb0(%in: f32, %acc: f32):
        %s = arith.addf %acc, %in : f32
        linalg.yield %s : f32
      }
      return
    })mlir");
  ASSERT_TRUE(module);
  EXPECT_EQ(testing::Count<mlir::linalg::GenericOp>(*module), 2);
}

TEST(RegisterAccumulatorPassTest, SumsAndArgmaxAreTheSequentialResults) {
  for (int64_t k : {1, 7, 1000}) {
    const int64_t rows = 5;
    HostTensor x = Random(ir::FLOAT32, {rows, k}, 13, -3.0, 3.0);
    if (k > 1) {
      x.values[1 * k + k / 2] = std::numeric_limits<double>::quiet_NaN();
      x.values[1 * k + k - 1] = std::numeric_limits<double>::quiet_NaN();
      x.values[2 * k + 0] = 5.0;  // a tie: the first index wins
      x.values[2 * k + k - 1] = 5.0;
    }
    const HostTensor sum = RunOne(
        OneOpGraph("sum", {x.type()}, {Type(ir::FLOAT32, {rows})}, {{"dim", IntA(1)}}), {x});
    const HostTensor arg = RunOne(
        OneOpGraph("argmax", {x.type()}, {Type(ir::INT64, {rows})}, {{"dim", IntA(1)}}), {x});
    const HostTensor total =
        RunOne(OneOpGraph("sum", {x.type()}, {Type(ir::FLOAT32, {})}), {x});
    ASSERT_EQ(sum.values.size(), static_cast<size_t>(rows));
    ASSERT_EQ(arg.values.size(), static_cast<size_t>(rows));
    ASSERT_EQ(total.values.size(), 1u);
    float all = 0.0f;
    for (int64_t r = 0; r < rows; ++r) {
      float s = 0.0f;
      float m = -std::numeric_limits<float>::infinity();
      int64_t at = 0;
      bool nan = false;
      for (int64_t i = 0; i < k; ++i) {
        const float v = static_cast<float>(x.values[r * k + i]);
        s += v;
        all += v;
        if (nan) continue;
        if (std::isnan(v)) {
          nan = true;
          at = i;
        } else if (v > m) {
          m = v;
          at = i;
        }
      }
      EXPECT_EQ(static_cast<int64_t>(arg.values[r]), at) << "row " << r << " of " << k;
      if (nan) {
        EXPECT_TRUE(std::isnan(sum.values[r])) << "row " << r << " of " << k;
      } else {
        EXPECT_EQ(static_cast<float>(sum.values[r]), s) << "row " << r << " of " << k;
      }
    }
    if (std::isnan(all)) {
      EXPECT_TRUE(std::isnan(total.values[0]));
    } else {
      EXPECT_EQ(static_cast<float>(total.values[0]), all);
    }
  }
}

}  // namespace
}  // namespace rbln::compiler
