// spec: P5, A2, P8
// The paged attention rewrite: the frontend's marked generic becomes
// rbln_paged_attention calls -- blocks of work items in a parallel loop
// when the problem is large; also with an element-wise consumer, which
// fusion must not merge it into -- and the program with the calls computes the
// generic's own values (its element-wise online softmax, what runs when
// the rewrite cannot take the op): decode and prefill, GQA, a sliding
// window, a soft cap, attention sinks, f32 and bf16, int32 and int64
// indices. A marked op
// the rewrite cannot take, or one that lost its marker before it, fails
// the compile with an error saying so (P8: not a silent ~100x slower
// lowering).
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "rbln/compiler/abi/kernel_abi.h"
#include "rbln/compiler/execution/compiled_program.h"
#include "rbln/compiler/pipelines/mlir_setup.h"
#include "rbln/compiler/pipelines/pipelines.h"
#include "rbln/compiler/testing/op_test_util.h"
#include "rbln/compiler/transforms/library/library_test_util.h"
#include "rbln/compiler/transforms/library/passes.h"

namespace rbln::compiler {
namespace {

using namespace testing;  // NOLINT: the op test helpers.
using ::testing::HasSubstr;

Stage PagedAttentionStage() {
  RegisterPagedAttentionRewritePass();
  return Stage{"paged-attention", kPagedAttentionRewritePassName, nullptr};
}

struct Counts {
  int calls = 0, blocked = 0, generics = 0;
};

Counts Count(mlir::ModuleOp module) {
  Counts c;
  module.walk([&](mlir::Operation* op) {
    if (auto call = llvm::dyn_cast<mlir::func::CallOp>(op);
        call && call.getCallee() == kPagedAttentionSymbol) {
      ++c.calls;
    }
    if (llvm::isa<mlir::scf::ForOp>(op) && op->hasAttr(kParallelIterationsAttr)) ++c.blocked;
    if (op->hasAttr(kPagedAttentionAttr)) ++c.generics;
  });
  return c;
}

TEST(PagedAttentionRewritePassTest, GenericBecomesCalls) {
  auto context = CreateCompilerContext();
  PagedAttentionShape small;  // 3 x 2 items over 64 keys, little work: one call
  small.dim = 16;
  PagedAttentionShape decode;  // 16 requests x 4 kv heads over 128 keys: blocks
  decode.batch = 16;
  decode.heads = 8;
  decode.kv_heads = 4;
  decode.num_blocks = 200;
  decode.table_width = 8;
  PagedAttentionShape consumed = small;  // an element-wise consumer does not absorb it
  consumed.negated = true;
  for (auto [s, blocked] :
       {std::pair{small, 0}, std::pair{decode, 1}, std::pair{consumed, 0}}) {
    auto module = ImportAndRewrite(PagedAttentionGraph(s), context.get(), {PagedAttentionStage()});
    ASSERT_TRUE(module.ok()) << module.status();
    const Counts c = Count(**module);
    EXPECT_EQ(c.calls, 1) << s.batch;
    EXPECT_EQ(c.blocked, blocked) << s.batch;
    EXPECT_EQ(c.generics, 0) << s.batch;
  }
}

TEST(PagedAttentionRewritePassTest, CallsComputeTheGenericsValues) {
  PagedAttentionShape decode;
  decode.dtype = ir::BFLOAT16;
  PagedAttentionShape prefill;
  prefill.negated = true;
  prefill.q_len = 6;
  prefill.heads = 8;
  prefill.sliding_window = 11;
  prefill.soft_cap = 0.5;  // scores ~[-1, 1] squashed
  prefill.index_dtype = ir::INT32;
  PagedAttentionShape sinks = prefill;  // gpt-oss: sinks with a window, bf16
  sinks.soft_cap = 0.0;
  sinks.dtype = ir::BFLOAT16;
  sinks.sinks = sinks.heads;
  uint32_t seed = 1;
  for (const PagedAttentionShape& s : {decode, prefill, sinks}) {
    const ir::Graph graph = PagedAttentionGraph(s);
    const int64_t tokens = s.batch * s.q_len;
    // Block ids 1.., shuffled by a stride coprime with the cache's blocks.
    std::vector<double> table, positions;
    for (int64_t i = 0; i < s.batch * s.table_width; ++i) {
      table.push_back(1 + (i * 7) % (s.num_blocks - 1));
    }
    for (int64_t b = 0; b < s.batch; ++b) {
      const int64_t end = s.q_len - 1 + (b * 23) % (s.table_width * s.block_size - s.q_len + 1);
      for (int64_t q = 0; q < s.q_len; ++q) positions.push_back(end - (s.q_len - 1 - q));
    }
    std::vector<HostTensor> inputs = {
        Random(s.dtype, {tokens, s.heads, s.dim}, seed++, -1, 1),
        Random(s.dtype, {2, s.kv_heads, s.num_blocks * s.block_size, s.dim}, seed++, -1, 1),
        Tensor(s.index_dtype, {s.batch, s.table_width}, table),
        Tensor(s.index_dtype, {tokens}, positions)};
    if (s.sinks > 0) inputs.push_back(Random(s.sinks_dtype, {s.sinks}, seed++, -2, 3));
    auto run = RunWithoutAndWithRewrite(
        graph, PagedAttentionStage(), inputs, [](mlir::ModuleOp module, bool rewritten) {
          EXPECT_EQ(Count(module).calls, rewritten ? 1 : 0);
          EXPECT_EQ(Count(module).generics, rewritten ? 0 : 1);
        });
    ASSERT_TRUE(run.ok()) << run.status();
    const auto& results = *run;
    ASSERT_EQ(results[0].size(), results[1].size());
    const double tol = s.dtype == ir::BFLOAT16 ? 8e-3 : 1e-5;
    for (size_t i = 0; i < results[0].size(); ++i) {
      // Both f32 online softmaxes of the same values (summed in another
      // order), rounded once.
      ASSERT_NEAR(results[1][i], results[0][i], tol) << "q_len " << s.q_len << " element " << i;
    }
  }
}

// The module after fusion and bufferization with `edit` applied to the
// marked generic, then the rewrite: its error.
std::string RewriteError(const std::function<void(mlir::linalg::GenericOp)>& edit) {
  auto context = CreateCompilerContext();
  PagedAttentionShape s;
  s.negated = true;  // with an element-wise consumer
  const ir::Graph graph = PagedAttentionGraph(s);
  auto module = ImportAndRewrite(graph, context.get(), {});
  if (!module.ok()) return "import failed: " + std::string(module.status().message());
  int edited = 0;
  (**module).walk([&](mlir::linalg::GenericOp op) {
    if (op->hasAttr(kPagedAttentionAttr)) {
      edit(op);
      ++edited;
    }
  });
  if (edited != 1) return "marked generics: " + std::to_string(edited);
  absl::Status status = RunStages(**module, {PagedAttentionStage()}, graph.name());
  return status.ok() ? "no error" : std::string(status.message());
}

TEST(PagedAttentionRewritePassTest, OpThatLostItsMarkerFailsTheCompile) {
  // What element-wise fusion merging the op into its consumer leaves.
  const std::string error =
      RewriteError([](mlir::linalg::GenericOp op) { op->removeAttr(kPagedAttentionAttr); });
  EXPECT_THAT(error, HasSubstr("compiler stage 'paged-attention' failed"));
  EXPECT_THAT(error, HasSubstr("paged attention lost its rbln.paged_attention marker before the "
                               "rewrite to rbln_paged_attention calls (1 marked, 0 reached it"));
}

TEST(PagedAttentionRewritePassTest, MarkedOpItCannotTakeFailsTheCompile) {
  const std::string error = RewriteError([](mlir::linalg::GenericOp op) {
    op->setAttr(kPagedAttentionAttr, mlir::DictionaryAttr::get(op->getContext(), {}));
  });
  EXPECT_THAT(error, HasSubstr("paged attention cannot become rbln_paged_attention calls: its "
                               "marker lacks block_size, scale, sliding_window, "
                               "soft_cap or sinks"));
}

}  // namespace
}  // namespace rbln::compiler
