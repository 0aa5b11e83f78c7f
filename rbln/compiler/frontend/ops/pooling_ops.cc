// Pooling: max pools with indices and average pools (2-D and 3-D, batched
// or not) and their backward ops; adaptive pools are adaptive_pooling_ops.cc.
//
// Semantics are ATen's CPU kernels': windows are clipped to the input;
// max pools take the first maximum in window order, a NaN replaces the
// current maximum (so the last NaN wins), and an index is the flat position
// in the input plane (an empty or all -inf window keeps its first valid
// position); average pools divide by divisor_override, else by the window
// size with (count_include_pad) or without padding, which ceil_mode can
// extend past the input. Float inputs accumulate in f32 and round once;
// integer inputs (max pools, average pools of int64) stay integers, and integer
// averages truncate as ATen's integer division does.
//
// Lowering:
//   avg_pool2d                 zero padding (nn::Pad) and
//                              linalg.pooling_nchw_sum, then a generic that
//                              divides by each window's divisor
//   avg_pool3d                 the same sum as a linalg.generic (MLIR 16 has
//                              no NCDHW pooling op)
//   max_pool*_with_indices     one reduction generic over the padded input
//                              with two results (maximum, index), its index
//                              initialized to each window's first valid
//                              position
//   _adaptive_avg_pool*, adaptive_max_pool*
//                              reduction generics over the largest window,
//                              reading with tensor.extract inside each
//                              output's window [floor(o*I/O), ceil((o+1)*I/O))
//   avg_pool*_backward, _adaptive_avg_pool*_backward
//                              gathers: each input position sums the
//                              gradients of the windows that contain it
//   max_pool*_with_indices_backward, adaptive_max_pool*_backward
//                              scf.for over grad_output adding each gradient
//                              at its (range-checked, SPEC P8) index
//
// IR conventions (ATen's schemas; int lists one int per spatial dim or one
// for all):
//   max_pool2d_with_indices(x) "kernel_size", "stride" (empty: the kernel),
//     "padding", "dilation", "ceil_mode" -> (out, indices int64)
//   max_pool2d_with_indices_backward(grad_output, x, indices) the same attrs
//   avg_pool2d(x) "kernel_size", "stride", "padding", "ceil_mode",
//     "count_include_pad" (default true), "divisor_override" (absent: none)
//   avg_pool2d_backward(grad_output, x) the same attrs
//   _adaptive_avg_pool2d(x) "output_size"; ..._backward(grad_output, x)
//   adaptive_max_pool2d(x) "output_size" -> (out, indices int64);
//     adaptive_max_pool2d_backward(grad_output, x, indices)
//   and the 3-D ops alike.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "llvm/ADT/APInt.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/AffineMap.h"
#include "rbln/compiler/frontend/graph_importer.h"
#include "rbln/compiler/frontend/graph_importer.h"
#include "rbln/compiler/frontend/ops/nn_builders.h"
#include "rbln/compiler/frontend/ops/op_families.h"
#include "rbln/compiler/frontend/ops/pooling_util.h"
#include "rbln/compiler/ir/graph_util.h"

namespace rbln::compiler {
namespace {

namespace arith = ::mlir::arith;
using ::mlir::AffineExpr;
using ::mlir::AffineMap;
using ::mlir::Location;
using ::mlir::OpBuilder;
using ::mlir::Type;
using ::mlir::Value;
using ::mlir::ValueRange;
using ::mlir::utils::IteratorType;
using namespace nn;  // NOLINT: the NN op builders.
using namespace pooling;  // NOLINT: the shared pooling helpers.

// --- Max pools. ---------------------------------------------------------------

// out[b, o] = max over the window, indices[b, o] its flat input position.
absl::Status ConvertMaxPool(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckArity(node, 1, 2); !s.ok()) return s;
  if (absl::Status s = CheckPoolDType(im, node, true); !s.ok()) return s;
  const std::string& x = node.inputs(0);
  const ir::DType t = im.TypeOf(x).dtype();
  absl::StatusOr<Pool> pool = ReadWindow(node, ShapeOf(im.TypeOf(x)), true);
  if (!pool.ok()) return pool.status();
  const Pool& p = *pool;
  if (absl::Status s = CheckOutput(node, 0, p.OutShape(), t); !s.ok()) return s;
  if (absl::Status s = CheckOutput(node, 1, p.OutShape(), ir::INT64); !s.ok()) {
    return s;
  }
  const int lead = p.lead_rank(), spatial = p.spatial;
  const int out_rank = p.rank();
  // The first valid position of each window: ATen's initial index.
  Value first = Parallel(
      im, {}, {}, p.OutShape(), im.builder().getI64Type(),
      [&](OpBuilder& b, Location l, ValueRange) {
        std::vector<Value> pos;
        for (int i = 0; i < spatial; ++i) {
          // start = o * s - pad; while (start < 0) start += dilation.
          Value start = b.create<arith::SubIOp>(
              l,
              b.create<arith::MulIOp>(l, LoopIndex(b, l, lead + i),
                                      IndexConst(b, l, p.stride[i])),
              IndexConst(b, l, p.padding[i]));
          Value neg = b.create<arith::MaxSIOp>(
              l, IndexConst(b, l, 0),
              b.create<arith::SubIOp>(l, IndexConst(b, l, 0), start));
          // ceil(neg / dilation) (arith.ceildivui has no LLVM lowering in
          // our pipeline).
          Value steps = b.create<arith::DivUIOp>(
              l,
              b.create<arith::AddIOp>(l, neg,
                                      IndexConst(b, l, p.dilation[i] - 1)),
              IndexConst(b, l, p.dilation[i]));
          pos.push_back(b.create<arith::AddIOp>(
              l, start,
              b.create<arith::MulIOp>(l, steps,
                                      IndexConst(b, l, p.dilation[i]))));
        }
        return ToI64(b, l, FlatIndex(b, l, pos, p.in));
      });
  // Loops (lead..., o..., k...): the window element o * s + k * d of the
  // padded input.
  const int loops = out_rank + spatial;
  auto dim = [&](int i) { return mlir::getAffineDimExpr(i, im.context()); };
  std::vector<AffineExpr> x_exprs, o_exprs;
  for (int i = 0; i < lead; ++i) {
    x_exprs.push_back(dim(i));
    o_exprs.push_back(dim(i));
  }
  for (int i = 0; i < spatial; ++i) {
    x_exprs.push_back(dim(lead + i) * p.stride[i] +
                      dim(out_rank + i) * p.dilation[i]);
    o_exprs.push_back(dim(lead + i));
  }
  std::vector<IteratorType> iterators(loops, IteratorType::parallel);
  for (int i = out_rank; i < loops; ++i) iterators[i] = IteratorType::reduction;
  const AffineMap o_map = AffineMap::get(loops, 0, o_exprs, im.context());
  Value xpad =
      PadForWindows(im, ToComputeTensor(im, im.ValueOf(x), t), p, 0.0);
  mlir::ResultRange results = Generic(
      im, ValueRange{xpad, WindowShape(im, p.kernel)},
      ValueRange{SmallestFilled(im, p.OutShape(), t), first},
      {AffineMap::get(loops, 0, x_exprs, im.context()),
       WindowMap(im, loops, out_rank, spatial), o_map, o_map},
      iterators, [&](OpBuilder& b, Location l, ValueRange args) {
        // The window position in the input, and whether it is inside.
        Value valid = b.create<arith::ConstantIntOp>(l, 1, 1);
        std::vector<Value> pos;
        for (int i = 0; i < spatial; ++i) {
          Value at = b.create<arith::SubIOp>(
              l,
              b.create<arith::AddIOp>(
                  l,
                  b.create<arith::MulIOp>(l, LoopIndex(b, l, lead + i),
                                          IndexConst(b, l, p.stride[i])),
                  b.create<arith::MulIOp>(l, LoopIndex(b, l, out_rank + i),
                                          IndexConst(b, l, p.dilation[i]))),
              IndexConst(b, l, p.padding[i]));
          valid = b.create<arith::AndIOp>(
              l, valid,
              b.create<arith::AndIOp>(
                  l,
                  Cmp(b, l, arith::CmpIPredicate::sge, at, IndexConst(b, l, 0)),
                  Cmp(b, l, arith::CmpIPredicate::slt, at,
                      IndexConst(b, l, p.in[i]))));
          pos.push_back(at);
        }
        Value v = args[0], acc = args[2];
        Value take = b.create<arith::AndIOp>(
            l, valid,
            b.create<arith::OrIOp>(l, Greater(b, l, v, acc), IsNan(b, l, v)));
        return llvm::SmallVector<Value>{
            b.create<arith::SelectOp>(l, take, v, acc),
            b.create<arith::SelectOp>(
                l, take, ToI64(b, l, FlatIndex(b, l, pos, p.in)), args[3])};
      });
  im.Define(node.outputs(0), ToStorageTensor(im, results[0], t));
  im.Define(node.outputs(1), results[1]);
  return absl::OkStatus();
}

// grad_input[b, indices[b, o]] += grad_output[b, o], in order, in f32 (or
// the integer type); shared by the max pools and adaptive max pools.
Value ScatterAddAtIndices(GraphImporter& im, Value grad_output, Value indices,
                          const Shape& lead, const Shape& in, ir::DType t) {
  OpBuilder& b = im.builder();
  Location l = im.loc();
  const int64_t batch = NumElements(lead), plane = NumElements(in);
  const int64_t outputs = NumElements(ShapeOf(grad_output)) /
                          std::max<int64_t>(batch, 1);
  const Type compute = im.ComputeType(t);
  // Flat [batch, plane] and [batch, outputs] views.
  auto flat = [&](Value v, int64_t inner) {
    const Shape s = ShapeOf(v);
    Value collapsed = CollapseDims(im, v, 0, s.size());
    return ExpandDim(im, collapsed, 0, {batch, inner});
  };
  Value go = flat(grad_output, outputs), idx = flat(indices, outputs);
  Value acc = Filled(im, {batch, plane}, compute, 0.0);
  if (batch > 0 && outputs > 0) {
    auto outer = b.create<mlir::scf::ForOp>(
        l, IndexConst(b, l, 0), IndexConst(b, l, batch), IndexConst(b, l, 1),
        ValueRange{acc},
        [&](OpBuilder& ob, Location ol, Value n, ValueRange outer_iter) {
          auto inner = ob.create<mlir::scf::ForOp>(
              ol, IndexConst(ob, ol, 0), IndexConst(ob, ol, outputs),
              IndexConst(ob, ol, 1), ValueRange{outer_iter[0]},
              [&](OpBuilder& lb, Location ll, Value o, ValueRange iter) {
                Value raw = lb.create<mlir::tensor::ExtractOp>(
                    ll, idx, ValueRange{n, o});
                Value at = im.CheckedIndex(lb, raw, plane);
                Value g = im.ToCompute(
                    lb,
                    lb.create<mlir::tensor::ExtractOp>(ll, go, ValueRange{n, o}),
                    t);
                Value old = lb.create<mlir::tensor::ExtractOp>(
                    ll, iter[0], ValueRange{n, at});
                Value sum = compute.isa<mlir::FloatType>()
                                ? lb.create<arith::AddFOp>(ll, old, g)
                                      .getResult()
                                : lb.create<arith::AddIOp>(ll, old, g)
                                      .getResult();
                lb.create<mlir::scf::YieldOp>(
                    ll, lb.create<mlir::tensor::InsertOp>(ll, sum, iter[0],
                                                          ValueRange{n, at})
                            .getResult());
              });
          ob.create<mlir::scf::YieldOp>(ol, inner.getResult(0));
        });
    acc = outer.getResult(0);
  }
  Shape full = lead;
  full.insert(full.end(), in.begin(), in.end());
  Value shaped = ExpandDim(im, CollapseDims(im, acc, 0, 2), 0, full);
  return ToStorageTensor(im, shaped, t);
}

absl::Status ConvertMaxPoolBackward(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckArity(node, 3, 1); !s.ok()) return s;
  if (absl::Status s = CheckPoolDType(im, node, true); !s.ok()) return s;
  const std::string &go = node.inputs(0), &x = node.inputs(1),
                    &indices = node.inputs(2);
  const ir::DType t = im.TypeOf(go).dtype();
  const Shape xs = ShapeOf(im.TypeOf(x));
  Pool p;
  p.spatial = SpatialOf(node);
  if (absl::Status s = SplitInput(node, xs, p); !s.ok()) return s;
  if (ShapeOf(im.TypeOf(indices)) != ShapeOf(im.TypeOf(go)) ||
      im.TypeOf(indices).dtype() != ir::INT64 ||
      im.TypeOf(x).dtype() != t) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: grad_output %%%s (%s) and indices %%%s (%s) must have one "
        "shape, indices int64, and the input %%%s the gradient's dtype",
        node.op(), go, ir::TypeToText(im.TypeOf(go)), indices,
        ir::TypeToText(im.TypeOf(indices)), x));
  }
  if (absl::Status s = CheckOutput(node, 0, xs, t); !s.ok()) return s;
  im.Define(node.outputs(0),
            ScatterAddAtIndices(im, im.ValueOf(go), im.ValueOf(indices),
                                p.lead, p.in, t));
  return absl::OkStatus();
}

// --- Average pools. ----------------------------------------------------------

struct AvgOptions {
  bool count_include_pad = true;
  int64_t divisor_override = 0;  // 0: none
};

AvgOptions ReadAvgOptions(const ir::Node& node) {
  AvgOptions o;
  o.count_include_pad = BoolAttr(node, "count_include_pad", true);
  o.divisor_override = IntAttr(node, "divisor_override", 0);
  return o;
}

// ATen's divide_factor of the window at output position `o` (index values),
// or 0 for a window with no input element (its output is 0).
Value Divisor(OpBuilder& b, Location l, const Pool& p, const AvgOptions& opts,
              const std::vector<Value>& o) {
  Value pool_size = IndexConst(b, l, 1), clipped = IndexConst(b, l, 1);
  Value empty = b.create<arith::ConstantIntOp>(l, 0, 1);
  for (int i = 0; i < p.spatial; ++i) {
    Value start = b.create<arith::SubIOp>(
        l, b.create<arith::MulIOp>(l, o[i], IndexConst(b, l, p.stride[i])),
        IndexConst(b, l, p.padding[i]));
    Value end = b.create<arith::MinSIOp>(
        l, b.create<arith::AddIOp>(l, start, IndexConst(b, l, p.kernel[i])),
        IndexConst(b, l, p.in[i] + p.padding[i]));
    pool_size = b.create<arith::MulIOp>(
        l, pool_size, b.create<arith::SubIOp>(l, end, start));
    start = b.create<arith::MaxSIOp>(l, start, IndexConst(b, l, 0));
    end = b.create<arith::MinSIOp>(l, end, IndexConst(b, l, p.in[i]));
    empty = b.create<arith::OrIOp>(
        l, empty, Cmp(b, l, arith::CmpIPredicate::sge, start, end));
    clipped = b.create<arith::MulIOp>(
        l, clipped, b.create<arith::SubIOp>(l, end, start));
  }
  Value divisor = opts.divisor_override != 0
                      ? IndexConst(b, l, opts.divisor_override)
                      : (opts.count_include_pad ? pool_size : clipped);
  return b.create<arith::SelectOp>(l, empty, IndexConst(b, l, 0), divisor);
}

// v / divisor in the compute type of `t` (0 when the window is empty).
Value DivideByWindow(OpBuilder& b, Location l, GraphImporter& im, Value v,
                     Value divisor, ir::DType t) {
  Value is_empty =
      Cmp(b, l, arith::CmpIPredicate::eq, divisor, IndexConst(b, l, 0));
  Value safe = b.create<arith::SelectOp>(l, is_empty, IndexConst(b, l, 1),
                                         divisor);
  Value d64 = ToI64(b, l, safe);
  Value q;
  if (IsFloat(t)) {
    Value df = b.create<arith::SIToFPOp>(l, b.getF32Type(), d64);
    q = b.create<arith::DivFOp>(l, v, df);
  } else {
    q = b.create<arith::DivSIOp>(
        l, v, im.CastCompute(b, d64, ir::INT64, t));
  }
  return b.create<arith::SelectOp>(l, is_empty,
                                   im.ComputeConstant(b, 0.0, t), q);
}

std::vector<Value> SpatialIndices(OpBuilder& b, Location l, int first,
                                  int count) {
  std::vector<Value> v;
  for (int i = 0; i < count; ++i) v.push_back(LoopIndex(b, l, first + i));
  return v;
}

absl::Status ConvertAvgPool(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckArity(node, 1, 1); !s.ok()) return s;
  const std::string& x = node.inputs(0);
  const ir::DType t = im.TypeOf(x).dtype();
  // The CPU's average pools take int64 but not int32.
  if (t == ir::INT32) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: input %%%s is %s; PyTorch's CPU kernel takes floating point "
        "and int64 inputs",
        node.op(), x, ir::TypeToText(im.TypeOf(x))));
  }
  if (absl::Status s = CheckPoolDType(im, node, true); !s.ok()) return s;
  absl::StatusOr<Pool> pool = ReadWindow(node, ShapeOf(im.TypeOf(x)), false);
  if (!pool.ok()) return pool.status();
  const Pool& p = *pool;
  const AvgOptions opts = ReadAvgOptions(node);
  if (absl::Status s = CheckOutput(node, 0, p.OutShape(), t); !s.ok()) return s;
  OpBuilder& b = im.builder();
  const Type compute = im.ComputeType(t);
  Value xpad =
      PadForWindows(im, ToComputeTensor(im, im.ValueOf(x), t), p, 0.0);
  Value sum;
  if (p.spatial == 2) {
    // linalg.pooling_nchw_sum wants [N, C, H, W].
    Value in = p.lead_rank() == 1
                   ? ExpandDim(im, xpad, 0, {1, p.lead[0]})
                   : xpad;
    Shape out = {p.lead_rank() == 1 ? 1 : p.lead[0], p.lead.back()};
    out.insert(out.end(), p.out.begin(), p.out.end());
    Value init = Filled(im, out, compute, 0.0);
    auto attr = [&](const std::vector<int64_t>& v) {
      return mlir::DenseIntElementsAttr::get(
          mlir::RankedTensorType::get({2}, b.getI64Type()),
          llvm::ArrayRef<int64_t>(v));
    };
    sum = b.create<mlir::linalg::PoolingNchwSumOp>(
               im.loc(), mlir::TypeRange{init.getType()},
               ValueRange{in, Empty(im, p.kernel, compute)}, ValueRange{init},
               llvm::ArrayRef<mlir::NamedAttribute>{
                   b.getNamedAttr("strides", attr(p.stride)),
                   b.getNamedAttr("dilations", attr({1, 1}))})
              .getResult(0);
    if (p.lead_rank() == 1) sum = CollapseDims(im, sum, 0, 2);
  } else {
    const int out_rank = p.rank(), loops = out_rank + p.spatial;
    auto dim = [&](int i) { return mlir::getAffineDimExpr(i, im.context()); };
    std::vector<AffineExpr> x_exprs, o_exprs;
    for (int i = 0; i < p.lead_rank(); ++i) {
      x_exprs.push_back(dim(i));
      o_exprs.push_back(dim(i));
    }
    for (int i = 0; i < p.spatial; ++i) {
      const int o = p.lead_rank() + i;
      x_exprs.push_back(dim(o) * p.stride[i] + dim(out_rank + i));
      o_exprs.push_back(dim(o));
    }
    std::vector<IteratorType> iterators(loops, IteratorType::parallel);
    for (int i = out_rank; i < loops; ++i) {
      iterators[i] = IteratorType::reduction;
    }
    sum = Generic(im, ValueRange{xpad, WindowShape(im, p.kernel)},
                  Filled(im, p.OutShape(), compute, 0.0),
                  {AffineMap::get(loops, 0, x_exprs, im.context()),
                   WindowMap(im, loops, out_rank, p.spatial),
                   AffineMap::get(loops, 0, o_exprs, im.context())},
                  iterators, [](OpBuilder& b, Location l, ValueRange a) {
                    return llvm::SmallVector<Value>{
                        AddScalars(b, l, a[2], a[0])};
                  })[0];
  }
  const int lead = p.lead_rank();
  im.Define(node.outputs(0),
            Parallel(im, sum, {IdentityMap(im, p.rank())}, p.OutShape(),
                     im.StorageType(t),
                     [&](OpBuilder& b, Location l, ValueRange args) {
                       Value divisor = Divisor(
                           b, l, p, opts, SpatialIndices(b, l, lead, p.spatial));
                       return im.FromCompute(
                           b, DivideByWindow(b, l, im, args[0], divisor, t), t);
                     }));
  return absl::OkStatus();
}

// grad_input[b, i] = sum over the windows o containing i of
// grad_output[b, o] / divisor(o).
absl::Status ConvertAvgPoolBackward(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckArity(node, 2, 1); !s.ok()) return s;
  if (absl::Status s = CheckPoolDType(im, node, true); !s.ok()) return s;
  const std::string &go = node.inputs(0), &x = node.inputs(1);
  const ir::DType t = im.TypeOf(go).dtype();
  const Shape xs = ShapeOf(im.TypeOf(x));
  absl::StatusOr<Pool> pool = ReadWindow(node, xs, false);
  if (!pool.ok()) return pool.status();
  const Pool& p = *pool;
  const AvgOptions opts = ReadAvgOptions(node);
  if (ShapeOf(im.TypeOf(go)) != p.OutShape()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: grad_output %%%s is %s, but the pooling's output is [%s]",
        node.op(), go, ir::TypeToText(im.TypeOf(go)),
        absl::StrJoin(p.OutShape(), ", ")));
  }
  if (absl::Status s = CheckOutput(node, 0, xs, t); !s.ok()) return s;
  Value grad = ToComputeTensor(im, im.ValueOf(go), t);
  const int lead = p.lead_rank(), in_rank = p.rank();
  const int loops = in_rank + p.spatial;  // (lead..., i..., k...)
  std::vector<IteratorType> iterators(loops, IteratorType::parallel);
  for (int i = in_rank; i < loops; ++i) iterators[i] = IteratorType::reduction;
  Value acc = Generic(
      im, WindowShape(im, p.kernel), Filled(im, xs, im.ComputeType(t), 0.0),
      {WindowMap(im, loops, in_rank, p.spatial),
       WindowMap(im, loops, 0, in_rank)},
      iterators, [&](OpBuilder& b, Location l, ValueRange args) {
        // The window o = (i + pad - k) / stride, if divisible and in range.
        Value valid = b.create<arith::ConstantIntOp>(l, 1, 1);
        std::vector<Value> coords, o;
        for (int d = 0; d < lead; ++d) coords.push_back(LoopIndex(b, l, d));
        for (int i = 0; i < p.spatial; ++i) {
          Value num = b.create<arith::SubIOp>(
              l,
              b.create<arith::AddIOp>(l, LoopIndex(b, l, lead + i),
                                      IndexConst(b, l, p.padding[i])),
              LoopIndex(b, l, in_rank + i));
          Value nonneg =
              Cmp(b, l, arith::CmpIPredicate::sge, num, IndexConst(b, l, 0));
          Value safe = b.create<arith::MaxSIOp>(l, num, IndexConst(b, l, 0));
          Value q = b.create<arith::DivUIOp>(l, safe,
                                             IndexConst(b, l, p.stride[i]));
          Value exact = Cmp(
              b, l, arith::CmpIPredicate::eq,
              b.create<arith::RemUIOp>(l, safe, IndexConst(b, l, p.stride[i])),
              IndexConst(b, l, 0));
          Value in_range =
              Cmp(b, l, arith::CmpIPredicate::slt, q, IndexConst(b, l, p.out[i]));
          valid = b.create<arith::AndIOp>(
              l, valid,
              b.create<arith::AndIOp>(
                  l, nonneg, b.create<arith::AndIOp>(l, exact, in_range)));
          Value clamped = b.create<arith::MinSIOp>(
              l, q, IndexConst(b, l, p.out[i] - 1));
          o.push_back(clamped);
          coords.push_back(clamped);
        }
        Value g = b.create<mlir::tensor::ExtractOp>(l, grad, coords);
        Value share = DivideByWindow(b, l, im, g, Divisor(b, l, p, opts, o), t);
        Value zero = im.ComputeConstant(b, 0.0, t);
        Value term = b.create<arith::SelectOp>(l, valid, share, zero);
        Value sum = IsFloat(t) ? b.create<arith::AddFOp>(l, args[1], term)
                                     .getResult()
                               : b.create<arith::AddIOp>(l, args[1], term)
                                     .getResult();
        return llvm::SmallVector<Value>{sum};
      })[0];
  im.Define(node.outputs(0), ToStorageTensor(im, acc, t));
  return absl::OkStatus();
}

}  // namespace

void RegisterPoolingOps(OpConverterTable& table) {
  for (const char* op : {"max_pool2d_with_indices", "max_pool3d_with_indices"}) {
    table[op] = &ConvertMaxPool;
  }
  for (const char* op :
       {"max_pool2d_with_indices_backward", "max_pool3d_with_indices_backward",
        "adaptive_max_pool2d_backward", "adaptive_max_pool3d_backward"}) {
    table[op] = &ConvertMaxPoolBackward;
  }
  table["avg_pool2d"] = &ConvertAvgPool;
  table["avg_pool3d"] = &ConvertAvgPool;
  table["avg_pool2d_backward"] = &ConvertAvgPoolBackward;
  table["avg_pool3d_backward"] = &ConvertAvgPoolBackward;
}

}  // namespace rbln::compiler
