#include "rbln/compiler/ops/shape_util.h"

#include "absl/strings/str_format.h"
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

mlir::Value IndexConst(mlir::OpBuilder& b, mlir::Location l, int64_t v) {
  return b.create<mlir::arith::ConstantIndexOp>(l, v);
}

}  // namespace rbln::compiler
