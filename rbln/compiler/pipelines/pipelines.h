// The compiler's pass pipelines, as data.
//
// A pipeline is a list of stages; a stage is either MLIR textual pipeline
// (parsed with mlir::parsePassPipeline) or one of our own passes. The text
// comes from one table per MLIR version (pass names changed between 16 and
// 19). After every
// stage the module is verified; with RBLN_COMPILER_DUMP_DIR set, it is also
// written to <dir>/<module>.<NN>.<stage>.mlir.
#ifndef RBLN_COMPILER_PIPELINES_PIPELINES_H_
#define RBLN_COMPILER_PIPELINES_PIPELINES_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "rbln/compiler/abi/partition_layout.h"

namespace rbln::compiler {

struct Stage {
  std::string name;
  // Either a textual pipeline (anchored on builtin.module) ...
  std::string pipeline;
  // ... or our own pass, nested on func.func ...
  std::function<std::unique_ptr<mlir::Pass>()> func_pass;
  // ... or our own pass on the module.
  std::function<std::unique_ptr<mlir::Pass>()> module_pass = nullptr;
};

// The textual pipelines of one MLIR version (the passes around our own).
struct PipelineTable {
  int mlir_version;
  // Element-wise fusion (SPEC P1, P3): no reassociation, no fast-math.
  const char* fuse;
  // One-shot bufferization into the caller's outputs, deallocation (P4).
  const char* bufferize;
  // linalg to loops to cf.
  const char* loops;
  // Everything to the LLVM dialect.
  const char* llvm;
};

// The tables of every supported MLIR version (16 and 19).
absl::Span<const PipelineTable> AllPipelineTables();
// The table of the MLIR version this build uses.
const PipelineTable& Pipelines();

// Element-wise fusion (SPEC P1, P3): no reassociation, no fast-math.
const std::vector<Stage>& FusionStages();
// Destination passing and one-shot bufferization (SPEC P4).
const std::vector<Stage>& BufferizationStages();
// Loops and the LLVM dialect (SPEC P5).
const std::vector<Stage>& LoweringStages();
// Fusion, bufferization, chiplet partitioning when `partition.partitions` > 1
// (SPEC A2), the BLAS rewrite when OpenBLAS is available and
// RBLN_COMPILER_BLAS is not 0, then lowering.
std::vector<Stage> FullPipeline(PartitionOptions partition = {});

// Runs `stages` on `module`. Errors carry MLIR's diagnostics and the name of
// the failing stage. `dump_name` names the dump files.
absl::Status RunStages(mlir::ModuleOp module, absl::Span<const Stage> stages,
                       absl::string_view dump_name);

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_PIPELINES_PIPELINES_H_
