// Shape and index helpers every op family's converters share (reductions,
// data movement, indexing): one definition each, so the families' helper
// files need not repeat them.
#ifndef RBLN_COMPILER_FRONTEND_OPS_SHAPE_UTIL_H_
#define RBLN_COMPILER_FRONTEND_OPS_SHAPE_UTIL_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "mlir/IR/Builders.h"
#include "rbln/compiler/frontend/graph_importer.h"
#include "rbln/compiler/ir/graph.pb.h"

namespace rbln::compiler {

int64_t NumElements(const Shape& shape);

// `dim` wrapped into [0, rank) as PyTorch does (a 0-d tensor has one dim),
// or PyTorch's "Dimension out of range" error naming the op.
absl::StatusOr<int> WrapDim(const ir::Node& node, int64_t dim, int rank);

// select's (dim, index) attributes checked against `shape` and wrapped as
// PyTorch's select() does, with its messages naming the op: the tensor is
// not 0-d, the dim is in range, -size <= index < size.
struct Selected {
  int dim;
  int64_t index;
};
absl::StatusOr<Selected> SelectedIndex(const ir::Node& node, const Shape& shape);

// An `index` constant.
mlir::Value IndexConst(mlir::OpBuilder& b, mlir::Location l, int64_t v);

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_FRONTEND_OPS_SHAPE_UTIL_H_
