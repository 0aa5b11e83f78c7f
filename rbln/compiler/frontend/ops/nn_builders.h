// Builders shared by the NN op converters (convolution_ops.cc,
// norm_ops.cc, pooling_ops.cc, sampling_ops.cc): tensors in the compute type,
// linalg.generic shorthands, padding, and ATen's int-list arguments.
#ifndef RBLN_COMPILER_FRONTEND_OPS_NN_BUILDERS_H_
#define RBLN_COMPILER_FRONTEND_OPS_NN_BUILDERS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/IR/AffineMap.h"
#include "mlir/IR/Builders.h"
#include "rbln/compiler/frontend/graph_importer.h"

namespace rbln::compiler::nn {

using BodyFn = llvm::function_ref<llvm::SmallVector<mlir::Value>(
    mlir::OpBuilder&, mlir::Location, mlir::ValueRange)>;
using ScalarFn = llvm::function_ref<mlir::Value(
    mlir::OpBuilder&, mlir::Location, mlir::ValueRange)>;

int64_t NumElements(const Shape& shape);
mlir::Type ElementType(mlir::Value ranked_tensor);

mlir::Value Empty(GraphImporter& im, const Shape& shape, mlir::Type element);
// A tensor of `shape` filled with `value` (an f32 or integer constant of
// `element`).
mlir::Value Filled(GraphImporter& im, const Shape& shape, mlir::Type element,
                   double value);

// A linalg.generic writing into `inits`; `body` returns the yielded values.
mlir::ResultRange Generic(GraphImporter& im, mlir::ValueRange inputs,
                          mlir::ValueRange inits,
                          llvm::ArrayRef<mlir::AffineMap> maps,
                          llvm::ArrayRef<mlir::utils::IteratorType> iterators,
                          BodyFn body);
// An all-parallel linalg.generic producing a fresh tensor of `shape` and
// `element`; `in_maps` read the inputs from the output's loops. `body` gets
// the inputs' elements and then the (unused) output element.
mlir::Value Parallel(GraphImporter& im, mlir::ValueRange inputs,
                     llvm::ArrayRef<mlir::AffineMap> in_maps,
                     const Shape& shape, mlir::Type element, ScalarFn body);

mlir::AffineMap IdentityMap(GraphImporter& im, int rank);
// (d0 .. d{rank-1}) -> (d{dims[0]}, d{dims[1]}, ...).
mlir::AffineMap DimsMap(GraphImporter& im, int rank,
                        const std::vector<int>& dims);

// `v` (a tensor of dtype `t`) in its compute type: f32 for half types, by an
// element-wise generic; `v` itself when it already is.
mlir::Value ToComputeTensor(GraphImporter& im, mlir::Value v, ir::DType t);
// A compute-type tensor rounded once to the storage type of `t`.
mlir::Value ToStorageTensor(GraphImporter& im, mlir::Value v, ir::DType t);

// `into` with `source` copied in at `offsets`, every `strides`-th element
// per dim: a linalg.copy into an extract_slice, then insert_slice, which
// one-shot bufferization does in place. (tensor.pad and a plain
// insert_slice of a computed value bufferize to memref.copy into a strided
// subview, which lowers to a call of the runner-utils library's memrefCopy
// that our JIT does not load.)
mlir::Value Embed(GraphImporter& im, mlir::Value source, mlir::Value into,
                  const Shape& offsets, const Shape& strides);
// `v` padded by `low`/`high` per dim with the scalar `value` (of `v`'s
// element type): a filled tensor with `v` embedded.
mlir::Value Pad(GraphImporter& im, mlir::Value v, const Shape& low,
                const Shape& high, double value);
// Splits dim `dim` of `v` into `sizes` (tensor.expand_shape).
mlir::Value ExpandDim(GraphImporter& im, mlir::Value v, int dim,
                      const Shape& sizes);
// Merges dims [dim, dim + count) of `v` (tensor.collapse_shape).
mlir::Value CollapseDims(GraphImporter& im, mlir::Value v, int dim, int count);

// ATen's per-spatial-dim int-list argument `name` as `n` values: absent or
// empty gives `dflt` (already `n` values or one to repeat), one value is
// repeated (kernel_size=2 means 2x2).
absl::StatusOr<std::vector<int64_t>> SpatialList(
    const ir::Node& node, const std::string& name, int n,
    const std::vector<int64_t>& dflt);

// The input of `node` at `i` if it exists.
bool HasInput(const ir::Node& node, int i);

absl::Status CheckFloatTensor(GraphImporter& im, const ir::Node& node,
                              const std::string& input, const char* what);
absl::Status CheckOutput(const ir::Node& node, int output, const Shape& shape,
                         ir::DType dtype);

// x + y and x * y of one float or integer type.
mlir::Value AddScalars(mlir::OpBuilder& b, mlir::Location l, mlir::Value x,
                       mlir::Value y);
mlir::Value MulScalars(mlir::OpBuilder& b, mlir::Location l, mlir::Value x,
                       mlir::Value y);

// Integer scalar helpers for bodies (index type).
mlir::Value IndexConst(mlir::OpBuilder& b, mlir::Location l, int64_t v);
mlir::Value LoopIndex(mlir::OpBuilder& b, mlir::Location l, int dim);
mlir::Value F32Const(mlir::OpBuilder& b, mlir::Location l, double v);

}  // namespace rbln::compiler::nn

#endif  // RBLN_COMPILER_FRONTEND_OPS_NN_BUILDERS_H_
