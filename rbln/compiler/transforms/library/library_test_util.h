// The harness the library-rewrite tests share: a graph (or a hand-written
// kernel) taken through bufferization, with or without a rewrite stage, then
// lowered and built into a program, so that the library call can be run
// against the loops it replaces and against a reference.
#ifndef RBLN_COMPILER_TRANSFORMS_LIBRARY_LIBRARY_TEST_UTIL_H_
#define RBLN_COMPILER_TRANSFORMS_LIBRARY_LIBRARY_TEST_UTIL_H_

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
#include "rbln/compiler/pipelines/pipelines.h"

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

}  // namespace rbln::compiler::testing

#endif  // RBLN_COMPILER_TRANSFORMS_LIBRARY_LIBRARY_TEST_UTIL_H_
