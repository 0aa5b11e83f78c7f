// spec: P1, P2, P3, P4, P5
#include "rbln/compiler/pipelines/pipelines.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "rbln/compiler/execution/compiled_program.h"
#include "rbln/compiler/frontend/frontend.h"
#include "rbln/compiler/pipelines/mlir_compat.h"
#include "rbln/compiler/pipelines/mlir_setup.h"
#include "rbln/compiler/testing/op_test_util.h"
#include "rbln/compiler/testing/test_graphs.h"

namespace rbln::compiler {
namespace {

using testing::Count;
using ::testing::HasSubstr;
using testing::AddChainGraph;
using testing::Type;

TEST(PipelinesTest, FusionTurnsTwoGenericsIntoOne) {
  auto context = CreateCompilerContext();
  auto module = ImportGraph(AddChainGraph(Type(ir::FLOAT32, {8, 4})), context.get());
  ASSERT_TRUE(module.ok());
  EXPECT_EQ(Count<mlir::linalg::GenericOp>(**module), 2);
  ASSERT_TRUE(RunStages(**module, FusionStages(), "test").ok());
  EXPECT_EQ(Count<mlir::linalg::GenericOp>(**module), 1);
}

TEST(PipelinesTest, BufferizationWritesIntoTheOutputArgument) {
  auto context = CreateCompilerContext();
  auto module = ImportGraph(AddChainGraph(Type(ir::FLOAT16, {8, 4})), context.get());
  ASSERT_TRUE(module.ok());
  ASSERT_TRUE(RunStages(**module, FusionStages(), "test").ok());
  absl::Status s = RunStages(**module, BufferizationStages(), "test");
  ASSERT_TRUE(s.ok()) << s;
  auto func = (*module)->lookupSymbol<mlir::func::FuncOp>(kKernelName);
  // Results were dropped: the kernel writes into its 4th memref argument and
  // allocates nothing.
  EXPECT_EQ(func.getNumResults(), 0u);
  EXPECT_EQ(func.getNumArguments(), 4u);
  EXPECT_TRUE(func.getArgumentTypes()[3].isa<mlir::MemRefType>());
  EXPECT_EQ(Count<mlir::memref::AllocOp>(**module), 0);
  EXPECT_EQ(Count<mlir::memref::CopyOp>(**module), 0);
}

TEST(PipelinesTest, UnfusedIntermediateIsFreed) {
  // Without fusion, (a + b) lives in an internal buffer that must be freed.
  auto context = CreateCompilerContext();
  auto module = ImportGraph(AddChainGraph(Type(ir::FLOAT32, {8})), context.get());
  ASSERT_TRUE(module.ok());
  ASSERT_TRUE(RunStages(**module, BufferizationStages(), "test").ok());
  EXPECT_EQ(Count<mlir::memref::AllocOp>(**module), 1);
  EXPECT_EQ(Count<mlir::memref::DeallocOp>(**module), 1);
}

TEST(PipelinesTest, BadPipelineTextNamesTheStage) {
  auto context = CreateCompilerContext();
  auto module = ImportGraph(AddChainGraph(Type(ir::FLOAT32, {8})), context.get());
  std::vector<Stage> bad = {Stage{"typo", "no-such-pass", nullptr}};
  absl::Status s = RunStages(**module, bad, "test");
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("stage 'typo'"));
}

// A broken pass: drops the function's terminator, leaving invalid IR.
class BreakTerminatorPass
    : public mlir::PassWrapper<BreakTerminatorPass,
                               mlir::OperationPass<mlir::func::FuncOp>> {
 public:
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(BreakTerminatorPass)
  void runOnOperation() override {
    getOperation().getBody().back().getTerminator()->erase();
  }
};

TEST(PipelinesTest, VerifierFailureReachesTheCaller) {
  auto context = CreateCompilerContext();
  auto module = ImportGraph(AddChainGraph(Type(ir::FLOAT32, {8})), context.get());
  std::vector<Stage> broken = {Stage{
      "broken", "", [] { return std::make_unique<BreakTerminatorPass>(); }}};
  absl::Status s = RunStages(**module, broken, "test");
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("stage 'broken'"));
}

// Optimized (fused) and unoptimized kernels give bit-identical results: the
// fusion does not reassociate.
TEST(PipelinesTest, FusedAndUnfusedAgree) {
  const ir::Graph graph = AddChainGraph(Type(ir::FLOAT32, {64}));
  std::vector<std::vector<float>> results;
  for (bool fuse : {true, false}) {
    auto context = CreateCompilerContext();
    auto module = ImportGraph(graph, context.get());
    ASSERT_TRUE(module.ok());
    if (fuse) ASSERT_TRUE(RunStages(**module, FusionStages(), "t").ok());
    std::vector<Stage> rest = BufferizationStages();
    rest.insert(rest.end(), LoweringStages().begin(), LoweringStages().end());
    absl::Status s = RunStages(**module, rest, "t");
    ASSERT_TRUE(s.ok()) << s;
    auto program = CompiledProgram::Create(**module, graph);
    ASSERT_TRUE(program.ok()) << program.status();
    std::vector<float> a(64), b(64), c(64), out(64);
    for (int i = 0; i < 64; ++i) {
      a[i] = 0.1f * i;
      b[i] = 1e7f / (i + 1);
      c[i] = -1e7f / (i + 1);
    }
    std::vector<runtime::BufferView> args;
    for (std::vector<float>* v : {&a, &b, &c, &out}) {
      args.push_back({v->data(), DType::kFloat32, {64}, {1}});
    }
    ASSERT_TRUE((*program)->Execute(args).ok());
    results.push_back(out);
    for (int i = 0; i < 64; ++i) EXPECT_EQ(out[i], (a[i] + b[i]) + c[i]);
  }
  EXPECT_EQ(results[0], results[1]);
}

// One pipeline table per supported MLIR version (16, 19): this build's
// parses; the other's names passes this MLIR does not have (renamed between
// 16 and 19), which is why they are separate tables.
TEST(PipelinesTest, EachMlirVersionHasItsOwnTable) {
  EXPECT_EQ(Pipelines().mlir_version, compat::kMlirVersion);
  ASSERT_EQ(AllPipelineTables().size(), 2u);
  InitializeMlirOnce();
  auto context = CreateCompilerContext();
  for (const PipelineTable& table : AllPipelineTables()) {
    int unparsable = 0;
    for (const char* text :
         {table.fuse, table.bufferize, table.loops, table.llvm}) {
      mlir::PassManager pm(context.get(), mlir::ModuleOp::getOperationName());
      std::string errors;
      llvm::raw_string_ostream os(errors);
      if (mlir::failed(mlir::parsePassPipeline(text, pm, os))) ++unparsable;
    }
    if (table.mlir_version == compat::kMlirVersion) {
      EXPECT_EQ(unparsable, 0) << "MLIR " << table.mlir_version;
    } else {
      EXPECT_GT(unparsable, 0) << "MLIR " << table.mlir_version;
    }
  }
}

}  // namespace
}  // namespace rbln::compiler
