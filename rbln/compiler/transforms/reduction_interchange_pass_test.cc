// spec: P3, P5, A2
//
// Row reductions get the rows as their innermost loop; each row still
// combines its elements in index order, so sums and maxima are the
// sequential float results bit for bit (no reassociation, P3), NaN included.
#include "rbln/compiler/transforms/passes.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "rbln/compiler/frontend/frontend.h"
#include "rbln/compiler/pipelines/mlir_setup.h"
#include "rbln/compiler/pipelines/pipelines.h"
#include "rbln/compiler/testing/op_test_util.h"

namespace rbln::compiler {
namespace {

using testing::HostTensor;
using testing::IntA;
using testing::OneOpGraph;
using testing::Random;
using testing::RunOne;
using testing::Type;

// The iterator types of each reduction generic after the pass, innermost
// last ("p"/"r").
std::vector<std::string> ReductionLoops(const ir::Graph& g) {
  auto context = CreateCompilerContext();
  auto module = ImportGraph(g, context.get());
  EXPECT_TRUE(module.ok()) << module.status();
  mlir::PassManager pm(context.get());
  pm.addNestedPass<mlir::func::FuncOp>(CreateReductionInterchangePass());
  EXPECT_TRUE(mlir::succeeded(pm.run(**module)));
  std::vector<std::string> loops;
  (*module)->walk([&](mlir::linalg::GenericOp op) {
    if (op.getNumReductionLoops() == 0) return;
    std::string s;
    for (auto it : op.getIteratorTypesArray()) {
      s += it == mlir::utils::IteratorType::reduction ? "r" : "p";
    }
    loops.push_back(s);
  });
  return loops;
}

TEST(ReductionInterchangePassTest, RowsBecomeTheInnermostLoop) {
  // Row sums of 16 rows: the rows go inside.
  EXPECT_EQ(ReductionLoops(OneOpGraph("sum", {Type(ir::FLOAT32, {16, 33})},
                                      {Type(ir::FLOAT32, {16})}, {{"dim", IntA(1)}})),
            std::vector<std::string>{"rp"});
  // A softmax's max and sum over 2 x 16 rows.
  EXPECT_EQ(ReductionLoops(OneOpGraph("softmax", {Type(ir::FLOAT32, {2, 16, 33})},
                                      {Type(ir::FLOAT32, {2, 16, 33})}, {{"dim", IntA(-1)}})),
            (std::vector<std::string>{"prp", "prp"}));
  // Too few rows to fill a vector, a column sum (rows already innermost)
  // and a full reduction keep their order.
  EXPECT_EQ(ReductionLoops(OneOpGraph("sum", {Type(ir::FLOAT32, {4, 33})},
                                      {Type(ir::FLOAT32, {4})}, {{"dim", IntA(1)}})),
            std::vector<std::string>{"pr"});
  EXPECT_EQ(ReductionLoops(OneOpGraph("sum", {Type(ir::FLOAT32, {33, 16})},
                                      {Type(ir::FLOAT32, {16})}, {{"dim", IntA(0)}})),
            std::vector<std::string>{"rp"});
  EXPECT_EQ(ReductionLoops(OneOpGraph("sum", {Type(ir::FLOAT32, {33, 16})},
                                      {Type(ir::FLOAT32, {})})),
            std::vector<std::string>{"rr"});
}

// A payload that calls out (a gather's index check reporting the first bad
// index) keeps its element order.
TEST(ReductionInterchangePassTest, PayloadsWithSideEffectsKeepTheirOrder) {
  auto context = CreateCompilerContext();
  mlir::OwningOpRef<mlir::ModuleOp> module = mlir::parseSourceString<mlir::ModuleOp>(R"mlir(
    func.func private @report(i64)
    func.func @kernel(%x: memref<16x33xf32>, %out: memref<16xf32>) {
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
      return
    })mlir", context.get());
  ASSERT_TRUE(module);
  mlir::PassManager pm(context.get());
  pm.addNestedPass<mlir::func::FuncOp>(CreateReductionInterchangePass());
  ASSERT_TRUE(mlir::succeeded(pm.run(*module)));
  int generics = 0;
  module->walk([&](mlir::linalg::GenericOp op) {
    ++generics;
    EXPECT_EQ(op.getIteratorTypesArray().back(), mlir::utils::IteratorType::reduction);
  });
  EXPECT_EQ(generics, 1);
}

TEST(ReductionInterchangePassTest, EachRowIsItsSequentialSumAndMax) {
  for (int64_t k : {1, 7, 100, 1000}) {
    const int64_t rows = 37;
    HostTensor x = Random(ir::FLOAT32, {rows, k}, 71, -3.0, 3.0);
    x.values[5 * k + k / 2] = std::numeric_limits<double>::quiet_NaN();
    const HostTensor sum = RunOne(OneOpGraph("sum", {x.type()}, {Type(ir::FLOAT32, {rows})},
                                             {{"dim", IntA(1)}}),
                                  {x});
    const HostTensor max = RunOne(OneOpGraph("amax", {x.type()}, {Type(ir::FLOAT32, {rows})},
                                             {{"dim", IntA(1)}}),
                                  {x});
    ASSERT_EQ(sum.values.size(), static_cast<size_t>(rows));
    ASSERT_EQ(max.values.size(), static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      float s = 0.0f;
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t i = 0; i < k; ++i) {
        const float v = static_cast<float>(x.values[r * k + i]);
        s += v;
        if (v > m || std::isnan(v)) m = v;
      }
      if (std::isnan(s)) {
        EXPECT_TRUE(std::isnan(sum.values[r])) << "row " << r << " of " << k;
        EXPECT_TRUE(std::isnan(max.values[r])) << "row " << r << " of " << k;
        continue;
      }
      EXPECT_EQ(static_cast<float>(sum.values[r]), s) << "row " << r << " of " << k;
      EXPECT_EQ(static_cast<float>(max.values[r]), m) << "row " << r << " of " << k;
    }
  }
}

}  // namespace
}  // namespace rbln::compiler
