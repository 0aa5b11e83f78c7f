// spec: J6
#include "rbln/compiler/frontend/frontend.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "rbln/compiler/pipelines/mlir_setup.h"
#include "rbln/compiler/testing/test_graphs.h"

namespace rbln::compiler {
namespace {

using ::testing::HasSubstr;
using testing::AddGraph;
using testing::Type;

int CountGenerics(mlir::ModuleOp m) {
  int n = 0;
  m.walk([&](mlir::linalg::GenericOp) { ++n; });
  return n;
}

TEST(FrontendTest, AddBecomesOneGenericWithWritableOutput) {
  auto context = CreateCompilerContext();
  auto module = ImportGraph(AddGraph(Type(ir::FLOAT16, {2, 3})), context.get());
  ASSERT_TRUE(module.ok()) << module.status();
  EXPECT_EQ(CountGenerics(**module), 1);
  auto func = (*module)->lookupSymbol<mlir::func::FuncOp>(kKernelName);
  ASSERT_TRUE(func);
  EXPECT_EQ(func.getNumArguments(), 3u);
  auto writable = [&](int i) {
    auto attr =
        func.getArgAttrOfType<mlir::BoolAttr>(i, "bufferization.writable");
    return attr ? std::optional<bool>(attr.getValue()) : std::nullopt;
  };
  EXPECT_EQ(writable(2), std::optional<bool>(true));
  // Inputs are marked read-only: bufferization's default takes an unmarked
  // argument as writable.
  EXPECT_EQ(writable(0), std::optional<bool>(false));
  EXPECT_EQ(writable(1), std::optional<bool>(false));
  EXPECT_TRUE(func->hasAttr("llvm.emit_c_interface"));
}

TEST(FrontendTest, Bf16IsStoredAsI16) {
  auto context = CreateCompilerContext();
  auto module = ImportGraph(AddGraph(Type(ir::BFLOAT16, {4})), context.get());
  ASSERT_TRUE(module.ok()) << module.status();
  auto func = (*module)->lookupSymbol<mlir::func::FuncOp>(kKernelName);
  auto t = func.getArgumentTypes()[0].cast<mlir::RankedTensorType>();
  EXPECT_TRUE(t.getElementType().isInteger(16));
}

TEST(FrontendTest, UnsupportedOpsAreAllListed) {
  ir::Graph g = AddGraph(Type(ir::FLOAT32, {4}));
  // Data-dependent output shapes: host ops, never compiled.
  g.mutable_nodes(0)->set_op("nonzero");
  testing::AddNode(g, "masked_select", {"out"}, "out2", Type(ir::FLOAT32, {4}));
  testing::AddNode(g, "nonzero", {"out2"}, "out3", Type(ir::FLOAT32, {4}));
  // The module lives in the context: keep it for the test's length.
  auto context = CreateCompilerContext();
  auto module = ImportGraph(g, context.get());
  ASSERT_FALSE(module.ok());
  EXPECT_EQ(module.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(module.status().message(),
            "The following operators are not implemented: ['nonzero', "
            "'masked_select']");
}

TEST(FrontendTest, ImplementedOpsAgreeWithImport) {
  // Host-op classification (torch.compile, SPEC J6) asks before compiling.
  EXPECT_TRUE(IsOpImplemented("add"));
  EXPECT_TRUE(IsOpImplemented("softmax"));
  EXPECT_TRUE(IsOpImplemented("sin"));
  EXPECT_FALSE(IsOpImplemented("nonzero"));
  const std::vector<std::string> ops = ImplementedOps();
  EXPECT_TRUE(std::is_sorted(ops.begin(), ops.end()));
  EXPECT_THAT(ops, ::testing::Contains("matmul"));
  EXPECT_THAT(ops, ::testing::Not(::testing::Contains("nonzero")));
  for (const std::string& op : ops) EXPECT_TRUE(IsOpImplemented(op)) << op;
}

TEST(FrontendTest, BroadcastMismatchIsAnError) {
  ir::Graph g;
  g.set_name("bad");
  testing::AddInput(g, "a", Type(ir::FLOAT32, {2, 3}));
  testing::AddInput(g, "b", Type(ir::FLOAT32, {4}));
  testing::AddNode(g, "add", {"a", "b"}, "out", Type(ir::FLOAT32, {2, 3}));
  g.add_outputs("out");
  // The module lives in the context: keep it for the test's length.
  auto context = CreateCompilerContext();
  auto module = ImportGraph(g, context.get());
  ASSERT_FALSE(module.ok());
  EXPECT_THAT(module.status().message(), HasSubstr("does not broadcast"));
}

TEST(FrontendTest, InputReturnedAsOutputIsCopied) {
  ir::Graph g = AddGraph(Type(ir::FLOAT32, {4}));
  g.add_outputs("a");
  // The module lives in the context: keep it for the test's length.
  auto context = CreateCompilerContext();
  auto module = ImportGraph(g, context.get());
  ASSERT_TRUE(module.ok()) << module.status();
  EXPECT_EQ(CountGenerics(**module), 2);
}

}  // namespace
}  // namespace rbln::compiler
