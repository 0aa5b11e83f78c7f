#include "rbln/compiler/frontend/ops/slice_copies.h"

#include <vector>

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "rbln/compiler/abi/kernel_abi.h"
#include "rbln/compiler/frontend/ops/movement_util.h"
#include "rbln/compiler/frontend/ops/shape_util.h"

namespace rbln::compiler {
namespace {

using ::mlir::Location;
using ::mlir::OpBuilder;
using ::mlir::OpFoldResult;
using ::mlir::Value;
using ::mlir::ValueRange;

// The offsets, sizes and strides of the slice at `at` along `dim` of a
// tensor of `shape`.
struct SliceAt {
  std::vector<OpFoldResult> offsets, sizes, strides;
};

SliceAt Slice(OpBuilder& b, const Shape& shape, int dim, Value at) {
  SliceAt s;
  s.offsets.assign(shape.size(), b.getIndexAttr(0));
  s.offsets[dim] = at;
  s.strides.assign(shape.size(), b.getIndexAttr(1));
  for (size_t d = 0; d < shape.size(); ++d) {
    s.sizes.push_back(b.getIndexAttr(static_cast<int>(d) == dim ? 1 : shape[d]));
  }
  return s;
}

// `into` with slice `to` (along `dim`) replaced by slice `from` of
// `source`: the body of both loops.
Value CopyOneSlice(OpBuilder& b, Location l, Value source, Value from,
                   Value into, Value to, int dim) {
  const Shape src_shape = ShapeOf(source), out_shape = ShapeOf(into);
  Shape slice_shape = out_shape;
  slice_shape[dim] = 1;
  auto slice_type = mlir::RankedTensorType::get(
      slice_shape,
      into.getType().cast<mlir::RankedTensorType>().getElementType());
  const SliceAt in = Slice(b, src_shape, dim, from);
  const SliceAt out = Slice(b, out_shape, dim, to);
  Value read = b.create<mlir::tensor::ExtractSliceOp>(
      l, slice_type, source, in.offsets, in.sizes, in.strides);
  Value dest = b.create<mlir::tensor::ExtractSliceOp>(
      l, slice_type, into, out.offsets, out.sizes, out.strides);
  Value copied =
      b.create<mlir::linalg::CopyOp>(l, ValueRange{read}, ValueRange{dest})
          .getResult(0);
  return b.create<mlir::tensor::InsertSliceOp>(l, copied, into, out.offsets,
                                               out.sizes, out.strides);
}

// for i in [0, k): into = body(i, checked index[i], into).
template <typename Body>
Value IndexLoop(GraphImporter& im, Value into, const std::string& index,
                int64_t bound, Body body) {
  OpBuilder& b = im.builder();
  Location l = im.loc();
  const Shape idx = ShapeOf(im.TypeOf(index));
  const int64_t k = NumElements(idx);
  auto loop = b.create<mlir::scf::ForOp>(
      l, IndexConst(b, l, 0), IndexConst(b, l, k), IndexConst(b, l, 1),
      ValueRange{into},
      [&](OpBuilder& lb, Location ll, Value i, ValueRange iter) {
        Value raw = lb.create<mlir::tensor::ExtractOp>(
            ll, im.ValueOf(index), idx.empty() ? ValueRange{} : ValueRange{i});
        Value at = im.CheckedIndex(lb, raw, bound);
        lb.create<mlir::scf::YieldOp>(ll, body(lb, ll, i, at, iter[0]));
      });
  return loop.getResult(0);
}

}  // namespace

Value CopySlices(GraphImporter& im, Value into, const std::string& index,
                 const std::string& source, int dim, int64_t bound) {
  Value src = im.ValueOf(source);
  return IndexLoop(im, into, index, bound,
                   [&](OpBuilder& b, Location l, Value i, Value at, Value acc) {
                     return CopyOneSlice(b, l, src, i, acc, at, dim);
                   });
}

Value GatherSlices(GraphImporter& im, Value x, const std::string& index,
                   int dim) {
  Shape shape = ShapeOf(x);
  const int64_t bound = shape[dim];
  shape[dim] = NumElements(ShapeOf(im.TypeOf(index)));
  OpBuilder& b = im.builder();
  Value out = b.create<mlir::tensor::EmptyOp>(
      im.loc(), shape,
      x.getType().cast<mlir::RankedTensorType>().getElementType());
  Value gathered =
      IndexLoop(im, out, index, bound,
                [&](OpBuilder& lb, Location l, Value i, Value at, Value acc) {
                  return CopyOneSlice(lb, l, x, at, acc, i, dim);
                });
  // Iteration i writes only slice i of `out`: the partition pass may spread
  // the iterations over the chiplet workers once bufferization has made the
  // loop copy in place (a loop that still carries a buffer stays whole).
  // index_copy's loop above stays in order: the last repeated index wins.
  mlir::Operation* loop = gathered.getDefiningOp();
  loop->setAttr(kParallelIterationsAttr, b.getUnitAttr());
  loop->setAttr(kWorkAttr, b.getI64IntegerAttr(NumElements(shape)));
  return gathered;
}

}  // namespace rbln::compiler
