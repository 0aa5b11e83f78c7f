// Element-wise ops: one linalg.generic each, NumPy broadcasting, computed in
// f32 for half types and rounded once (as PyTorch's CPU kernels do).
#include "absl/status/status.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "rbln/compiler/graph_importer.h"

namespace rbln::compiler {
namespace {

using ::mlir::Location;
using ::mlir::OpBuilder;
using ::mlir::Value;
using ::mlir::ValueRange;

// add(a, b, alpha) = a + alpha * b.
absl::Status ConvertAdd(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckArity(node, 2, 1); !s.ok()) return s;
  const ir::DType out = node.outputs(0).type().dtype();
  if (out == ir::BOOL) {
    return absl::UnimplementedError(
        "The following operators are not implemented: ['add' on bool]");
  }
  const double alpha = FloatAttr(node, "alpha", 1.0);
  absl::StatusOr<Value> result = im.Elementwise(
      node, [&](OpBuilder& b, Location loc, ValueRange x) -> Value {
        Value rhs = x[1];
        if (alpha != 1.0) {
          Value a = im.ComputeConstant(b, alpha, out);
          rhs = IsFloat(out) ? b.create<mlir::arith::MulFOp>(loc, rhs, a).getResult()
                             : b.create<mlir::arith::MulIOp>(loc, rhs, a).getResult();
        }
        if (IsFloat(out)) return b.create<mlir::arith::AddFOp>(loc, x[0], rhs);
        return b.create<mlir::arith::AddIOp>(loc, x[0], rhs);
      });
  if (!result.ok()) return result.status();
  im.Define(node.outputs(0), *result);
  return absl::OkStatus();
}

}  // namespace

void RegisterElementwiseOps(OpConverterTable& table) {
  table["add"] = &ConvertAdd;
}

}  // namespace rbln::compiler
