// Builders and checks shared by the reduction-like op families (reductions,
// norms and moments, scans, sorts and selections, searches, histograms):
// linalg.generic over reduced dims, accumulators set by linalg.fill, the
// "dim"/"keepdim" attribute conventions and PyTorch's reduction messages.
#ifndef RBLN_COMPILER_FRONTEND_OPS_REDUCTION_UTIL_H_
#define RBLN_COMPILER_FRONTEND_OPS_REDUCTION_UTIL_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "mlir/Dialect/Utils/StructuredOpsUtils.h"
#include "mlir/IR/AffineMap.h"
#include "mlir/IR/Builders.h"
#include "rbln/compiler/frontend/graph_importer.h"
#include "rbln/compiler/frontend/ops/shape_util.h"
#include "rbln/compiler/ir/graph.pb.h"

namespace rbln::compiler {

// --- Tensors and generics. ---------------------------------------------------

mlir::Value Empty(GraphImporter& im, const Shape& shape, mlir::Type element);
// A tensor of `shape` filled with `value` (linalg.fill).
mlir::Value Filled(GraphImporter& im, const Shape& shape,
                   mlir::TypedAttr value);

using BodyFn = llvm::function_ref<llvm::SmallVector<mlir::Value>(
    mlir::OpBuilder&, mlir::Location, mlir::ValueRange)>;

// A linalg.generic writing into `inits`; `body` returns the yielded values.
mlir::ResultRange Generic(GraphImporter& im, mlir::ValueRange inputs,
                          mlir::ValueRange inits,
                          llvm::ArrayRef<mlir::AffineMap> maps,
                          llvm::ArrayRef<mlir::utils::IteratorType> iterators,
                          BodyFn body);

mlir::AffineMap Identity(GraphImporter& im, int rank);

// The map from the input's loops to a reduced value: reduced dims are dropped
// or, with `keepdim`, read at 0.
mlir::AffineMap ReducedMap(GraphImporter& im, const std::vector<bool>& reduced,
                           bool keepdim);
Shape ReducedShape(const Shape& in, const std::vector<bool>& reduced,
                   bool keepdim);
std::vector<mlir::utils::IteratorType> Iterators(
    const std::vector<bool>& reduced);


mlir::TypedAttr F32(GraphImporter& im, double v);
mlir::Value F32Const(mlir::OpBuilder& b, double v);
mlir::Value I64Const(mlir::OpBuilder& b, mlir::Location l, int64_t v);

// --- Checks. -----------------------------------------------------------------

absl::Status CheckOutputShape(const ir::Node& node, int output,
                              const Shape& expected);
// The dims reduced by attr "dim": an int or comma-separated ints; absent or
// "" reduces every dim. Negative dims wrap; repeated dims are an error.
absl::StatusOr<std::vector<bool>> ReducedDims(const ir::Node& node, int rank);
absl::Status CheckFloat(const ir::Node& node, ir::DType t);
// c10's name of a dtype ("Half", "Long"), as PyTorch's messages print it.
const char* ScalarTypeName(ir::DType t);
absl::Status CheckNonEmptyReduction(const ir::Node& node, const Shape& shape,
                                    const std::vector<bool>& reduced);

// --- Scalar combiners (compute type). ----------------------------------------

mlir::Value Add(mlir::OpBuilder& b, mlir::Location l, mlir::Value x,
                mlir::Value y);
mlir::Value Mul(mlir::OpBuilder& b, mlir::Location l, mlir::Value x,
                mlir::Value y);
mlir::Value IsNan(mlir::OpBuilder& b, mlir::Location l, mlir::Value x);
// max/min that propagate NaN as PyTorch does (arith.maxf on MLIR 16 lowers
// to llvm.maxnum, which drops NaN).
mlir::Value MaxOrMin(mlir::OpBuilder& b, mlir::Location l, mlir::Value x,
                     mlir::Value acc, bool max);
// The identity of max (-inf / the smallest int) or min.
mlir::TypedAttr MaxOrMinInit(GraphImporter& im, ir::DType t, bool max);
mlir::TypedAttr Zero(GraphImporter& im, ir::DType t);

// An element-wise generic over `acc`'s shape producing the node's output
// `output` in its storage type: `fn` (or nothing) on the compute value, then
// one rounding. Returns `acc` itself when there is nothing to do.
mlir::Value Finalize(
    GraphImporter& im, const ir::Node& node, int output, mlir::Value acc,
    std::function<mlir::Value(mlir::OpBuilder&, mlir::Location, mlir::Value)>
        fn = nullptr);

// Reduces `x` (a value of the graph, dtype `in`) over `reduced` into an
// accumulator of `acc_dtype`'s compute type, shaped as the reduced output.
mlir::Value Reduce(
    GraphImporter& im, mlir::Value x, ir::DType in, ir::DType acc_dtype,
    const std::vector<bool>& reduced, bool keepdim, mlir::TypedAttr init,
    llvm::function_ref<mlir::Value(mlir::OpBuilder&, mlir::Location,
                                   mlir::Value, mlir::Value)>
        combine);

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_FRONTEND_OPS_REDUCTION_UTIL_H_
