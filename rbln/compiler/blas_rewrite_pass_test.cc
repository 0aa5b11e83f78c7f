// spec: P5
// The BLAS rewrite: which GEMMs become cblas_sgemm calls, and that BLAS and
// loops agree. Built twice: as is, and with RBLN_COMPILER_BLAS=0.
#include "rbln/compiler/blas_rewrite_pass.h"

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Parser/Parser.h"
#include "rbln/compiler/blas_loader.h"
#include "rbln/compiler/compiled_program.h"
#include "rbln/compiler/frontend.h"
#include "rbln/compiler/ir/graph_util.h"
#include "rbln/compiler/mlir_setup.h"
#include "rbln/compiler/ops/op_test_util.h"
#include "rbln/compiler/pipelines.h"

namespace rbln::compiler {
namespace {

using namespace testing;  // NOLINT: the op test helpers.

Stage BlasStage() {
  RegisterBlasRewritePass();
  return Stage{"blas", kBlasRewritePassName, nullptr};
}

std::vector<Stage> Concat(std::initializer_list<std::vector<Stage>> parts) {
  std::vector<Stage> all;
  for (const std::vector<Stage>& part : parts) {
    all.insert(all.end(), part.begin(), part.end());
  }
  return all;
}

std::vector<Stage> StagesWith(bool blas) {
  std::vector<Stage> blas_stage;
  if (blas) blas_stage.push_back(BlasStage());
  return Concat(
      {FusionStages(), BufferizationStages(), blas_stage, LoweringStages()});
}

template <typename OpT>
int Count(mlir::ModuleOp m) {
  int n = 0;
  m.walk([&](OpT) { ++n; });
  return n;
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
                                               mlir::MLIRContext* context) {
  auto module = ImportGraph(graph, context);
  EXPECT_TRUE(module.ok()) << module.status();
  if (!module.ok()) return nullptr;
  absl::Status s = RunStages(
      **module, Concat({FusionStages(), BufferizationStages(), {BlasStage()}}),
      graph.name());
  EXPECT_TRUE(s.ok()) << s;
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
      auto module = ImportGraph(c.graph, context.get());
      ASSERT_TRUE(module.ok()) << module.status();
      absl::Status s = RunStages(**module, StagesWith(blas), "t");
      ASSERT_TRUE(s.ok()) << s;
      // After lowering, only the BLAS path references cblas_sgemm.
      EXPECT_EQ(static_cast<bool>((*module)->lookupSymbol(kSgemmName)), blas)
          << what;
      auto program = CompiledProgram::Create(**module, c.graph);
      ASSERT_TRUE(program.ok()) << program.status();
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
    absl::Status s = RunStages(*module, LoweringStages(), "strided");
    ASSERT_TRUE(s.ok()) << s;
    auto program = CompiledProgram::Create(*module, g);
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
// default it sits between bufferization and lowering when OpenBLAS loads.
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
    EXPECT_EQ(*(blas + 1), "loops");
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
