// spec: P4, P5
//
// Two projections of one input (an attention layer's q and k): CSE leaves
// them one shared zero fill; the pass gives each its own, so bufferization
// copies no filled buffer, and the results stay right. The same for two
// paddings of one shape.
#include "rbln/compiler/transforms/passes.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Pass/PassManager.h"
#include "rbln/compiler/frontend/frontend.h"
#include "rbln/compiler/pipelines/mlir_setup.h"
#include "rbln/compiler/pipelines/pipelines.h"
#include "rbln/compiler/testing/op_test_util.h"

namespace rbln::compiler {
namespace {

using testing::Count;
using testing::AddInput;
using testing::AddNode;
using testing::HostTensor;
using testing::Random;
using testing::Type;

// q = x w_q^T, k = x w_k^T: x [32, 64], weights [48, 64].
ir::Graph TwoProjections() {
  ir::Graph g;
  g.set_name("two_projections");
  AddInput(g, "x", Type(ir::FLOAT32, {32, 64}));
  AddInput(g, "wq", Type(ir::FLOAT32, {48, 64}));
  AddInput(g, "wk", Type(ir::FLOAT32, {48, 64}));
  AddNode(g, "linear", {"x", "wq"}, "q", Type(ir::FLOAT32, {32, 48}));
  AddNode(g, "linear", {"x", "wk"}, "k", Type(ir::FLOAT32, {32, 48}));
  g.add_outputs("q");
  g.add_outputs("k");
  return g;
}

TEST(FillUnsharingPassTest, EachMatmulGetsItsOwnFill) {
  auto context = CreateCompilerContext();
  auto module = ImportGraph(TwoProjections(), context.get());
  ASSERT_TRUE(module.ok()) << module.status();
  ASSERT_TRUE(RunStages(**module, FusionStages(), "t").ok());
  ASSERT_EQ(Count<mlir::linalg::FillOp>(**module), 1);  // CSE'd
  mlir::PassManager pm(context.get());
  pm.addNestedPass<mlir::func::FuncOp>(CreateFillUnsharingPass());
  ASSERT_TRUE(mlir::succeeded(pm.run(**module)));
  EXPECT_EQ(Count<mlir::linalg::FillOp>(**module), 2);
}

TEST(FillUnsharingPassTest, BufferizationCopiesNoFilledBuffer) {
  auto context = CreateCompilerContext();
  auto module = ImportGraph(TwoProjections(), context.get());
  ASSERT_TRUE(module.ok()) << module.status();
  ASSERT_TRUE(RunStages(**module, FusionStages(), "t").ok());
  ASSERT_TRUE(RunStages(**module, BufferizationStages(), "t").ok());
  EXPECT_EQ(Count<mlir::memref::CopyOp>(**module), 0);
  EXPECT_EQ(Count<mlir::linalg::FillOp>(**module), 2);
}

// Two convolutions padding inputs of one shape: CSE leaves their paddings
// one zero fill and one slice of it to copy each input into; each padding
// gets its own fill and slice, so bufferization copies no padded buffer
// (the convolution rewrite then reads the inputs unpadded).
TEST(FillUnsharingPassTest, EachPaddingGetsItsOwnFill) {
  ir::Graph g;
  g.set_name("two_padded_convs");
  AddInput(g, "x1", Type(ir::FLOAT32, {1, 4, 8, 8}));
  AddInput(g, "x2", Type(ir::FLOAT32, {1, 4, 8, 8}));
  AddInput(g, "w", Type(ir::FLOAT32, {4, 4, 3, 3}));
  AddNode(g, "convolution", {"x1", "w"}, "y1", Type(ir::FLOAT32, {1, 4, 8, 8}));
  AddNode(g, "convolution", {"x2", "w"}, "y2", Type(ir::FLOAT32, {1, 4, 8, 8}));
  for (ir::Node& n : *g.mutable_nodes()) {
    auto& attrs = *n.mutable_attrs();
    attrs["stride"].set_s("1,1");
    attrs["padding"].set_s("1,1");
    attrs["dilation"].set_s("1,1");
    attrs["output_padding"].set_s("0,0");
    attrs["transposed"].set_b(false);
    attrs["groups"].set_i(1);
  }
  g.add_outputs("y1");
  g.add_outputs("y2");
  auto context = CreateCompilerContext();
  auto module = ImportGraph(g, context.get());
  ASSERT_TRUE(module.ok()) << module.status();
  ASSERT_TRUE(RunStages(**module, FusionStages(), "t").ok());
  int slices = 0;
  (*module)->walk([&](mlir::tensor::ExtractSliceOp) { ++slices; });
  ASSERT_EQ(slices, 1);  // CSE'd
  ASSERT_TRUE(RunStages(**module, BufferizationStages(), "t").ok());
  EXPECT_EQ(Count<mlir::memref::CopyOp>(**module), 0);
}

TEST(FillUnsharingPassTest, ProjectionsStayRight) {
  const HostTensor x = Random(ir::FLOAT32, {32, 64}, 1);
  const HostTensor wq = Random(ir::FLOAT32, {48, 64}, 2);
  const HostTensor wk = Random(ir::FLOAT32, {48, 64}, 3);
  absl::StatusOr<std::vector<HostTensor>> out =
      testing::CompileAndRun(TwoProjections(), {x, wq, wk});
  ASSERT_TRUE(out.ok()) << out.status();
  for (int which = 0; which < 2; ++which) {
    const HostTensor& w = which == 0 ? wq : wk;
    std::vector<double> want(32 * 48), tol(32 * 48);
    for (int i = 0; i < 32; ++i) {
      for (int j = 0; j < 48; ++j) {
        double sum = 0, magnitude = 0;
        for (int p = 0; p < 64; ++p) {
          sum += x.values[i * 64 + p] * w.values[j * 64 + p];
          magnitude += std::abs(x.values[i * 64 + p] * w.values[j * 64 + p]);
        }
        want[i * 48 + j] = sum;
        tol[i * 48 + j] = 64 * 6e-8 * magnitude;
      }
    }
    testing::ExpectClose((*out)[which], want, tol, which == 0 ? "q" : "k");
  }
}

}  // namespace
}  // namespace rbln::compiler
