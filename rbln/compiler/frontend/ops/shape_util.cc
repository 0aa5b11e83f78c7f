#include "rbln/compiler/frontend/ops/shape_util.h"

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "mlir/Dialect/Arith/IR/Arith.h"

namespace rbln::compiler {

int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

absl::StatusOr<int> WrapDim(const ir::Node& node, int64_t dim, int rank) {
  const int64_t n = rank == 0 ? 1 : rank;  // A scalar has one dim, as in PyTorch.
  if (dim < -n || dim >= n) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: Dimension out of range (expected to be in range of [%d, %d], "
        "but got %d)",
        node.op(), -n, n - 1, dim));
  }
  return static_cast<int>(dim < 0 ? dim + n : dim);
}

absl::StatusOr<Selected> SelectedIndex(const ir::Node& node, const Shape& shape) {
  if (shape.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: select() cannot be applied to a 0-dim tensor.", node.op()));
  }
  absl::StatusOr<int> dim = WrapDim(node, IntAttr(node, "dim", 0), shape.size());
  if (!dim.ok()) return dim.status();
  const int64_t size = shape[*dim];
  const int64_t index = IntAttr(node, "index", 0);
  if (index < -size || index >= size) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: select(): index %d out of range for tensor of size [%s] at "
        "dimension %d",
        node.op(), index, absl::StrJoin(shape, ", "), *dim));
  }
  return Selected{*dim, index < 0 ? index + size : index};
}

mlir::Value IndexConst(mlir::OpBuilder& b, mlir::Location l, int64_t v) {
  return b.create<mlir::arith::ConstantIndexOp>(l, v);
}

}  // namespace rbln::compiler
