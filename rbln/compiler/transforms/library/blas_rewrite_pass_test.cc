// spec: P5
// The BLAS rewrite: which GEMMs become cblas_sgemm calls, and that BLAS and
// loops agree. Built twice: as is, and with RBLN_COMPILER_BLAS=0.
#include "rbln/compiler/transforms/library/passes.h"

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "llvm/Config/llvm-config.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Parser/Parser.h"
#include "rbln/compiler/execution/compiled_program.h"
#include "rbln/compiler/frontend/frontend.h"
#include "rbln/compiler/ir/graph_util.h"
#include "rbln/compiler/kernels/blas_loader.h"
#include "rbln/compiler/kernels/onednn_gemm.h"
#include "rbln/compiler/pipelines/mlir_setup.h"
#include "rbln/compiler/pipelines/pipelines.h"
#include "rbln/compiler/testing/op_test_util.h"
#include "rbln/compiler/transforms/library/library_test_util.h"
#include "rbln/compiler/transforms/passes.h"

namespace rbln::compiler {
namespace {

using namespace testing;  // NOLINT: the op test helpers.

Stage BlasStage() {
  RegisterBlasRewritePass();
  return Stage{"blas", kBlasRewritePassName, nullptr};
}

Stage OnednnStage() {
  RegisterBlasRewritePass();
  return Stage{"blas", std::string(kBlasRewritePassName) + "{library=onednn}",
               nullptr};
}

// The oneDNN rewrite, or none (the loops).
std::vector<Stage> OnednnStages(bool onednn) {
  if (!onednn) return {};
  return {OnednnStage()};
}

int CountSgemmCalls(mlir::ModuleOp m) {
  int n = 0;
  m.walk([&](mlir::func::CallOp call) {
    if (call.getCallee() == kSgemmName) ++n;
  });
  return n;
}

// Imports `graph` and runs fusion, bufferization and the BLAS stage.
mlir::OwningOpRef<mlir::ModuleOp> RewriteGraph(const ir::Graph& graph,
                                               mlir::MLIRContext* context,
                                               Stage blas = BlasStage()) {
  auto module = ImportAndRewrite(graph, context, {blas});
  EXPECT_TRUE(module.ok()) << module.status();
  if (!module.ok()) return nullptr;
  return std::move(*module);
}

TEST(BlasRewritePassTest, RewritesF32GemmsToSgemmCalls) {
  const ir::DType f = ir::FLOAT32;
  struct Case {
    ir::Graph graph;
    int calls, loops;  // sgemm calls, scf.for loops around them
  };
  for (const Case& c : std::vector<Case>{
           {OneOpGraph("mm", {Type(f, {3, 4}), Type(f, {4, 5})},
                       {Type(f, {3, 5})}),
            1, 0},
           // Half operands are converted to f32 first, so BLAS still applies.
           {OneOpGraph("mm",
                       {Type(ir::FLOAT16, {3, 4}), Type(ir::FLOAT16, {4, 5})},
                       {Type(ir::FLOAT16, {3, 5})}),
            1, 0},
           {OneOpGraph("bmm", {Type(f, {2, 3, 4}), Type(f, {2, 4, 5})},
                       {Type(f, {2, 3, 5})}),
            1, 1},
           {OneOpGraph("linear", {Type(f, {2, 3, 4}), Type(f, {5, 4})},
                       {Type(f, {2, 3, 5})}),
            1, 0},
       }) {
    auto context = CreateCompilerContext();
    mlir::OwningOpRef<mlir::ModuleOp> module =
        RewriteGraph(c.graph, context.get());
    ASSERT_TRUE(module);
    const std::string what = ir::ToText(c.graph);
    EXPECT_EQ(Count<mlir::linalg::MatmulOp>(*module), 0) << what;
    EXPECT_EQ(Count<mlir::linalg::MatmulTransposeBOp>(*module), 0) << what;
    EXPECT_EQ(Count<mlir::linalg::BatchMatmulOp>(*module), 0) << what;
    EXPECT_EQ(CountSgemmCalls(*module), c.calls) << what;
    EXPECT_EQ(Count<mlir::scf::ForOp>(*module), c.loops) << what;
    auto decl = module->lookupSymbol<mlir::func::FuncOp>(kSgemmName);
    ASSERT_TRUE(decl) << what;
    EXPECT_TRUE(decl.isPrivate());
    EXPECT_TRUE(decl.isExternal());
    EXPECT_EQ(decl.getNumArguments(), 14u);
  }
}

TEST(BlasRewritePassTest, LeavesWhatBlasCannotDoToTheLoops) {
  for (const ir::Graph& g : {
           // Not f32.
           OneOpGraph("mm", {Type(ir::INT32, {3, 4}), Type(ir::INT32, {4, 5})},
                      {Type(ir::INT32, {3, 5})}),
           // k = 0: BLAS rejects lda = 0 (canonicalization drops this one).
           OneOpGraph("mm",
                      {Type(ir::FLOAT32, {3, 0}), Type(ir::FLOAT32, {0, 5})},
                      {Type(ir::FLOAT32, {3, 5})}),
       }) {
    auto context = CreateCompilerContext();
    mlir::OwningOpRef<mlir::ModuleOp> module = RewriteGraph(g, context.get());
    ASSERT_TRUE(module);
    EXPECT_EQ(CountSgemmCalls(*module), 0) << ir::ToText(g);
    EXPECT_FALSE(module->lookupSymbol(kSgemmName)) << ir::ToText(g);
  }
}

// Both paths agree within tolerance (BLAS may reassociate the k-sum) with
// each other and with a double reference.
TEST(BlasRewritePassTest, BlasAndLoopsAgree) {
  if (!LoadOpenBlas()) GTEST_SKIP() << "libopenblas.so.0 is not installed";
  const ir::DType f = ir::FLOAT32;
  struct Case {
    ir::Graph graph;
    std::vector<HostTensor> inputs;
  };
  for (const Case& c : std::vector<Case>{
           {OneOpGraph("mm", {Type(f, {64, 48}), Type(f, {48, 40})},
                       {Type(f, {64, 40})}),
            {Random(f, {64, 48}, 1), Random(f, {48, 40}, 2)}},
           {OneOpGraph("matmul", {Type(f, {2, 1, 9, 17}), Type(f, {3, 17, 5})},
                       {Type(f, {2, 3, 9, 5})}),
            {Random(f, {2, 1, 9, 17}, 3), Random(f, {3, 17, 5}, 4)}},
           {OneOpGraph("linear",
                       {Type(f, {4, 7, 33}), Type(f, {19, 33}), Type(f, {19})},
                       {Type(f, {4, 7, 19})}),
            {Random(f, {4, 7, 33}, 5), Random(f, {19, 33}, 6),
             Random(f, {19}, 7)}},
           {OneOpGraph("addmm",
                       {Type(f, {8}), Type(f, {5, 30}), Type(f, {30, 8})},
                       {Type(f, {5, 8})},
                       {{"alpha", FloatA(0.5)}, {"beta", FloatA(2)}}),
            {Random(f, {8}, 8), Random(f, {5, 30}, 9), Random(f, {30, 8}, 10)}},
           {OneOpGraph(
                "mm", {Type(ir::FLOAT16, {16, 64}), Type(ir::FLOAT16, {64, 8})},
                {Type(ir::FLOAT16, {16, 8})}),
            {Random(ir::FLOAT16, {16, 64}, 11),
             Random(ir::FLOAT16, {64, 8}, 12)}},
       }) {
    const std::string what = ir::ToText(c.graph);
    std::vector<std::vector<double>> results;
    for (bool blas : {true, false}) {
      auto context = CreateCompilerContext();
      auto module = ImportAndRewrite(c.graph, context.get(),
                                     blas ? std::vector<Stage>{BlasStage()}
                                          : std::vector<Stage>{});
      ASSERT_TRUE(module.ok()) << module.status();
      auto program = LowerToProgram(**module, c.graph);
      ASSERT_TRUE(program.ok()) << program.status();
      // After lowering, only the BLAS path references cblas_sgemm.
      EXPECT_EQ(static_cast<bool>((*module)->lookupSymbol(kSgemmName)), blas)
          << what;
      auto out = RunProgram(**program, c.inputs);
      ASSERT_TRUE(out.ok()) << out.status();
      results.push_back((*out)[0].values);
    }
    const ir::DType out_dtype = c.graph.nodes(0).outputs(0).type().dtype();
    std::vector<double> tol;
    for (double v : results[1]) {
      // Operands are in [-2, 2), k <= 64: |sum| <= 256.
      tol.push_back(2 * UnitRoundoff(out_dtype) * std::fabs(v) +
                    256 * 64 * 6e-8);
    }
    ExpectClose(HostTensor{out_dtype, {}, results[0]}, results[1], tol, what);
  }
}

// The rbln_gemm calls of `m`, with their operand type argument
// (GemmOperandType) and block count.
struct GemmCall {
  int64_t type, blocks;
  StoreType store = StoreType::kF32;  // rbln_gemm_problem's epilogue
  int64_t trans_b = -1;
  bool bias = false;  // rbln_gemm_problem's epilogue adds a bias
  bool relu = false;  // and applies a ReLU
};
// The rbln_gemm and rbln_gemm_problem calls of `m` (the latter's problem
// read from its constant global).
std::vector<GemmCall> OnednnCalls(mlir::ModuleOp m) {
  std::vector<GemmCall> calls;
  auto constant = [](mlir::Value v) -> int64_t {
    auto c = v.getDefiningOp<mlir::arith::ConstantIntOp>();
    return c ? c.value() : -1;
  };
  m.walk([&](mlir::func::CallOp call) {
    const int64_t blocks = constant(call.getOperand(call.getNumOperands() - 1));
    if (call.getCallee() == kOnednnGemmSymbol) {
      calls.push_back({constant(call.getOperand(0)), blocks, StoreType::kF32,
                       constant(call.getOperand(1))});
      return;
    }
    if (call.getCallee() != kOnednnGemmProblemSymbol) return;
    GemmCall c{-1, blocks};
    auto cast = call.getOperand(0).getDefiningOp<mlir::arith::IndexCastOp>();
    auto pointer =
        cast ? cast.getIn().getDefiningOp<mlir::memref::ExtractAlignedPointerAsIndexOp>()
             : nullptr;
    auto get = pointer ? pointer.getSource().getDefiningOp<mlir::memref::GetGlobalOp>()
                       : nullptr;
    auto global =
        get ? m.lookupSymbol<mlir::memref::GlobalOp>(get.getName()) : nullptr;
    if (global && global.getInitialValue()) {
      std::vector<int64_t> words;
      for (const llvm::APInt& w :
           global.getInitialValue()->cast<mlir::DenseIntElementsAttr>()) {
        words.push_back(w.getSExtValue());
      }
      const GemmProblem p = GemmProblem::Decode(words.data());
      c.type = static_cast<int64_t>(p.type);
      c.store = p.epilogue.store;
      c.trans_b = p.trans_b;
      c.bias = p.epilogue.bias_row >= 0;
      c.relu = p.epilogue.ops.size() == 1 && !p.epilogue.ops[0].binary &&
               p.epilogue.ops[0].fn == static_cast<int64_t>(EltwiseFn::kRelu);
    }
    calls.push_back(c);
  });
  return calls;
}

// x @ t(w), as a decomposed linear writes it (t or permute, then mm; x
// [m, k], w [n, k]).
ir::Graph PermuteMmGraph(ir::DType d, int64_t m, int64_t n, int64_t k) {
  ir::Graph g;
  g.set_name("permute_mm");
  AddInput(g, "x", Type(d, {m, k}));
  AddInput(g, "w", Type(d, {n, k}));
  AddNode(g, "t", {"w"}, "wt", Type(d, {k, n}));
  AddNode(g, "mm", {"x", "wt"}, "out", Type(d, {m, n}));
  g.add_outputs("out");
  return g;
}

// The trans_b argument of the only rbln_gemm call.
int64_t TransBOfOnlyCall(mlir::ModuleOp m) {
  std::vector<GemmCall> calls = OnednnCalls(m);
  return calls.size() == 1 ? calls[0].trans_b : -1;
}

TEST(BlasRewritePassTest, OnednnReadsAPermutedRightOperandTransposed) {
  // bf16 and f16: the permute fused with the widening (one generic,
  // transposing map); f32: the permute's copy. All go away: B is read as
  // [n, k] (bf16's rounding of C is the call's store, f16's stays).
  for (auto [dtype, generics] :
       {std::pair{ir::BFLOAT16, 0}, {ir::FLOAT32, 0}, {ir::FLOAT16, 1}}) {
    const ir::Graph g = PermuteMmGraph(dtype, 6, 5, 4);
    auto context = CreateCompilerContext();
    mlir::OwningOpRef<mlir::ModuleOp> module =
        RewriteGraph(g, context.get(), OnednnStage());
    ASSERT_TRUE(module);
    const std::string what = ir::ToText(g);
    std::vector<GemmCall> calls = OnednnCalls(*module);
    ASSERT_EQ(calls.size(), 1u) << what;
    EXPECT_EQ(calls[0].type, dtype == ir::BFLOAT16 ? 1
                             : dtype == ir::FLOAT16 ? 2
                                                    : 0)
        << what;
    EXPECT_EQ(TransBOfOnlyCall(*module), 1) << what;
    EXPECT_EQ(Count<mlir::linalg::GenericOp>(*module), generics) << what;
  }
}

// Composed attention's two products in a bf16 (f16) graph take the half
// operands as stored: q @ k^T is one batched GEMM reading k as [S, E] rows
// (no transposed or widened copy of k), p @ v reads v as is (p rounded to
// the input dtype first, frontend/ops/attention_ops.cc). Rank-3 operands:
// the masked attention kernel (rank 4) does not take them.
TEST(BlasRewritePassTest, OnednnRunsAttentionOnHalfOperandsWithKeyReadTransposed) {
  for (auto [dtype, type] : {std::pair{ir::BFLOAT16, 1}, {ir::FLOAT16, 2}, {ir::FLOAT32, 0}}) {
    ir::Graph g;
    g.set_name("sdpa");
    AddInput(g, "q", Type(dtype, {6, 4, 8}));
    AddInput(g, "k", Type(dtype, {6, 5, 8}));
    AddInput(g, "v", Type(dtype, {6, 5, 6}));
    AddNode(g, "scaled_dot_product_attention", {"q", "k", "v"}, "out",
            Type(dtype, {6, 4, 6}));
    g.add_outputs("out");
    auto context = CreateCompilerContext();
    mlir::OwningOpRef<mlir::ModuleOp> module = RewriteGraph(g, context.get(), OnednnStage());
    ASSERT_TRUE(module);
    const std::string what = ir::ToText(g);
    std::vector<GemmCall> calls = OnednnCalls(*module);
    ASSERT_EQ(calls.size(), 2u) << what;
    EXPECT_EQ(calls[0].type, type) << what;
    EXPECT_EQ(calls[0].trans_b, 1) << what;
    EXPECT_EQ(calls[1].trans_b, 0) << what;
#if LLVM_VERSION_MAJOR < 19
    EXPECT_EQ(calls[1].type, type) << what;
#else
    // Known gap under MLIR 19: p's rounding to the input dtype is not
    // matched as a narrow operand there, so p @ v runs as an f32 GEMM
    // (correct, attention_ops_test; slower). Debian 12's MLIR 16 is the
    // default build.
    EXPECT_EQ(calls[1].type, 0) << what;
#endif
  }
}

// relu(linear(x [2, 3, 4], w [5, 4], b [5])) in `dtype`.
ir::Graph LinearRelu(ir::DType dtype) {
  ir::Graph g;
  g.set_name("linear_relu");
  AddInput(g, "x", Type(dtype, {2, 3, 4}));
  AddInput(g, "w", Type(dtype, {5, 4}));
  AddInput(g, "b", Type(dtype, {5}));
  AddNode(g, "linear", {"x", "w", "b"}, "y", Type(dtype, {2, 3, 5}));
  AddNode(g, "relu", {"y"}, "out", Type(dtype, {2, 3, 5}));
  g.add_outputs("out");
  return g;
}

// linear(relu(linear(x [2, 3, 4], w1 [6, 4], b1 [6])), w2 [5, 6]) in
// `dtype`: a decoder's FFN.
ir::Graph Ffn(ir::DType dtype) {
  ir::Graph g;
  g.set_name("ffn");
  AddInput(g, "x", Type(dtype, {2, 3, 4}));
  AddInput(g, "w1", Type(dtype, {6, 4}));
  AddInput(g, "b1", Type(dtype, {6}));
  AddInput(g, "w2", Type(dtype, {5, 6}));
  AddNode(g, "linear", {"x", "w1", "b1"}, "y", Type(dtype, {2, 3, 6}));
  AddNode(g, "relu", {"y"}, "h", Type(dtype, {2, 3, 6}));
  AddNode(g, "linear", {"h", "w2"}, "out", Type(dtype, {2, 3, 5}));
  g.add_outputs("out");
  return g;
}

// In a bf16 FFN the relu's generic writes the widened values the second
// GEMM reads; that GEMM reads the generic's bf16 twin instead, so the
// generic goes, and the twin -- which only rounds the first GEMM's C --
// becomes that GEMM's epilogue: bias, relu and bf16 store in the call, no
// f32 buffer and no pass over C left.
TEST(BlasRewritePassTest, OnednnFoldsTheRoundingTwinOfAnFfnIntoItsGemm) {
  auto context = CreateCompilerContext();
  mlir::OwningOpRef<mlir::ModuleOp> module =
      RewriteGraph(Ffn(ir::BFLOAT16), context.get(), OnednnStage());
  ASSERT_TRUE(module);
  std::vector<GemmCall> calls = OnednnCalls(*module);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].type, 1);
  EXPECT_EQ(calls[0].store, StoreType::kBF16);
  EXPECT_TRUE(calls[0].bias);
  EXPECT_TRUE(calls[0].relu);
  EXPECT_EQ(calls[1].type, 1);
  EXPECT_EQ(calls[1].store, StoreType::kBF16);
  // Only the bias widened into an f32 row.
  EXPECT_EQ(Count<mlir::linalg::GenericOp>(*module), 1);
  int f32_buffers = 0;
  module->walk([&](mlir::memref::AllocOp alloc) {
    if (alloc.getType().getElementType().isF32()) ++f32_buffers;
  });
  EXPECT_EQ(f32_buffers, 1);
}

TEST(BlasRewritePassTest, OnednnTakesBf16AndF16OperandsAsTheyAre) {
  struct Case {
    ir::Graph graph;
    int64_t type;      // GemmOperandType of the call
    int64_t blocks;    // GEMM blocks
    int generics;      // linalg.generic left (widenings, epilogue)
    StoreType store;   // how the call stores C
    bool bias = false;  // the call adds the bias
    bool relu = false;  // and applies a ReLU
  };
  const ir::DType bf = ir::BFLOAT16, h = ir::FLOAT16, f = ir::FLOAT32;
  const StoreType f32 = StoreType::kF32, bf16 = StoreType::kBF16;
  for (const Case& c : std::vector<Case>{
           // f32: the zero fill of C is dropped, the call overwrites C.
           {OneOpGraph("mm", {Type(f, {3, 4}), Type(f, {4, 5})},
                       {Type(f, {3, 5})}),
            0, 1, 0, f32},
           // bf16: no widening left, and the rounding to bf16 is the
           // call's store (rbln_gemm_problem with a bf16 epilogue store):
           // no f32 C, no pass over it.
           {OneOpGraph("mm", {Type(bf, {3, 4}), Type(bf, {4, 5})},
                       {Type(bf, {3, 5})}),
            1, 1, 0, bf16},
           {OneOpGraph("linear", {Type(bf, {2, 3, 4}), Type(bf, {5, 4})},
                       {Type(bf, {2, 3, 5})}),
            1, 1, 0, bf16},
           // linear's bias is added by the call too (a bf16 bias widened
           // to an f32 row first: the one generic left).
           {OneOpGraph("linear",
                       {Type(bf, {2, 3, 4}), Type(bf, {5, 4}), Type(bf, {5})},
                       {Type(bf, {2, 3, 5})}),
            1, 1, 1, bf16, true},
           {OneOpGraph("linear",
                       {Type(f, {3, 4}), Type(f, {5, 4}), Type(f, {5})},
                       {Type(f, {3, 5})}),
            0, 1, 0, f32, true},
           // A ReLU after the bf16 linear (an FFN's first half) too.
           {LinearRelu(bf), 1, 1, 1, bf16, true, true},
           // f16: no widening left either (the library widens each block:
           // oneDNN has no f16 matmul); C is rounded to f16 by a pass of
           // its own, with linear's bias added in it.
           {OneOpGraph("mm", {Type(h, {3, 4}), Type(h, {4, 5})},
                       {Type(h, {3, 5})}),
            2, 1, 1, f32},
           {OneOpGraph("linear",
                       {Type(h, {2, 3, 4}), Type(h, {5, 4}), Type(h, {5})},
                       {Type(h, {2, 3, 5})}),
            2, 1, 1, f32},
           // Large: 4 blocks in a loop the partition pass may split.
           {OneOpGraph("mm", {Type(bf, {256, 128}), Type(bf, {128, 512})},
                       {Type(bf, {256, 512})}),
            1, 4, 0, bf16},
           // A batch of skinny products (decode attention's scores: few
           // multiply-adds, 2 MB of keys): cut by the elements it moves.
           {OneOpGraph("bmm", {Type(bf, {64, 2, 64}), Type(bf, {64, 64, 256})},
                       {Type(bf, {64, 2, 256})}),
            1, 4, 0, bf16},
       }) {
    auto context = CreateCompilerContext();
    mlir::OwningOpRef<mlir::ModuleOp> module =
        RewriteGraph(c.graph, context.get(), OnednnStage());
    ASSERT_TRUE(module);
    const std::string what = ir::ToText(c.graph);
    EXPECT_EQ(Count<mlir::linalg::MatmulOp>(*module), 0) << what;
    EXPECT_EQ(Count<mlir::linalg::MatmulTransposeBOp>(*module), 0) << what;
    EXPECT_EQ(Count<mlir::linalg::FillOp>(*module), 0) << what;
    EXPECT_EQ(Count<mlir::linalg::GenericOp>(*module), c.generics) << what;
    EXPECT_EQ(CountSgemmCalls(*module), 0) << what;
    std::vector<GemmCall> calls = OnednnCalls(*module);
    ASSERT_EQ(calls.size(), 1u) << what;
    EXPECT_EQ(calls[0].type, c.type) << what;
    EXPECT_EQ(calls[0].blocks, c.blocks) << what;
    EXPECT_EQ(calls[0].store, c.store) << what;
    EXPECT_EQ(calls[0].bias, c.bias) << what;
    EXPECT_EQ(calls[0].relu, c.relu) << what;
    // No f32 buffer left for C when the call stores bf16 (only the widened
    // bias).
    if (c.store == bf16) {
      EXPECT_EQ(Count<mlir::memref::AllocOp>(*module), c.bias ? 1 : 0) << what;
    }
    int parallel_loops = 0;
    module->walk([&](mlir::scf::ForOp loop) {
      parallel_loops += loop->hasAttr(kParallelIterationsAttr);
    });
    EXPECT_EQ(parallel_loops, c.blocks > 1 ? 1 : 0) << what;
  }
}

// A bf16 source written between its widening and the GEMM: the GEMM must
// read the bits as they were at the widening (its i16 twin there), not
// the overwritten source. C is filled with 1.0 (not 0): the call
// accumulates into it.
constexpr char kOverwrittenSourceKernel[] = R"mlir(
func.func @kernel(%x: memref<2x2xi16>, %y: memref<2x2xi16>,
                  %c: memref<2x2xf32>) attributes {llvm.emit_c_interface} {
  %a = memref.alloc() : memref<2x2xf32>
  %b = memref.alloc() : memref<2x2xf32>
  %c16 = arith.constant 16 : i32
  %zero = arith.constant 0 : i16
  %one = arith.constant 1.0 : f32
  linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>,
                                   affine_map<(i, j) -> (i, j)>],
                  iterator_types = ["parallel", "parallel"]}
      ins(%x : memref<2x2xi16>) outs(%a : memref<2x2xf32>) {
  ^bb0(%in: i16, %out: f32):
    %w = arith.extui %in : i16 to i32
    %s = arith.shli %w, %c16 : i32
    %v = arith.bitcast %s : i32 to f32
    linalg.yield %v : f32
  }
  linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>,
                                   affine_map<(i, j) -> (i, j)>],
                  iterator_types = ["parallel", "parallel"]}
      ins(%y : memref<2x2xi16>) outs(%b : memref<2x2xf32>) {
  ^bb0(%in: i16, %out: f32):
    %w = arith.extui %in : i16 to i32
    %s = arith.shli %w, %c16 : i32
    %v = arith.bitcast %s : i32 to f32
    linalg.yield %v : f32
  }
  linalg.fill ins(%zero : i16) outs(%x : memref<2x2xi16>)
  linalg.fill ins(%one : f32) outs(%c : memref<2x2xf32>)
  linalg.matmul ins(%a, %b : memref<2x2xf32>, memref<2x2xf32>)
                outs(%c : memref<2x2xf32>)
  memref.dealloc %a : memref<2x2xf32>
  memref.dealloc %b : memref<2x2xf32>
  return
}
)mlir";

TEST(BlasRewritePassTest, OnednnReadsWidenedCopyOfAnOverwrittenSource) {
  if (!LoadOnednn()) GTEST_SKIP() << OnednnDescription();
  auto context = CreateCompilerContext();
  auto module = mlir::parseSourceString<mlir::ModuleOp>(kOverwrittenSourceKernel,
                                                        context.get());
  ASSERT_TRUE(module);
  ASSERT_TRUE(RunStages(*module, {OnednnStage()}, "overwritten").ok());
  std::vector<GemmCall> calls = OnednnCalls(*module);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].type, 1);  // bf16: x's twin, y itself
  EXPECT_EQ(Count<mlir::linalg::FillOp>(*module), 2);
  // The twin copying x's bits; both widenings are gone.
  EXPECT_EQ(Count<mlir::linalg::GenericOp>(*module), 1);
  ir::Graph g;
  g.set_name("overwritten");
  // x and y are bf16 (i16 bits in the kernel).
  AddInput(g, "x", Type(ir::BFLOAT16, {2, 2}));
  AddInput(g, "y", Type(ir::BFLOAT16, {2, 2}));
  ir::Node* n = g.add_nodes();
  n->set_op("opaque");
  ir::Value* v = n->add_outputs();
  v->set_name("c");
  *v->mutable_type() = Type(ir::FLOAT32, {2, 2});
  g.add_outputs("c");
  auto program = LowerToProgram(*module, g);
  ASSERT_TRUE(program.ok()) << program.status();
  const HostTensor x = Tensor(ir::BFLOAT16, {2, 2}, {1, 2, 3, 4});
  const HostTensor y = Tensor(ir::BFLOAT16, {2, 2}, {1, 0, 0, 1});
  auto out = RunProgram(**program, {x, y});
  ASSERT_TRUE(out.ok()) << out.status();
  // 1 + x @ y with x's values from before the fill.
  ExpectExact((*out)[0], {2, 3, 4, 5}, "c");
}

int CountAllocs(mlir::ModuleOp m, mlir::Type element) {
  int n = 0;
  m.walk([&](mlir::memref::AllocOp alloc) {
    n += alloc.getType().getElementType() == element;
  });
  return n;
}

// The f16 widenings the bufferized IR writes for t(x) @ t(w), as for the
// LM head (issue 17): each operand widened into an f32 buffer of its own
// by a transposing generic (arith.extf). B goes to oneDNN as w read
// transposed; A (never read transposed) from an f16 twin of its copy.
constexpr char kTransposedF16CopiesKernel[] = R"mlir(
func.func @kernel(%x: memref<3x4xf16>, %w: memref<5x3xf16>,
                  %c: memref<4x5xf32>) attributes {llvm.emit_c_interface} {
  %a = memref.alloc() : memref<4x3xf32>
  %b = memref.alloc() : memref<3x5xf32>
  %zero = arith.constant 0.0 : f32
  linalg.generic {indexing_maps = [affine_map<(i, j) -> (j, i)>,
                                   affine_map<(i, j) -> (i, j)>],
                  iterator_types = ["parallel", "parallel"]}
      ins(%x : memref<3x4xf16>) outs(%a : memref<4x3xf32>) {
  ^bb0(%in: f16, %out: f32):
    %v = arith.extf %in : f16 to f32
    linalg.yield %v : f32
  }
  linalg.generic {indexing_maps = [affine_map<(i, j) -> (j, i)>,
                                   affine_map<(i, j) -> (i, j)>],
                  iterator_types = ["parallel", "parallel"]}
      ins(%w : memref<5x3xf16>) outs(%b : memref<3x5xf32>) {
  ^bb0(%in: f16, %out: f32):
    %v = arith.extf %in : f16 to f32
    linalg.yield %v : f32
  }
  linalg.fill ins(%zero : f32) outs(%c : memref<4x5xf32>)
  linalg.matmul ins(%a, %b : memref<4x3xf32>, memref<3x5xf32>)
                outs(%c : memref<4x5xf32>)
  memref.dealloc %a : memref<4x3xf32>
  memref.dealloc %b : memref<3x5xf32>
  return
}
)mlir";

TEST(BlasRewritePassTest, OnednnReadsTransposedF16CopiesAsF16) {
  if (!LoadOnednn()) GTEST_SKIP() << OnednnDescription();
  auto context = CreateCompilerContext();
  auto module = mlir::parseSourceString<mlir::ModuleOp>(
      kTransposedF16CopiesKernel, context.get());
  ASSERT_TRUE(module);
  ASSERT_TRUE(RunStages(*module, {OnednnStage()}, "transposed_f16").ok());
  std::vector<GemmCall> calls = OnednnCalls(*module);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].type, static_cast<int64_t>(GemmOperandType::kF16));
  EXPECT_EQ(calls[0].trans_b, 1);
  // A's f16 twin (a transposing f16 copy) is the one generic left; no f32
  // operand buffer.
  EXPECT_EQ(Count<mlir::linalg::GenericOp>(*module), 1);
  EXPECT_EQ(CountAllocs(*module, mlir::Float32Type::get(context.get())), 0);
  EXPECT_EQ(CountAllocs(*module, mlir::Float16Type::get(context.get())), 1);
  ir::Graph g;
  g.set_name("transposed_f16");
  AddInput(g, "x", Type(ir::FLOAT16, {3, 4}));
  AddInput(g, "w", Type(ir::FLOAT16, {5, 3}));
  ir::Node* n = g.add_nodes();
  n->set_op("opaque");
  ir::Value* v = n->add_outputs();
  v->set_name("c");
  *v->mutable_type() = Type(ir::FLOAT32, {4, 5});
  g.add_outputs("c");
  auto program = LowerToProgram(*module, g);
  ASSERT_TRUE(program.ok()) << program.status();
  // Small integers and halves: every product and sum exact.
  std::vector<double> xs, ws;
  for (int i = 0; i < 12; ++i) xs.push_back(i * 0.5 - 2);
  for (int i = 0; i < 15; ++i) ws.push_back(7 - i);
  auto out = RunProgram(**program, {Tensor(ir::FLOAT16, {3, 4}, xs),
                                    Tensor(ir::FLOAT16, {5, 3}, ws)});
  ASSERT_TRUE(out.ok()) << out.status();
  std::vector<double> want;
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 5; ++j) {
      double sum = 0;
      for (int l = 0; l < 3; ++l) sum += xs[l * 4 + i] * ws[j * 3 + l];
      want.push_back(sum);
    }
  }
  ExpectExact((*out)[0], want, "c");
}

// h = x * g (rounded to bf16, the rounding fused with the widening for
// the GEMMs), then three linears reading h, as a layer norm feeds the
// query, key and value projections (x [m, k], g [k], w_i [n, k]).
ir::Graph SharedComputedOperandGraph(ir::DType d, int64_t m, int64_t n, int64_t k) {
  ir::Graph g;
  g.set_name("shared_operand");
  AddInput(g, "x", Type(d, {m, k}));
  AddInput(g, "g", Type(d, {k}));
  for (const char* w : {"w0", "w1", "w2"}) AddInput(g, w, Type(d, {n, k}));
  AddNode(g, "mul", {"x", "g"}, "h", Type(d, {m, k}));
  for (int i = 0; i < 3; ++i) {
    const std::string out = "out" + std::to_string(i);
    AddNode(g, "linear", {"h", "w" + std::to_string(i)}, out, Type(d, {m, n}));
    g.add_outputs(out);
  }
  return g;
}


TEST(BlasRewritePassTest, OnednnReadsComputedBf16AndF16OperandsFromATwin) {
  // Every GEMM of a bf16 (f16) graph runs in bf16 (f16): the operand
  // computed by the mul (fused with its widening) is read from one i16
  // (f16) twin shared by the three GEMMs, the weights as they are; no f32
  // operand buffer is left.
  if (!LoadOnednn()) GTEST_SKIP() << OnednnDescription();
  for (const ir::DType d : {ir::BFLOAT16, ir::FLOAT16}) {
    SCOPED_TRACE(ir::DType_Name(d));
    const ir::Graph g = SharedComputedOperandGraph(d, 9, 70, 33);
    auto context = CreateCompilerContext();
    mlir::OwningOpRef<mlir::ModuleOp> module =
        RewriteGraph(g, context.get(), OnednnStage());
    ASSERT_TRUE(module);
    std::vector<GemmCall> calls = OnednnCalls(*module);
    ASSERT_EQ(calls.size(), 3u);
    for (const GemmCall& call : calls) EXPECT_EQ(call.type, d == ir::BFLOAT16 ? 1 : 2);
    // Each GEMM has its own zero fill (transforms/fill_unsharing_pass.cc), dropped:
    // bf16 GEMMs then store their bf16 results themselves (no f32 C left);
    // f16 ones have only their three f32 results.
    EXPECT_EQ(CountAllocs(*module, mlir::Float32Type::get(context.get())),
              d == ir::BFLOAT16 ? 0 : 3)
        << "f32 GEMM results";
    const mlir::Type narrow =
        d == ir::BFLOAT16
            ? static_cast<mlir::Type>(mlir::IntegerType::get(context.get(), 16))
            : mlir::Float16Type::get(context.get());
    EXPECT_EQ(CountAllocs(*module, narrow), 1) << "one twin";
    // Against the loops (f32 GEMMs on the widened values).
    const std::vector<HostTensor> inputs = {
        Random(d, {9, 33}, 1), Random(d, {33}, 2), Random(d, {70, 33}, 3),
        Random(d, {70, 33}, 4), Random(d, {70, 33}, 5)};
    std::vector<std::vector<HostTensor>> results;
    for (bool onednn : {true, false}) {
      auto context = CreateCompilerContext();
      auto imported = ImportAndRewrite(g, context.get(), OnednnStages(onednn));
      ASSERT_TRUE(imported.ok()) << imported.status();
      auto program = LowerToProgram(**imported, g);
      ASSERT_TRUE(program.ok()) << program.status();
      auto out = RunProgram(**program, inputs);
      ASSERT_TRUE(out.ok()) << out.status();
      results.push_back(*out);
    }
    for (int i = 0; i < 3; ++i) {
      std::vector<double> tol;
      for (double v : results[1][i].values) {
        // h in [-4, 4), w in [-2, 2), k = 33: f32 summation order differs,
        // both round once to the output type.
        tol.push_back(2 * UnitRoundoff(d) * std::fabs(v) + 33 * 8 * 6e-8);
      }
      ExpectClose(results[0][i], results[1][i].values, tol, "out" + std::to_string(i));
    }
  }
}

// A bf16 GEMM whose f32 C is rounded to bf16 (%out), but also read by
// another op (%also) in the first kernel, and whose rounded buffer is
// written between the GEMM and the rounding in the second: C must stay
// f32 and the rounding a pass of its own in both. (Without either, the
// call stores bf16, also into a buffer allocated after the GEMM.)
constexpr char kRoundingKernels[] = R"mlir(
func.func @kernel(%x: memref<4x4xi16>, %y: memref<4x4xi16>,
                  %out: memref<4x4xi16>, %also: memref<4x4xf32>)
    attributes {llvm.emit_c_interface} {
  %a = memref.alloc() : memref<4x4xf32>
  %b = memref.alloc() : memref<4x4xf32>
  %c = memref.alloc() : memref<4x4xf32>
  %c16 = arith.constant 16 : i32
  %c1 = arith.constant 1 : i32
  %c7fff = arith.constant 32767 : i32
  %nan = arith.constant 32704 : i32
  %zero = arith.constant 0.0 : f32
  %zero16 = arith.constant 0 : i16
  linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>,
                                   affine_map<(i, j) -> (i, j)>],
                  iterator_types = ["parallel", "parallel"]}
      ins(%x : memref<4x4xi16>) outs(%a : memref<4x4xf32>) {
  ^bb0(%in: i16, %o: f32):
    %w = arith.extui %in : i16 to i32
    %s = arith.shli %w, %c16 : i32
    %v = arith.bitcast %s : i32 to f32
    linalg.yield %v : f32
  }
  linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>,
                                   affine_map<(i, j) -> (i, j)>],
                  iterator_types = ["parallel", "parallel"]}
      ins(%y : memref<4x4xi16>) outs(%b : memref<4x4xf32>) {
  ^bb0(%in: i16, %o: f32):
    %w = arith.extui %in : i16 to i32
    %s = arith.shli %w, %c16 : i32
    %v = arith.bitcast %s : i32 to f32
    linalg.yield %v : f32
  }
  linalg.fill ins(%zero : f32) outs(%c : memref<4x4xf32>)
  linalg.matmul ins(%a, %b : memref<4x4xf32>, memref<4x4xf32>)
                outs(%c : memref<4x4xf32>)
  WRITE_BETWEEN
  linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>,
                                   affine_map<(i, j) -> (i, j)>],
                  iterator_types = ["parallel", "parallel"]}
      ins(%c : memref<4x4xf32>) outs(%out : memref<4x4xi16>) {
  ^bb0(%in: f32, %o: i16):
    %u = arith.bitcast %in : f32 to i32
    %h = arith.shrui %u, %c16 : i32
    %l = arith.andi %h, %c1 : i32
    %bias = arith.addi %l, %c7fff : i32
    %sum = arith.addi %u, %bias : i32
    %r = arith.shrui %sum, %c16 : i32
    %isnan = arith.cmpf uno, %in, %in : f32
    %sel = arith.select %isnan, %nan, %r : i32
    %t = arith.trunci %sel : i32 to i16
    linalg.yield %t : i16
  }
  OTHER_READER
  memref.dealloc %a : memref<4x4xf32>
  memref.dealloc %b : memref<4x4xf32>
  memref.dealloc %c : memref<4x4xf32>
  return
}
)mlir";

TEST(BlasRewritePassTest, OnednnStoresBf16OnlyWhenTheRoundingIsCsOnlyReader) {
  const std::string kernel = kRoundingKernels;
  auto with = [&](const std::string& between, const std::string& reader) {
    std::string k = kernel;
    k.replace(k.find("WRITE_BETWEEN"), 13, between);
    k.replace(k.find("OTHER_READER"), 12, reader);
    return k;
  };
  const std::string copy_c =
      "memref.copy %c, %also : memref<4x4xf32> to memref<4x4xf32>";
  const std::string fill_out =
      "linalg.fill ins(%zero16 : i16) outs(%out : memref<4x4xi16>)";
  struct Case {
    std::string kernel;
    StoreType store;
    int generics;  // the rounding, if it stays
  };
  // The rounded buffer allocated after the GEMM (as bufferization places
  // a linear's result): the allocation moves up to the call.
  std::string late = with("%late = memref.alloc() : memref<4x4xi16>",
                          "memref.copy %late, %out : memref<4x4xi16> to "
                          "memref<4x4xi16>");
  const std::string rounded_into = "outs(%out : memref<4x4xi16>) {";
  late.replace(late.find(rounded_into), rounded_into.size(),
               "outs(%late : memref<4x4xi16>) {");
  for (const Case& c : std::vector<Case>{{with("", ""), StoreType::kBF16, 0},
                                         {with("", copy_c), StoreType::kF32, 1},
                                         {with(fill_out, ""), StoreType::kF32, 1},
                                         {late, StoreType::kBF16, 0}}) {
    auto context = CreateCompilerContext();
    auto module = mlir::parseSourceString<mlir::ModuleOp>(c.kernel, context.get());
    ASSERT_TRUE(module) << c.kernel;
    ASSERT_TRUE(RunStages(*module, {OnednnStage()}, "rounding").ok());
    std::vector<GemmCall> calls = OnednnCalls(*module);
    ASSERT_EQ(calls.size(), 1u) << c.kernel;
    EXPECT_EQ(calls[0].type, 1) << c.kernel;  // bf16 operands either way
    EXPECT_EQ(calls[0].store, c.store) << c.kernel;
    EXPECT_EQ(Count<mlir::linalg::GenericOp>(*module), c.generics) << c.kernel;
  }
}

TEST(BlasRewritePassTest, OnednnAndLoopsAgree) {
  if (!LoadOnednn()) GTEST_SKIP() << OnednnDescription();
  struct Case {
    ir::Graph graph;
    std::vector<HostTensor> inputs;
  };
  std::vector<Case> cases;
  for (ir::DType d : {ir::FLOAT32, ir::BFLOAT16, ir::FLOAT16}) {
    cases.push_back({OneOpGraph("mm", {Type(d, {64, 48}), Type(d, {48, 40})},
                                {Type(d, {64, 40})}),
                     {Random(d, {64, 48}, 1), Random(d, {48, 40}, 2)}});
    cases.push_back(
        {OneOpGraph("matmul", {Type(d, {2, 1, 9, 17}), Type(d, {3, 17, 5})},
                    {Type(d, {2, 3, 9, 5})}),
         {Random(d, {2, 1, 9, 17}, 3), Random(d, {3, 17, 5}, 4)}});
    cases.push_back({OneOpGraph("linear",
                                {Type(d, {4, 7, 33}), Type(d, {19, 33}),
                                 Type(d, {19})},
                                {Type(d, {4, 7, 19})}),
                     {Random(d, {4, 7, 33}, 5), Random(d, {19, 33}, 6),
                      Random(d, {19}, 7)}});
    cases.push_back({OneOpGraph("addmm",
                                {Type(d, {8}), Type(d, {5, 30}), Type(d, {30, 8})},
                                {Type(d, {5, 8})},
                                {{"alpha", FloatA(0.5)}, {"beta", FloatA(2)}}),
                     {Random(d, {8}, 8), Random(d, {5, 30}, 9),
                      Random(d, {30, 8}, 10)}});
    // Cut into blocks (by columns).
    cases.push_back({OneOpGraph("mm", {Type(d, {8, 256}), Type(d, {256, 1100})},
                                {Type(d, {8, 1100})}),
                     {Random(d, {8, 256}, 11), Random(d, {256, 1100}, 12)}});
    // B read transposed from the permute's input.
    cases.push_back({PermuteMmGraph(d, 9, 70, 33),
                     {Random(d, {9, 33}, 13), Random(d, {70, 33}, 14)}});
    // A ReLU the call applies (bf16) before its store.
    cases.push_back({LinearRelu(d),
                     {Random(d, {2, 3, 4}, 15), Random(d, {5, 4}, 16),
                      Random(d, {5}, 17)}});
    cases.push_back({Ffn(d),
                     {Random(d, {2, 3, 4}, 18), Random(d, {6, 4}, 19),
                      Random(d, {6}, 20), Random(d, {5, 6}, 21)}});
  }
  for (const Case& c : cases) {
    const std::string what = ir::ToText(c.graph);
    std::vector<std::vector<double>> results;
    for (bool onednn : {true, false}) {
      auto context = CreateCompilerContext();
      auto module =
          ImportAndRewrite(c.graph, context.get(), OnednnStages(onednn));
      ASSERT_TRUE(module.ok()) << module.status();
      auto program = LowerToProgram(**module, c.graph);
      ASSERT_TRUE(program.ok()) << program.status();
      EXPECT_EQ(static_cast<bool>((*module)->lookupSymbol(kOnednnGemmSymbol)),
                onednn)
          << what;
      EXPECT_EQ((*program)->uses_onednn(), onednn);
      auto out = RunProgram(**program, c.inputs);
      ASSERT_TRUE(out.ok()) << out.status();
      results.push_back((*out)[0].values);
    }
    const ir::DType out_dtype = c.graph.nodes(0).outputs(0).type().dtype();
    std::vector<double> tol;
    for (double v : results[1]) {
      // Operands are in [-2, 2), k <= 256: f32 summation order differs;
      // the result is rounded once to the output type on both paths.
      tol.push_back(2 * UnitRoundoff(out_dtype) * std::fabs(v) +
                    256 * 256 * 6e-8);
    }
    ExpectClose(HostTensor{out_dtype, {}, results[0]}, results[1], tol, what);
  }
}

// Operands that are views: offsets, leading dimensions larger than the
// row, a batch stride, a transposed right operand, and C accumulated into
// (linalg's C += A * B, BLAS beta = 1).
constexpr char kStridedKernel[] = R"mlir(
func.func @kernel(%a: memref<8x8xf32>, %b: memref<4x3xf32>,
                  %w: memref<3x9xf32>, %e: memref<2x8x8xf32>,
                  %f: memref<2x4x3xf32>, %c: memref<6x3xf32>,
                  %d: memref<2x6x3xf32>, %g: memref<2x6x3xf32>)
    attributes {llvm.emit_c_interface} {
  %sa = memref.subview %a[1, 2] [6, 4] [1, 1]
      : memref<8x8xf32> to memref<6x4xf32, strided<[8, 1], offset: 10>>
  linalg.matmul ins(%sa, %b : memref<6x4xf32, strided<[8, 1], offset: 10>>,
                              memref<4x3xf32>)
                outs(%c : memref<6x3xf32>)
  %sw = memref.subview %w[0, 5] [3, 4] [1, 1]
      : memref<3x9xf32> to memref<3x4xf32, strided<[9, 1], offset: 5>>
  %d1 = memref.subview %d[1, 0, 0] [1, 6, 3] [1, 1, 1]
      : memref<2x6x3xf32> to memref<6x3xf32, strided<[3, 1], offset: 18>>
  linalg.matmul_transpose_b
      ins(%sa, %sw : memref<6x4xf32, strided<[8, 1], offset: 10>>,
                     memref<3x4xf32, strided<[9, 1], offset: 5>>)
      outs(%d1 : memref<6x3xf32, strided<[3, 1], offset: 18>>)
  %se = memref.subview %e[0, 1, 2] [2, 6, 4] [1, 1, 1]
      : memref<2x8x8xf32> to memref<2x6x4xf32, strided<[64, 8, 1], offset: 10>>
  linalg.batch_matmul
      ins(%se, %f : memref<2x6x4xf32, strided<[64, 8, 1], offset: 10>>,
                    memref<2x4x3xf32>)
      outs(%g : memref<2x6x3xf32>)
  return
}
)mlir";

TEST(BlasLoaderTest, OneOpenBlasThreadUnlessConfigured) {
  // spec: P5 -- kernels run on executor/chiplet threads; BLAS's own pool
  // would oversubscribe the cores (docs/benchmarks.md, matmul).
  if (!LoadOpenBlas()) GTEST_SKIP() << "libopenblas.so.0 is not installed";
  if (std::getenv("OPENBLAS_NUM_THREADS") != nullptr ||
      std::getenv(kBlasThreadsVar) != nullptr) {
    GTEST_SKIP() << "the thread count is set by the environment";
  }
  auto get = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  ASSERT_NE(get, nullptr);
  EXPECT_EQ(get(), 1);
}

TEST(BlasRewritePassTest, ViewsUseTheirOffsetAndLeadingDimension) {
  if (!LoadOpenBlas()) GTEST_SKIP() << "libopenblas.so.0 is not installed";
  const ir::DType f = ir::FLOAT32;
  // The graph only describes the kernel's arguments to CompiledProgram.
  ir::Graph g;
  g.set_name("strided");
  const std::vector<Shape> in_shapes = {
      {8, 8}, {4, 3}, {3, 9}, {2, 8, 8}, {2, 4, 3}};
  std::vector<HostTensor> inputs;
  for (size_t i = 0; i < in_shapes.size(); ++i) {
    AddInput(g, "in" + std::to_string(i), Type(f, in_shapes[i]));
    inputs.push_back(Random(f, in_shapes[i], 20 + i));
  }
  ir::Node* n = g.add_nodes();
  n->set_op("opaque");
  for (auto [name, shape] : std::vector<std::pair<std::string, Shape>>{
           {"c", {6, 3}}, {"d", {2, 6, 3}}, {"g", {2, 6, 3}}}) {
    ir::Value* v = n->add_outputs();
    v->set_name(name);
    *v->mutable_type() = Type(f, shape);
    g.add_outputs(name);
  }
  // Reference: outputs start at 0.5 and accumulate.
  const std::vector<double>& a = inputs[0].values;
  const std::vector<double>& b = inputs[1].values;
  const std::vector<double>& w = inputs[2].values;
  const std::vector<double>& e = inputs[3].values;
  const std::vector<double>& fm = inputs[4].values;
  std::vector<double> c(18, 0.5), d(36, 0.5), gv(36, 0.5);
  for (int i = 0; i < 6; ++i) {
    for (int j = 0; j < 3; ++j) {
      for (int p = 0; p < 4; ++p) {
        const double x = a[(1 + i) * 8 + 2 + p];
        c[i * 3 + j] += x * b[p * 3 + j];
        d[18 + i * 3 + j] += x * w[j * 9 + 5 + p];
        for (int bi = 0; bi < 2; ++bi) {
          gv[bi * 18 + i * 3 + j] +=
              e[bi * 64 + (1 + i) * 8 + 2 + p] * fm[bi * 12 + p * 3 + j];
        }
      }
    }
  }
  for (bool blas : {true, false}) {
    auto context = CreateCompilerContext();
    auto module =
        mlir::parseSourceString<mlir::ModuleOp>(kStridedKernel, context.get());
    ASSERT_TRUE(module);
    if (blas) {
      ASSERT_TRUE(RunStages(*module, {BlasStage()}, "strided").ok());
      EXPECT_EQ(CountSgemmCalls(*module), 3);
      EXPECT_EQ(Count<mlir::linalg::LinalgOp>(*module), 0);
    }
    auto program = LowerToProgram(*module, g);
    ASSERT_TRUE(program.ok()) << program.status();
    auto out = RunProgram(**program, inputs, /*output_fill=*/0.5);
    ASSERT_TRUE(out.ok()) << out.status();
    const std::string path = blas ? "blas" : "loops";
    ExpectClose((*out)[0], c, std::vector<double>(18, 1e-5), path + " c");
    ExpectClose((*out)[1], d, std::vector<double>(36, 1e-5), path + " d");
    ExpectClose((*out)[2], gv, std::vector<double>(36, 1e-5), path + " g");
  }
}

// RBLN_COMPILER_BLAS=0 (the _disabled_ test target) removes the stage; by
// default it sits between bufferization and the paged attention rewrite
// (then lowering) when OpenBLAS loads.
TEST(BlasRewritePassTest, FullPipelineFollowsTheEnvironment) {
  const char* env = std::getenv("RBLN_COMPILER_BLAS");
  const bool disabled = env != nullptr && std::string(env) == "0";
  RecordProperty("RBLN_COMPILER_BLAS", env ? env : "(unset)");
  std::vector<std::string> names;
  for (const Stage& stage : FullPipeline()) names.push_back(stage.name);
  const bool has_blas =
      std::find(names.begin(), names.end(), "blas") != names.end();
  EXPECT_EQ(has_blas, !disabled && LoadOpenBlas());
  if (has_blas) {
    auto blas = std::find(names.begin(), names.end(), "blas");
    EXPECT_EQ(*(blas - 1), "bufferize");
    EXPECT_EQ(*(blas + 1), "paged-attention");
  }
  // Either way a matmul compiles and is right.
  const HostTensor a = Tensor(ir::FLOAT32, {2, 3}, {1, 2, 3, 4, 5, 6});
  const HostTensor b = Tensor(ir::FLOAT32, {3, 2}, {1, 0, 0, 1, 1, 1});
  auto out = CompileAndRun(
      OneOpGraph("mm", {a.type(), b.type()}, {Type(ir::FLOAT32, {2, 2})}),
      {a, b});
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectExact((*out)[0], {4, 5, 10, 11}, "mm");
}

}  // namespace
}  // namespace rbln::compiler
