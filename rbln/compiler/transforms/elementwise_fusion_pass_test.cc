// spec: P1, P3, P5
// rbln-fuse-elementwise-ops (the MLIR 19 table's fusion) against MLIR's own
// linalg-fuse-elementwise-ops, built with whichever MLIR this build uses.
#include "rbln/compiler/transforms/passes.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "llvm/Support/raw_ostream.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "rbln/compiler/frontend/frontend.h"
#include "rbln/compiler/pipelines/mlir_compat.h"
#include "rbln/compiler/pipelines/mlir_setup.h"
#include "rbln/compiler/pipelines/pipelines.h"
#include "rbln/compiler/testing/op_test_util.h"
#include "rbln/compiler/testing/test_graphs.h"

namespace rbln::compiler {
namespace {

using testing::IntA;
using testing::OneOpGraph;
using testing::Type;

struct Fused {
  std::string text;
  int generics = 0;  // after fusion
  int gemms = 0;  // matmul, matmul_transpose_b, batch_matmul
};

// `graph` after canonicalize,cse,<fusion>,canonicalize,cse.
Fused Fuse(const ir::Graph& graph, const std::string& fusion) {
  auto context = CreateCompilerContext();
  auto module = ImportGraph(graph, context.get());
  EXPECT_TRUE(module.ok()) << module.status();
  if (!module.ok()) return {};
  RegisterElementwiseFusionPass();
  std::vector<Stage> stages = {
      Stage{"fuse", "canonicalize,cse," + fusion + ",canonicalize,cse",
            nullptr}};
  absl::Status s = RunStages(**module, stages, "t");
  EXPECT_TRUE(s.ok()) << s;
  Fused f;
  llvm::raw_string_ostream os(f.text);
  (**module)->print(os);
  os.flush();
  (**module)->walk([&](mlir::linalg::GenericOp) { ++f.generics; });
  (**module)->walk([&](mlir::Operation* op) {
    if (llvm::isa<mlir::linalg::MatmulOp, mlir::linalg::MatmulTransposeBOp,
                  mlir::linalg::BatchMatmulOp>(op)) {
      ++f.gemms;
    }
  });
  return f;
}

constexpr char kMlirFusion[] = "linalg-fuse-elementwise-ops";

// Without reshapes around reductions or named ops, the two passes are the
// same rewrite: element-wise chains (P1), a softmax whose exp has two users
// (P3), a layer norm, an f16 matmul with its conversions.
TEST(ElementwiseFusionPassTest, SameAsMlirFusionWithoutReshapes) {
  const ir::DType f = ir::FLOAT32;
  for (const ir::Graph& g :
       {testing::AddChainGraph(Type(f, {8, 4})),
        testing::AddChainGraph(Type(ir::FLOAT16, {3, 5})),
        OneOpGraph("softmax", {Type(f, {4, 6})}, {Type(f, {4, 6})},
                   {{"dim", IntA(-1)}}),
        OneOpGraph("layer_norm", {Type(f, {2, 3, 8})}, {Type(f, {2, 3, 8})},
                   {{"normalized_ndim", IntA(1)}}),
        OneOpGraph("mm", {Type(ir::FLOAT16, {3, 4}), Type(ir::FLOAT16, {4, 5})},
                   {Type(ir::FLOAT16, {3, 5})})}) {
    const Fused ours = Fuse(g, kElementwiseFusionPassName);
    const Fused mlir = Fuse(g, kMlirFusion);
    EXPECT_EQ(ours.text, mlir.text) << g.name();
  }
}

// The GEMMs of `linear` on a 3-d input (collapse -> matmul_transpose_b ->
// expand) and of a batch-broadcast matmul stay named ops for the BLAS
// rewrite (P5). MLIR 16's pass leaves them too; MLIR 19's turns them into
// linalg.generic contractions, which is why the 19 table uses ours.
TEST(ElementwiseFusionPassTest, GemmsBehindReshapesStayNamedOps) {
  const ir::DType f = ir::FLOAT32;
  for (const ir::Graph& g :
       {OneOpGraph("linear",
                   {Type(f, {2, 3, 4}), Type(f, {5, 4}), Type(f, {5})},
                   {Type(f, {2, 3, 5})}),
        OneOpGraph("matmul", {Type(f, {2, 1, 3, 4}), Type(f, {3, 4, 5})},
                   {Type(f, {2, 3, 3, 5})})}) {
    const Fused ours = Fuse(g, kElementwiseFusionPassName);
    const Fused mlir = Fuse(g, kMlirFusion);
    EXPECT_EQ(ours.gemms, 1) << g.name() << "\n" << ours.text;
    if (compat::kMlirVersion == 16) {
      EXPECT_EQ(ours.text, mlir.text) << g.name();
    } else {
      EXPECT_EQ(mlir.gemms, 0) << g.name() << "\n" << mlir.text;
    }
  }
}

// The table of this build names the fusion that keeps GEMMs whole.
TEST(ElementwiseFusionPassTest, ThisBuildsTableFusesWithoutHidingGemms) {
  const ir::DType f = ir::FLOAT32;
  const ir::Graph g =
      OneOpGraph("linear", {Type(f, {2, 3, 4}), Type(f, {5, 4}), Type(f, {5})},
                 {Type(f, {2, 3, 5})});
  auto context = CreateCompilerContext();
  auto module = ImportGraph(g, context.get());
  ASSERT_TRUE(module.ok()) << module.status();
  ASSERT_TRUE(RunStages(**module, FusionStages(), "t").ok());
  int gemms = 0;
  (**module)->walk([&](mlir::linalg::MatmulTransposeBOp) { ++gemms; });
  EXPECT_EQ(gemms, 1);
}

}  // namespace
}  // namespace rbln::compiler
