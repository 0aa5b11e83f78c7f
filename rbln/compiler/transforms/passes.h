// The compiler's own MLIR passes, one file each (the comment at the top of
// each file says what it does and why); pipelines/pipelines.cc runs them
// between MLIR's own. The rewrites of GEMMs and convolutions to library
// calls are in library/passes.h.
#ifndef RBLN_COMPILER_TRANSFORMS_PASSES_H_
#define RBLN_COMPILER_TRANSFORMS_PASSES_H_

#include <memory>

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "rbln/compiler/abi/partition_layout.h"

namespace rbln::compiler {

// --- On tensors, before bufferization ---

// Element-wise fusion for the MLIR 19 pipeline table: MLIR's
// linalg-fuse-elementwise-ops with MLIR 16's reach for reshapes (SPEC P1,
// P3, P5; elementwise_fusion_pass.cc).
inline constexpr char kElementwiseFusionPassName[] =
    "rbln-fuse-elementwise-ops";
std::unique_ptr<mlir::Pass> CreateElementwiseFusionPass();
// Registers it under kElementwiseFusionPassName for textual pipelines.
// Idempotent and thread-safe.
void RegisterElementwiseFusionPass();

// One linalg.fill per destination it initializes (SPEC P4, P5;
// fill_unsharing_pass.cc).
std::unique_ptr<mlir::Pass> CreateFillUnsharingPass();

// Each returned tensor computed in its output argument, so bufferization
// writes results in place into the caller's buffers (SPEC P4;
// bind_outputs_pass.cc). An updated input (an argument with
// kUpdatedByResultAttr) has its result's destination chain rooted at the
// input itself when nothing reads the input's old bytes after the chain's
// root (a KV cache's index_copy then writes just its rows); otherwise the
// value is copied into the input last.
std::unique_ptr<mlir::Pass> CreateBindOutputsPass();

// --- On buffers ---

// Chiplet partitioning (SPEC A2; partition_pass.cc): @kernel becomes an SPMD
// function of the chiplet workers, its layout recorded on the module. A
// module pass (it declares the barrier function).
std::unique_ptr<mlir::Pass> CreatePartitionPass(PartitionOptions options);
// What the pass recorded on `module` (partitions 1 if it did not run).
PartitionLayout ReadPartitionLayout(mlir::ModuleOp module);

// Row reductions with the rows innermost, so they vectorize without
// reassociating (SPEC P3, P5, A2; reduction_interchange_pass.cc).
std::unique_ptr<mlir::Pass> CreateReductionInterchangePass();

// Innermost reductions lowered to loops that carry their accumulators in
// registers, not in the output buffer (SPEC P3, A2;
// register_accumulator_pass.cc).
std::unique_ptr<mlir::Pass> CreateRegisterAccumulatorPass();

// --- On loops ---

// f32 math.exp as exactly rounded arith ops, so its loops vectorize with
// the same bits (SPEC P5, A2; polynomial_exp_pass.cc).
std::unique_ptr<mlir::Pass> CreatePolynomialExpPass();

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_TRANSFORMS_PASSES_H_
