// spec: P5, A2, P8
// The masked attention rewrite: the attention converter's marked generic
// becomes rbln_masked_attention calls (blocks of work items in a parallel
// loop when the problem is large), and the program with the calls computes
// the generic's own values (its element-wise online softmax, what runs
// without the rewrite): a static KV cache's prefill and decode (keys past
// the position hidden by a -inf bf16 mask, one for all heads), GQA, a bool
// mask with a padding row, causal without a mask, a per-head f32 mask,
// f32, bf16 and f16, and the flash op (whose logsumexp still comes from
// the composed steps). The full pipeline runs the kernel (its counter). A
// marked op the rewrite cannot take, or a key loop whose generic lost its
// marker, fails the compile saying so (P8).
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
#include "rbln/core/counters.h"

namespace rbln::compiler {
namespace {

using namespace testing;  // NOLINT: the op test helpers.
using ::testing::HasSubstr;

Stage MaskedAttentionStage() {
  RegisterMaskedAttentionRewritePass();
  return Stage{"masked-attention", kMaskedAttentionRewritePassName, nullptr};
}

struct Counts {
  int calls = 0, blocked = 0, generics = 0;
};

Counts Count(mlir::ModuleOp module) {
  Counts c;
  module.walk([&](mlir::Operation* op) {
    if (auto call = llvm::dyn_cast<mlir::func::CallOp>(op);
        call && call.getCallee() == kMaskedAttentionSymbol) {
      ++c.calls;
    }
    if (llvm::isa<mlir::scf::ForOp>(op) && op->hasAttr(kParallelIterationsAttr)) ++c.blocked;
    if (op->hasAttr(kMaskedAttentionAttr)) ++c.generics;
  });
  return c;
}

struct Case {
  std::string name;
  ir::DType dtype = ir::BFLOAT16;
  int64_t batch = 1, heads = 4, kv_heads = 2, q_len = 6, kv_len = 40, dim = 16;
  // Mask: "static" (-inf past each query's position, [B, 1, L, S] in the
  // query's dtype), "bool" (a padding row), "per_head" (f32 [B, H, L, S]
  // biases), "" none.
  std::string mask = "static";
  bool causal = false;
  bool flash = false;
};

std::vector<HostTensor> Inputs(const Case& c, ir::Graph& graph) {
  uint32_t seed = 1;
  std::vector<HostTensor> inputs = {
      Random(c.dtype, {c.batch, c.heads, c.q_len, c.dim}, seed++, -1, 1),
      Random(c.dtype, {c.batch, c.kv_heads, c.kv_len, c.dim}, seed++, -1, 1),
      Random(c.dtype, {c.batch, c.kv_heads, c.kv_len, c.dim}, seed++, -1, 1)};
  if (c.mask == "static" || c.mask == "bool") {
    std::vector<double> m;
    for (int64_t b = 0; b < c.batch; ++b) {
      for (int64_t i = 0; i < c.q_len; ++i) {
        const int64_t position = 7 + 5 * b + i;
        for (int64_t j = 0; j < c.kv_len; ++j) {
          const bool keep = j <= position && !(c.mask == "bool" && i == 1);
          m.push_back(c.mask == "bool" ? keep : keep ? 0.0 : -INFINITY);
        }
      }
    }
    inputs.push_back(Tensor(c.mask == "bool" ? ir::BOOL : c.dtype, {c.batch, 1, c.q_len, c.kv_len},
                            m));
  } else if (c.mask == "per_head") {
    inputs.push_back(Random(ir::FLOAT32, {c.batch, c.heads, c.q_len, c.kv_len}, seed++, -1, 1));
  }
  std::vector<ir::TensorType> types, outs = {Type(c.dtype, {c.batch, c.heads, c.q_len, c.dim})};
  for (const HostTensor& t : inputs) types.push_back(t.type());
  if (c.flash) outs.push_back(Type(ir::FLOAT32, {c.batch, c.heads, c.q_len}));
  graph = OneOpGraph(c.flash ? "_scaled_dot_product_flash_attention_for_cpu"
                             : "scaled_dot_product_attention",
                     types, outs,
                     {{"is_causal", BoolA(c.causal)}, {"enable_gqa", BoolA(c.heads != c.kv_heads)}});
  return inputs;
}

std::vector<Case> Cases() {
  Case prefill{"static_cache_prefill_gqa"};
  Case decode{"static_cache_decode_f32", ir::FLOAT32, 3, 8, 2, 1, 300, 64};
  Case padded{"bool_mask_padding_row_f16", ir::FLOAT16};
  padded.mask = "bool";
  Case causal{"causal_no_mask", ir::BFLOAT16, 2, 4, 4, 9, 9};
  causal.mask = "";
  causal.causal = true;
  Case per_head{"per_head_f32_mask_flash", ir::FLOAT32};
  per_head.mask = "per_head";
  per_head.flash = true;
  return {prefill, decode, padded, causal, per_head};
}

TEST(MaskedAttentionRewritePassTest, CallsComputeTheGenericsValues) {
  for (const Case& c : Cases()) {
    ir::Graph graph;
    const std::vector<HostTensor> inputs = Inputs(c, graph);
    auto run = RunWithoutAndWithRewrite(
        graph, MaskedAttentionStage(), inputs, [&](mlir::ModuleOp module, bool rewritten) {
          EXPECT_EQ(Count(module).calls, rewritten ? 1 : 0) << c.name;
          EXPECT_EQ(Count(module).generics, rewritten ? 0 : 1) << c.name;
        });
    ASSERT_TRUE(run.ok()) << c.name << ": " << run.status();
    const auto& results = *run;
    ASSERT_EQ(results[0].size(), results[1].size());
    // Both f32 online softmaxes of the same values (summed in another
    // order), rounded once.
    const double tol = c.dtype == ir::BFLOAT16 ? 8e-3 : c.dtype == ir::FLOAT16 ? 1e-3 : 1e-5;
    for (size_t i = 0; i < results[0].size(); ++i) {
      ASSERT_NEAR(results[1][i], results[0][i], tol) << c.name << " element " << i;
    }
  }
}

// Attention without a mask (an encoder's) takes the kernel for decode-sized
// rows or from 512 keys on, and stays the composition's GEMMs for many rows
// against fewer keys; either way the values are the composition's.
TEST(MaskedAttentionRewritePassTest, UnmaskedAttentionTakesTheKernelFromLongKeys) {
  for (int64_t kv_len : {448, 512}) {
    Case c{"unmasked_" + std::to_string(kv_len), ir::BFLOAT16, 1, 2, 2, 40, kv_len, 16};
    c.mask = "";
    ir::Graph graph;
    const std::vector<HostTensor> inputs = Inputs(c, graph);
    const bool kernel = kv_len >= 512;
    auto run = RunWithoutAndWithRewrite(
        graph, MaskedAttentionStage(), inputs, [&](mlir::ModuleOp module, bool rewritten) {
          EXPECT_EQ(Count(module).calls, kernel && rewritten ? 1 : 0) << c.name;
          EXPECT_EQ(Count(module).generics, kernel && !rewritten ? 1 : 0) << c.name;
        });
    ASSERT_TRUE(run.ok()) << c.name << ": " << run.status();
    const auto& results = *run;
    for (size_t i = 0; i < results[0].size(); ++i) {
      ASSERT_NEAR(results[1][i], results[0][i], 8e-3) << c.name << " element " << i;
    }
  }
}

// A NaN in a query row makes that row NaN in both lowerings (as PyTorch's
// softmax), also where the row's first keys are hidden; other rows agree.
TEST(MaskedAttentionRewritePassTest, ANanQueryRowIsNanInBothLowerings) {
  const Case c = Cases()[0];
  ir::Graph graph;
  std::vector<HostTensor> inputs = Inputs(c, graph);
  inputs[0].values[3] = NAN;  // batch 0, head 0, query 0
  auto run = RunWithoutAndWithRewrite(graph, MaskedAttentionStage(), inputs,
                                      [](mlir::ModuleOp, bool) {});
  ASSERT_TRUE(run.ok()) << run.status();
  for (bool rewritten : {false, true}) {
    const std::vector<double>& out = (*run)[rewritten];
    for (int64_t i = 0; i < static_cast<int64_t>(out.size()); ++i) {
      EXPECT_EQ(std::isnan(out[i]), i < c.dim) << "rewritten " << rewritten << " element " << i;
    }
  }
}

// A decode step over a long cache is cut into blocks of (batch x kv head)
// items; the whole pipeline takes the kernel (its items counter moves).
TEST(MaskedAttentionRewritePassTest, LargeProblemsAreBlockedAndTheFullPipelineRunsTheKernel) {
  const Case decode = Cases()[1];
  ir::Graph graph;
  const std::vector<HostTensor> inputs = Inputs(decode, graph);
  auto context = CreateCompilerContext();
  auto module = ImportAndRewrite(graph, context.get(), {MaskedAttentionStage()});
  ASSERT_TRUE(module.ok()) << module.status();
  EXPECT_EQ(Count(**module).calls, 1);
  EXPECT_EQ(Count(**module).blocked, 1);
  Counter* items = CounterRegistry::Global().Get("compiler/masked_attention/items");
  const int64_t before = items->value();
  absl::StatusOr<std::vector<HostTensor>> out = CompileAndRun(graph, inputs);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(items->value() - before, decode.batch * decode.kv_heads);
}

// The module after fusion and bufferization with `edit` applied to the
// marked generic, then the rewrite: its error.
std::string RewriteError(const std::function<void(mlir::linalg::GenericOp)>& edit) {
  auto context = CreateCompilerContext();
  ir::Graph graph;
  Inputs(Cases()[0], graph);
  auto module = ImportAndRewrite(graph, context.get(), {});
  if (!module.ok()) return "import failed: " + std::string(module.status().message());
  int edited = 0;
  (**module).walk([&](mlir::linalg::GenericOp op) {
    if (op->hasAttr(kMaskedAttentionAttr)) {
      edit(op);
      ++edited;
    }
  });
  if (edited != 1) return "marked generics: " + std::to_string(edited);
  absl::Status status = RunStages(**module, {MaskedAttentionStage()}, graph.name());
  return status.ok() ? "no error" : std::string(status.message());
}

TEST(MaskedAttentionRewritePassTest, KeyLoopThatLostItsMarkerFailsTheCompile) {
  // What element-wise fusion merging the op into its consumer leaves.
  const std::string error =
      RewriteError([](mlir::linalg::GenericOp op) { op->removeAttr(kMaskedAttentionAttr); });
  EXPECT_THAT(error, HasSubstr("compiler stage 'masked-attention' failed"));
  EXPECT_THAT(error, HasSubstr("masked attention lost its rbln.masked_attention marker before "
                               "the rewrite to rbln_masked_attention calls"));
}

TEST(MaskedAttentionRewritePassTest, MarkedOpItCannotTakeFailsTheCompile) {
  const std::string error = RewriteError([](mlir::linalg::GenericOp op) {
    op->setAttr(kMaskedAttentionAttr, mlir::DictionaryAttr::get(op->getContext(), {}));
  });
  EXPECT_THAT(error, HasSubstr("masked attention cannot become rbln_masked_attention calls: its "
                               "marker lacks scale, causal or mask"));
}

}  // namespace
}  // namespace rbln::compiler
