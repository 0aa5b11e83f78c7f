// MLIR's linalg-fuse-elementwise-ops with MLIR 16's reach for reshapes, for
// the MLIR 19 pipeline table (SPEC P1, P3, P5).
//
// From MLIR 18 on, linalg-fuse-elementwise-ops also propagates
// tensor.expand_shape/collapse_shape through reductions and named ops: the
// `linear` frontend's collapse -> linalg.matmul_transpose_b -> expand
// becomes one 4-d linalg.generic contraction (and its linalg.fill a
// generic), which the BLAS rewrite cannot see as a GEMM. This pass runs the
// same patterns as MLIR's (element-wise fusion, reshape folding by
// expansion, the same canonicalizations and constant folding, top-down
// greedy driver) but folds a reshape only into an all-parallel
// linalg.generic, as MLIR 16 did; element-wise fusion is unchanged.
#ifndef RBLN_COMPILER_ELEMENTWISE_FUSION_PASS_H_
#define RBLN_COMPILER_ELEMENTWISE_FUSION_PASS_H_

#include <memory>

#include "mlir/Pass/Pass.h"

namespace rbln::compiler {

inline constexpr char kElementwiseFusionPassName[] =
    "rbln-fuse-elementwise-ops";

std::unique_ptr<mlir::Pass> CreateElementwiseFusionPass();

// Registers the pass under kElementwiseFusionPassName for textual
// pipelines. Idempotent and thread-safe.
void RegisterElementwiseFusionPass();

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_ELEMENTWISE_FUSION_PASS_H_
