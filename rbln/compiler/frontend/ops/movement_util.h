// Helpers shared by the data movement and indexing converters (ops/*.cc):
// checks of dims, shapes and dtypes with PyTorch's messages, and the few
// MLIR building blocks they all emit (a generic over the output, reshapes,
// element casts, serial loops over a shape).
#ifndef RBLN_COMPILER_FRONTEND_OPS_MOVEMENT_UTIL_H_
#define RBLN_COMPILER_FRONTEND_OPS_MOVEMENT_UTIL_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mlir/IR/AffineExpr.h"
#include "mlir/IR/AffineMap.h"
#include "mlir/IR/Builders.h"
#include "rbln/compiler/frontend/graph_importer.h"
#include "rbln/compiler/frontend/ops/shape_util.h"
#include "rbln/compiler/ir/graph.pb.h"

namespace rbln::compiler {

std::string ShapeText(const Shape& s);
const ir::TensorType& OutType(const ir::Node& node, int output = 0);


absl::Status ShapeMismatch(const ir::Node& node, const Shape& expected);
absl::Status CheckOutputShape(const ir::Node& node, const Shape& expected);
// `input` has the output's dtype (data movement keeps it).
absl::Status CheckSameDType(GraphImporter& im, const ir::Node& node,
                            const std::string& input);
// `index` is an int32 or int64 tensor.
absl::Status CheckIndexDType(GraphImporter& im, const ir::Node& node,
                             const std::string& index);

// A zero constant of `element` (a storage type).
mlir::Value ZeroOf(mlir::OpBuilder& b, mlir::Location l, mlir::Type element);
// Output `output` of the node, without elements: a fill, so that it has a
// producer.
void DefineEmpty(GraphImporter& im, const ir::Node& node, int output = 0);

// One linalg.generic over output `output` of the node: `inputs` read through
// `maps` (over the output's dims), `body` gets their elements and returns
// the output's storage element.
using GenericBody = std::function<mlir::Value(
    mlir::OpBuilder&, mlir::Location, mlir::ValueRange elements)>;
mlir::Value OutputGeneric(GraphImporter& im, const ir::Node& node,
                          mlir::ValueRange inputs,
                          llvm::ArrayRef<mlir::AffineMap> maps,
                          const GenericBody& body, int output = 0);
// Index values of the output loops inside a generic body.
std::vector<mlir::Value> LoopIndices(mlir::OpBuilder& b, mlir::Location l,
                                     int rank);

// Output element `i` reads input 0 at `exprs(i)` (one affine expression per
// input dim over the output's dims). linalg takes a loop's extent from an
// operand whose map result is that bare loop index, so such an input dim
// must have the output dim's extent (slice the input first otherwise).
absl::Status EmitAffineCopy(GraphImporter& im, const ir::Node& node,
                            const std::vector<mlir::AffineExpr>& exprs);

// An element of `from`'s storage type converted to `to`'s storage type,
// with PyTorch's cast semantics (bool is 0/1; to bool tests non-zero).
mlir::Value CastElement(GraphImporter& im, mlir::OpBuilder& b,
                        mlir::Location l, mlir::Value v, ir::DType from,
                        ir::DType to);
// `a` (a Python number) in `t`'s compute type, cast as PyTorch casts a
// scalar to the tensor's dtype.
mlir::Value ScalarInDType(GraphImporter& im, mlir::OpBuilder& b,
                          mlir::Location l, const ir::Attribute& a,
                          ir::DType t);

// `v` reshaped (row-major) to `to`: collapse to 1-D, expand to `to`.
mlir::Value Reshape(GraphImporter& im, mlir::Value v, const Shape& to);

// A copy of `v` into a fresh tensor (a named linalg.copy, which
// canonicalization keeps), for ops that then update it in place.
mlir::Value CopyOf(GraphImporter& im, mlir::Value v);

// Runs `body` once per element of `shape`, in row-major order, in an
// scf.for nest that threads `carried` (tensors updated in place, counters)
// through; `body` returns the new carried values. Returns the final ones.
// A 0-d shape runs `body` once.
using SerialBody = std::function<std::vector<mlir::Value>(
    mlir::OpBuilder&, mlir::Location, mlir::ValueRange coords,
    mlir::ValueRange carried)>;
std::vector<mlir::Value> SerialLoop(GraphImporter& im, const Shape& shape,
                                    mlir::ValueRange carried,
                                    const SerialBody& body);

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_FRONTEND_OPS_MOVEMENT_UTIL_H_
