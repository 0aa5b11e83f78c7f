// The harness the library-rewrite tests share: a graph (or a hand-written
// kernel) taken through bufferization, with or without a rewrite stage, then
// lowered and built into a program, so that the library call can be run
// against the loops it replaces and against a reference.
#ifndef RBLN_COMPILER_TRANSFORMS_LIBRARY_LIBRARY_TEST_UTIL_H_
#define RBLN_COMPILER_TRANSFORMS_LIBRARY_LIBRARY_TEST_UTIL_H_

#include <array>
#include <functional>
#include <initializer_list>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"
#include "rbln/compiler/execution/compiled_program.h"
#include "rbln/compiler/frontend/frontend.h"
#include "rbln/compiler/ir/graph.pb.h"
#include "rbln/compiler/pipelines/mlir_setup.h"
#include "rbln/compiler/pipelines/pipelines.h"
#include "rbln/compiler/testing/op_test_util.h"

namespace rbln::compiler::testing {

// `parts` in order, as one list of stages.
inline std::vector<Stage> Concat(
    std::initializer_list<std::vector<Stage>> parts) {
  std::vector<Stage> all;
  for (const std::vector<Stage>& part : parts) {
    all.insert(all.end(), part.begin(), part.end());
  }
  return all;
}

// Imports `graph` and runs fusion, bufferization and then `rewrites` (none:
// the ops stay for the loops).
inline absl::StatusOr<mlir::OwningOpRef<mlir::ModuleOp>> ImportAndRewrite(
    const ir::Graph& graph, mlir::MLIRContext* context,
    const std::vector<Stage>& rewrites) {
  absl::StatusOr<mlir::OwningOpRef<mlir::ModuleOp>> module =
      ImportGraph(graph, context);
  if (!module.ok()) return module.status();
  if (absl::Status s = RunStages(
          **module, Concat({FusionStages(), BufferizationStages(), rewrites}),
          graph.name());
      !s.ok()) {
    return s;
  }
  return module;
}

// Lowers `module` (its rewrites already run) and builds `graph`'s program
// from it.
inline absl::StatusOr<std::unique_ptr<CompiledProgram>> LowerToProgram(
    mlir::ModuleOp module, const ir::Graph& graph) {
  if (absl::Status s = RunStages(module, LoweringStages(), graph.name());
      !s.ok()) {
    return s;
  }
  return CompiledProgram::Create(module, graph);
}

// The first output of `graph` on `inputs` built without and then with
// `rewrite` after bufferization (each in a fresh context); `inspect` sees
// each module before lowering.
inline absl::StatusOr<std::array<std::vector<double>, 2>> RunWithoutAndWithRewrite(
    const ir::Graph& graph, const Stage& rewrite, const std::vector<HostTensor>& inputs,
    const std::function<void(mlir::ModuleOp, bool rewritten)>& inspect) {
  std::array<std::vector<double>, 2> results;
  for (bool rewritten : {false, true}) {
    auto context = CreateCompilerContext();
    std::vector<Stage> stages;
    if (rewritten) stages.push_back(rewrite);
    auto module = ImportAndRewrite(graph, context.get(), stages);
    if (!module.ok()) return module.status();
    inspect(**module, rewritten);
    auto program = LowerToProgram(**module, graph);
    if (!program.ok()) return program.status();
    auto out = RunProgram(**program, inputs);
    if (!out.ok()) return out.status();
    results[rewritten] = (*out)[0].values;
  }
  return results;
}

}  // namespace rbln::compiler::testing

#endif  // RBLN_COMPILER_TRANSFORMS_LIBRARY_LIBRARY_TEST_UTIL_H_
