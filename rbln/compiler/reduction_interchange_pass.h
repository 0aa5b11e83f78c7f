// Row reductions with the rows innermost (SPEC P3, P5, A2).
//
// A linalg reduction over its innermost dimension (a softmax's row max and
// row sum, a norm's mean and variance) lowers to loops that run one row at
// a time: for each row, a chain of dependent float operations in index
// order (~4 cycles per element), which LLVM may not vectorize without
// reassociating the sum -- and P3 rules reassociation out. This pass moves
// the innermost parallel dimension inside the reduction dimensions: for
// each k, every row takes its k-th element. Each row still combines its
// elements in the same order, so every result keeps its bits, but the
// innermost loop now runs over independent rows, which LLVM vectorizes (one
// row per lane). Runs after partitioning (on the workers' slices), before
// the loops are lowered.
#ifndef RBLN_COMPILER_REDUCTION_INTERCHANGE_PASS_H_
#define RBLN_COMPILER_REDUCTION_INTERCHANGE_PASS_H_

#include <memory>

#include "mlir/Pass/Pass.h"

namespace rbln::compiler {

std::unique_ptr<mlir::Pass> CreateReductionInterchangePass();

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_REDUCTION_INTERCHANGE_PASS_H_
