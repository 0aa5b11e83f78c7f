// spec: P5, A2
// The grouped GEMM rewrite: the frontend's loop over groups (_grouped_mm's
// 2-D x 3-D form, B plain or a transpose's source) becomes rbln_grouped_gemm
// calls -- column blocks in a parallel loop when the problem is large -- and
// the program with the calls computes the loops' values; the other forms
// stay loops. MXFP4 weights: one rbln_grouped_gemm_mxfp4 call.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "rbln/compiler/abi/kernel_abi.h"
#include "rbln/compiler/execution/compiled_program.h"
#include "rbln/compiler/kernels/onednn_library.h"
#include "rbln/compiler/pipelines/mlir_setup.h"
#include "rbln/compiler/pipelines/pipelines.h"
#include "rbln/compiler/testing/op_test_util.h"
#include "rbln/compiler/transforms/library/library_test_util.h"
#include "rbln/compiler/transforms/library/passes.h"

namespace rbln::compiler {
namespace {

using namespace testing;  // NOLINT: the op test helpers.

Stage GroupedGemmStage() {
  RegisterGroupedGemmRewritePass();
  return Stage{"grouped-gemm", kGroupedGemmRewritePassName, nullptr};
}

struct Counts {
  int calls = 0, blocked = 0, group_loops = 0, transposes = 0;
};

Counts Count(mlir::ModuleOp module) {
  Counts c;
  module.walk([&](mlir::Operation* op) {
    if (auto call = llvm::dyn_cast<mlir::func::CallOp>(op);
        call && call.getCallee() == kGroupedGemmSymbol) {
      ++c.calls;
    }
    if (llvm::isa<mlir::scf::ForOp>(op) && op->hasAttr(kParallelIterationsAttr)) ++c.blocked;
    if (llvm::isa<mlir::scf::ForOp>(op) && op->hasAttr(kGroupedGemmAttr)) ++c.group_loops;
    // A copy of the weight (a generic over a rank-3 buffer) left behind.
    if (auto g = llvm::dyn_cast<mlir::linalg::GenericOp>(op); g && g.getNumLoops() == 3 &&
        g.getNumReductionLoops() == 0) {
      ++c.transposes;
    }
  });
  return c;
}

TEST(GroupedGemmRewritePassTest, GroupLoopsBecomeCallsReadingTheWeightInPlace) {
  for (bool b_t : {false, true}) {
    for (ir::DType t : {ir::FLOAT32, ir::BFLOAT16}) {
      auto context = CreateCompilerContext();
      // 16 x 64 x 48: one call; 512 x 1024 x 256: column blocks.
      for (auto [m, k, n, blocked] : {std::tuple{16, 64, 48, 0}, std::tuple{512, 1024, 256, 1}}) {
        auto module = ImportAndRewrite(GroupedMmGraph(t, ir::INT32, 4, m, k, n, b_t), context.get(),
                                       {GroupedGemmStage()});
        ASSERT_TRUE(module.ok()) << module.status();
        const Counts c = Count(**module);
        const std::string what = DTypeText(t) + (b_t ? " transposed" : "") + " m " +
                                 std::to_string(m);
        EXPECT_EQ(c.calls, 1) << what;
        EXPECT_EQ(c.blocked, blocked) << what;
        EXPECT_EQ(c.group_loops, 0) << what;
        EXPECT_EQ(c.transposes, 0) << what;
      }
    }
  }
}

TEST(GroupedGemmRewritePassTest, CallsComputeTheLoopsValues) {
  if (!LoadOnednn()) GTEST_SKIP() << "oneDNN is not installed";
  for (bool b_t : {false, true}) {
    const int64_t g = 4, m = 40, k = 96, n = 80;
    const ir::Graph graph = GroupedMmGraph(ir::BFLOAT16, ir::INT32, g, m, k, n, b_t);
    const std::vector<HostTensor> inputs = {
        Random(ir::BFLOAT16, {m, k}, 1, -1, 1),
        Random(ir::BFLOAT16, b_t ? Shape{g, n, k} : Shape{g, k, n}, 2, -1, 1),
        Tensor(ir::INT32, {g}, {7, 7, 30, 36})};  // an empty group, rows past the end
    auto run = RunWithoutAndWithRewrite(
        graph, GroupedGemmStage(), inputs, [](mlir::ModuleOp module, bool rewritten) {
          EXPECT_EQ(Count(module).calls, rewritten ? 1 : 0);
        });
    ASSERT_TRUE(run.ok()) << run.status();
    const auto& results = *run;
    ASSERT_EQ(results[0].size(), results[1].size());
    for (size_t i = 0; i < results[0].size(); ++i) {
      // Both f32 sums of the same bf16 products, rounded once to bf16.
      ASSERT_NEAR(results[1][i], results[0][i], 1e-2 * (1 + std::fabs(results[0][i])))
          << (b_t ? "transposed " : "") << "element " << i;
    }
    for (int64_t i = 36 * n; i < m * n; ++i) ASSERT_EQ(results[1][i], 0.0) << i;
  }
}

// MXFP4 weights (gpt-oss's experts): the loop decoding them in the
// product's body becomes one rbln_grouped_gemm_mxfp4 call with the same
// values, for groups of one row (the fused GEMV) and of 20 (oneDNN).
TEST(GroupedGemmRewritePassTest, Mxfp4LoopBecomesACallWithTheLoopsValues) {
  if (!LoadOnednn()) GTEST_SKIP() << "oneDNN is not installed";
  for (ir::DType t : {ir::FLOAT32, ir::BFLOAT16}) {
    const int64_t g = 4, m = 24, k = 64, n = 40;
    std::vector<double> blocks(g * n * k / 2), scales(g * n * k / 32);
    for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = (i * 37 + 11) % 256;
    for (size_t i = 0; i < scales.size(); ++i) scales[i] = 122 + (i * 5) % 9;
    scales[3] = 0;  // flushes its 32 values to zero in both
    const std::vector<HostTensor> inputs = {
        Random(t, {m, k}, 1, -1, 1), Tensor(ir::UINT8, {g, n, k / 2}, blocks),
        Tensor(ir::UINT8, {g, n, k / 32}, scales),
        Tensor(ir::INT32, {g}, {1, 2, 2, 22})};  // rows 22, 23 in no group
    std::vector<ir::TensorType> types;
    for (const HostTensor& x : inputs) types.push_back(x.type());
    const ir::Graph graph = OneOpGraph("grouped_mm_mxfp4", types, {Type(t, {m, n})});
    auto run = RunWithoutAndWithRewrite(
        graph, GroupedGemmStage(), inputs, [](mlir::ModuleOp module, bool rewritten) {
          int calls = 0;
          module.walk([&](mlir::func::CallOp call) {
            calls += call.getCallee() == kGroupedGemmMxfp4Symbol;
          });
          EXPECT_EQ(calls, rewritten ? 1 : 0);
        });
    ASSERT_TRUE(run.ok()) << run.status();
    const auto& results = *run;
    ASSERT_EQ(results[0].size(), static_cast<size_t>(m * n));
    for (size_t i = 0; i < results[0].size(); ++i) {
      // f32 sums of the same exact products in another order.
      const double tol = t == ir::BFLOAT16 ? 1e-2 * (1 + std::fabs(results[0][i]))
                                           : 1e-5 * (1 + std::fabs(results[0][i]));
      ASSERT_NEAR(results[1][i], results[0][i], tol) << DTypeText(t) << " element " << i;
    }
    for (int64_t i = 22 * n; i < m * n; ++i) ASSERT_EQ(results[1][i], 0.0) << i;
  }
}

}  // namespace
}  // namespace rbln::compiler
