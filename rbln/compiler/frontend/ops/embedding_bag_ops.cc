// nn.functional.embedding_bag: _embedding_bag and _embedding_bag_forward_only
// (the same forward; ATen's two schemas differ only for autograd), and
// embedding_renorm, the max_norm step of embedding and embedding_bag.
//
// One scf.for over the bags; bag b's indices [offsets[b], offsets[b+1])
// (the last bag runs to the end unless include_last_offset) are a nested
// loop with those bounds, read at run time. Sums accumulate in float32 and
// round once, as ATen's CPU kernels (fbgemm or their float buffer) do for
// half types; mean divides the rounded sum by the bag's size; max keeps the
// first largest row element and its index. Indices equal to padding_idx are
// skipped and not counted. Every index and offset is range-checked (SPEC
// P8).
//
// IR conventions (attributes named as the ATen schema's arguments):
//   _embedding_bag(weight[V, D], indices[N], offsets[B'] [, per_sample_weights[N]])
//     "mode" = 0 (sum) | 1 (mean) | 2 (max), "include_last_offset" = false,
//     "padding_idx" = -1 (none; only a non-negative one skips),
//     "scale_grad_by_freq", "sparse" (backward only, ignored)
//   outputs, as ATen's CPU kernel gives them (B bags: B' or B' - 1):
//     output[B, D] (weight's dtype);
//     offset2bag[N] int: the bag of each index (or empty, [0], where
//       ATen's CPU kernel skips it: the sum mode without padding_idx);
//     bag_size[B] int: the bag's non-padding indices (zeros in sum mode);
//       [B'] (one more, 0) as ATen's meta function shapes it for devices;
//     max_indices: [B, D] the row each max came from (max mode), else [B]:
//       bag_size (mean mode) or zeros (sum mode), or empty, [0] (the meta
//       function's shape for devices).
//   Integer outputs have the indices' dtype (ATen promotes indices and
//   offsets to a common type).
//   embedding_renorm(weight[V, D], indices) "max_norm", "norm_type": weight
//     with every row that indices name scaled by max_norm / (norm + 1e-7)
//     where its norm_type-norm exceeds max_norm (each row once, however
//     often it is named); the norm is rounded to the weight's dtype and the
//     scale computed in double, as ATen's CPU kernel does.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "rbln/compiler/frontend/graph_importer.h"
#include "rbln/compiler/frontend/ops/movement_util.h"
#include "rbln/compiler/frontend/ops/op_families.h"
#include "rbln/compiler/ir/graph_util.h"

namespace rbln::compiler {
namespace {

namespace arith = ::mlir::arith;
using ::mlir::Location;
using ::mlir::OpBuilder;
using ::mlir::Type;
using ::mlir::Value;
using ::mlir::ValueRange;

constexpr int kSum = 0, kMean = 1, kMax = 2;

// A tensor of `shape` and element type `element` filled with `value`.
Value Filled(GraphImporter& im, const Shape& shape, Type element, Value value) {
  OpBuilder& b = im.builder();
  Value init = b.create<mlir::tensor::EmptyOp>(im.loc(), shape, element);
  return b.create<mlir::linalg::FillOp>(im.loc(), ValueRange{value}, ValueRange{init})
      .getResult(0);
}

absl::Status ConvertEmbeddingBag(GraphImporter& im, const ir::Node& node) {
  if (node.inputs_size() < 3 || node.inputs_size() > 4 || node.outputs_size() != 4) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s takes weight, indices, offsets [, per_sample_weights] and gives 4 "
        "outputs, got %d input(s) and %d output(s)",
        node.op(), node.inputs_size(), node.outputs_size()));
  }
  const std::string &weight = node.inputs(0), &indices = node.inputs(1),
                    &offsets = node.inputs(2);
  const bool weighted = node.inputs_size() == 4;
  const ir::DType t = im.TypeOf(weight).dtype();
  if (!IsFloat(t) || OutType(node).dtype() != t) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: weight %%%s must be a float tensor and the output of its dtype, "
        "got %s and %s",
        node.op(), weight, ir::TypeToText(im.TypeOf(weight)),
        ir::TypeToText(OutType(node))));
  }
  for (const std::string& name : {indices, offsets}) {
    if (absl::Status s = CheckIndexDType(im, node, name); !s.ok()) return s;
  }
  const Shape w = ShapeOf(im.TypeOf(weight)), idx = ShapeOf(im.TypeOf(indices)),
              off = ShapeOf(im.TypeOf(offsets));
  if (w.size() != 2 || idx.size() != 1 || off.size() != 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: expects a 2-D weight, 1-D indices and 1-D offsets, got %s, %s, %s",
        node.op(), ShapeText(w), ShapeText(idx), ShapeText(off)));
  }
  const int mode = IntAttr(node, "mode", kSum);
  if (mode != kSum && mode != kMean && mode != kMax) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: mode must be 0 (sum), 1 (mean) or 2 (max), got %d", node.op(), mode));
  }
  if (weighted) {
    if (mode != kSum) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "op %s: per_sample_weights is only supported for mode='sum' (got mode %d)",
          node.op(), mode));
    }
    if (im.TypeOf(node.inputs(3)).dtype() != t ||
        ShapeOf(im.TypeOf(node.inputs(3))) != idx) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "op %s: per_sample_weights %%%s must be the weight's dtype and the "
          "indices' shape %s",
          node.op(), node.inputs(3), ShapeText(idx)));
    }
  }
  const bool include_last = BoolAttr(node, "include_last_offset", false);
  const int64_t padding_idx = IntAttr(node, "padding_idx", -1);
  const int64_t V = w[0], D = w[1], N = idx[0];
  const int64_t bags = include_last ? std::max<int64_t>(off[0] - 1, 0) : off[0];
  // The outputs' shapes.
  const ir::DType int_type = OutType(node, 2).dtype();
  if (int_type != ir::INT32 && int_type != ir::INT64) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: bag_size must be int32 or int64, got %s", node.op(),
        ir::TypeToText(OutType(node, 2))));
  }
  const Shape out_shape = {bags, D};
  const Shape o2b = ShapeOf(OutType(node, 1)),
              max_shape = ShapeOf(OutType(node, 3));
  const std::vector<std::pair<int, std::vector<Shape>>> allowed = {
      {0, {out_shape}},
      {1, {{N}, {0}}},
      {2, {{bags}, {off[0]}}},
      {3, {mode == kMax ? Shape{bags, D} : Shape{bags}, {0}}}};
  for (const auto& [i, shapes] : allowed) {
    const Shape got = ShapeOf(OutType(node, i));
    if (std::find(shapes.begin(), shapes.end(), got) == shapes.end()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "op %s: output %d (%%%s) is %s, expected %s%s", node.op(), i,
          node.outputs(i).name(), ir::TypeToText(OutType(node, i)),
          ShapeText(shapes[0]), shapes.size() > 1 ? " or " + ShapeText(shapes[1]) : ""));
    }
  }
  if (N > 0 && V == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: index out of range: weight %%%s has no rows", node.op(), weight));
  }

  OpBuilder& b = im.builder();
  Location loc = im.loc();
  Type f32 = b.getF32Type(), i64 = b.getI64Type();
  Type int_storage = im.StorageType(int_type);
  auto i64c = [&](OpBuilder& ob, int64_t v) -> Value {
    return ob.create<arith::ConstantIntOp>(loc, v, 64);
  };
  // Loop state: the float32 accumulators, bag sizes, the rows of the maxima
  // and the bag of each index.
  Value acc = Filled(im, out_shape, f32, b.create<arith::ConstantOp>(loc, b.getF32FloatAttr(0)));
  Value sizes = Filled(im, {bags}, i64, i64c(b, 0));
  Value argmax = Filled(im, {bags, D}, i64, i64c(b, 0));
  Value owner = Filled(im, {std::max<int64_t>(N, 1)}, i64, i64c(b, -1));
  const Value x_weight = im.ValueOf(weight), x_indices = im.ValueOf(indices),
              x_offsets = im.ValueOf(offsets);
  const Value x_psw = weighted ? im.ValueOf(node.inputs(3)) : Value();

  std::vector<Value> state = {acc, sizes, argmax, owner};
  if (bags > 0 && N > 0) {
    state = SerialLoop(
        im, {bags}, state,
        [&](OpBuilder& ob, Location l, ValueRange bag, ValueRange st) -> std::vector<Value> {
          // [start, end): this bag's indices, offsets checked against N.
          Value start = im.CheckedIndex(
              ob, ob.create<mlir::tensor::ExtractOp>(l, x_offsets, bag), N + 1);
          Value end = IndexConst(ob, l, N);
          Value next_bag = ob.create<arith::AddIOp>(l, bag[0], IndexConst(ob, l, 1));
          if (include_last) {
            end = im.CheckedIndex(ob, ob.create<mlir::tensor::ExtractOp>(l, x_offsets, next_bag),
                                  N + 1);
          } else {
            // The last bag runs to the end: offsets[b + 1] for the others.
            Value last = ob.create<arith::CmpIOp>(l, arith::CmpIPredicate::eq, next_bag,
                                                  IndexConst(ob, l, bags));
            Value clamped = ob.create<arith::MinSIOp>(l, next_bag, IndexConst(ob, l, bags - 1));
            Value following = im.CheckedIndex(
                ob, ob.create<mlir::tensor::ExtractOp>(l, x_offsets, clamped), N + 1);
            end = ob.create<arith::SelectOp>(l, last, end, following);
          }
          end = ob.create<arith::MaxSIOp>(l, end, start);
          auto loop = ob.create<mlir::scf::ForOp>(
              l, start, end, IndexConst(ob, l, 1), st,
              [&](OpBuilder& lb, Location ll, Value i, ValueRange it) {
                Value raw = lb.create<mlir::tensor::ExtractOp>(ll, x_indices, i);
                Value row = im.CheckedIndex(lb, raw, V);
                Value raw64 = raw.getType() == i64 ? raw
                                                   : lb.create<arith::ExtSIOp>(ll, i64, raw).getResult();
                Value b64 = lb.create<arith::IndexCastOp>(ll, i64, bag[0]);
                Value owners = lb.create<mlir::tensor::InsertOp>(ll, b64, it[3], i);
                Value skip = padding_idx >= 0
                                 ? lb.create<arith::CmpIOp>(ll, arith::CmpIPredicate::eq, raw64,
                                                            i64c(lb, padding_idx))
                                       .getResult()
                                 : lb.create<arith::ConstantIntOp>(ll, 0, 1).getResult();
                Value scale;
                if (weighted) {
                  scale = im.ToCompute(lb, lb.create<mlir::tensor::ExtractOp>(ll, x_psw, i), t);
                }
                Value first = lb.create<arith::CmpIOp>(
                    ll, arith::CmpIPredicate::eq,
                    lb.create<mlir::tensor::ExtractOp>(ll, it[1], bag[0]), i64c(lb, 0));
                // One row of the bag: D elements.
                auto inner = lb.create<mlir::scf::ForOp>(
                    ll, IndexConst(lb, ll, 0), IndexConst(lb, ll, D), IndexConst(lb, ll, 1),
                    ValueRange{it[0], it[2]},
                    [&](OpBuilder& db, Location dl, Value d, ValueRange dit) {
                      Value v = im.ToCompute(
                          db, db.create<mlir::tensor::ExtractOp>(dl, x_weight, ValueRange{row, d}),
                          t);
                      Value old = db.create<mlir::tensor::ExtractOp>(dl, dit[0], ValueRange{bag[0], d});
                      Value acc_next, arg_next = dit[1];
                      if (mode == kMax) {
                        Value take = db.create<arith::OrIOp>(
                            dl, first,
                            db.create<arith::CmpFOp>(dl, arith::CmpFPredicate::OGT, v, old));
                        take = db.create<arith::AndIOp>(
                            dl, take,
                            db.create<arith::XOrIOp>(dl, skip,
                                                     db.create<arith::ConstantIntOp>(dl, 1, 1)));
                        acc_next = db.create<arith::SelectOp>(dl, take, v, old);
                        Value old_arg =
                            db.create<mlir::tensor::ExtractOp>(dl, dit[1], ValueRange{bag[0], d});
                        arg_next = db.create<mlir::tensor::InsertOp>(
                            dl, db.create<arith::SelectOp>(dl, take, raw64, old_arg), dit[1],
                            ValueRange{bag[0], d});
                      } else {
                        if (weighted) v = db.create<arith::MulFOp>(dl, v, scale);
                        acc_next = db.create<arith::SelectOp>(
                            dl, skip, old, db.create<arith::AddFOp>(dl, old, v));
                      }
                      Value acc_t = db.create<mlir::tensor::InsertOp>(dl, acc_next, dit[0],
                                                                      ValueRange{bag[0], d});
                      db.create<mlir::scf::YieldOp>(dl, ValueRange{acc_t, arg_next});
                    });
                Value size = lb.create<mlir::tensor::ExtractOp>(ll, it[1], bag[0]);
                size = lb.create<arith::AddIOp>(
                    ll, size,
                    lb.create<arith::SelectOp>(ll, skip, i64c(lb, 0), i64c(lb, 1)));
                Value sizes_t = lb.create<mlir::tensor::InsertOp>(ll, size, it[1], bag[0]);
                lb.create<mlir::scf::YieldOp>(
                    ll, ValueRange{inner.getResult(0), sizes_t, inner.getResult(1), owners});
              });
          return {loop.getResult(0), loop.getResult(1), loop.getResult(2), loop.getResult(3)};
        });
  }
  // output: rounded sum (mean: divided by the bag's size), max as is.
  const int64_t rank2 = 2;
  mlir::AffineMap id2 = b.getMultiDimIdentityMap(rank2);
  mlir::AffineMap row_of = mlir::AffineMap::get(
      2, 0, {mlir::getAffineDimExpr(0, im.context())}, im.context());
  im.Define(node.outputs(0), OutputGeneric(
      im, node, ValueRange{state[0], state[1]}, {id2, row_of},
      [&](OpBuilder& ob, Location l, ValueRange e) -> Value {
        Value v = e[0];
        if (mode == kMean) {
          v = im.ToCompute(ob, im.FromCompute(ob, v, t), t);
          Value count = ob.create<arith::MaxSIOp>(l, e[1], i64c(ob, 1));
          v = ob.create<arith::DivFOp>(l, v, ob.create<arith::SIToFPOp>(l, f32, count));
        }
        return im.FromCompute(ob, v, t);
      },
      0));
  auto narrow = [&](OpBuilder& ob, Location l, Value v) -> Value {
    return int_type == ir::INT64 ? v : ob.create<arith::TruncIOp>(l, int_storage, v).getResult();
  };
  mlir::AffineMap id1 = b.getMultiDimIdentityMap(1);
  // offset2bag.
  if (o2b == Shape{0} || N == 0) {
    DefineEmpty(im, node, 1);
  } else {
    im.Define(node.outputs(1), OutputGeneric(
        im, node, ValueRange{state[3]}, {id1},
        [&](OpBuilder& ob, Location l, ValueRange e) { return narrow(ob, l, e[0]); }, 1));
  }
  // bag_size (counted except in the sum mode; entries past the bags are
  // 0) and, outside the max mode, max_indices the same.
  auto sizes_output = [&](int output) {
    const int64_t n = ShapeOf(OutType(node, output))[0];
    if (n == 0) {
      DefineEmpty(im, node, output);
      return;
    }
    im.Define(node.outputs(output), OutputGeneric(
        im, node, {}, {},
        [&](OpBuilder& ob, Location l, ValueRange) {
          if (mode == kSum) return narrow(ob, l, i64c(ob, 0));
          Value k = ob.create<mlir::linalg::IndexOp>(l, 0);
          Value inside = ob.create<arith::CmpIOp>(l, arith::CmpIPredicate::slt, k,
                                                  IndexConst(ob, l, bags));
          Value at = ob.create<arith::MinSIOp>(l, k, IndexConst(ob, l, std::max<int64_t>(bags - 1, 0)));
          Value size = bags > 0 ? ob.create<mlir::tensor::ExtractOp>(l, state[1], at).getResult()
                                : i64c(ob, 0);
          return narrow(ob, l, ob.create<arith::SelectOp>(l, inside, size, i64c(ob, 0)));
        },
        output));
  };
  sizes_output(2);
  if (mode != kMax || NumElements(max_shape) == 0) {
    if (max_shape.size() == 1) {
      sizes_output(3);
    } else {
      DefineEmpty(im, node, 3);
    }
    return absl::OkStatus();
  }
  im.Define(node.outputs(3), OutputGeneric(
      im, node, ValueRange{state[2]}, {id2},
      [&](OpBuilder& ob, Location l, ValueRange e) { return narrow(ob, l, e[0]); }, 3));
  return absl::OkStatus();
}

// The scale of each row of weight: 1 unless indices name it and its norm
// exceeds max_norm. One generic over the rows; its body scans indices and
// the row.
absl::Status ConvertEmbeddingRenorm(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckArity(node, 2, 1); !s.ok()) return s;
  const std::string &weight = node.inputs(0), &indices = node.inputs(1);
  if (absl::Status s = CheckSameDType(im, node, weight); !s.ok()) return s;
  if (absl::Status s = CheckIndexDType(im, node, indices); !s.ok()) return s;
  const ir::DType t = im.TypeOf(weight).dtype();
  const Shape w = ShapeOf(im.TypeOf(weight)), idx = ShapeOf(im.TypeOf(indices));
  if (!IsFloat(t) || w.size() != 2) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op embedding_renorm: weight %%%s must be a 2-D float tensor, got %s",
        weight, ir::TypeToText(im.TypeOf(weight))));
  }
  if (absl::Status s = CheckOutputShape(node, w); !s.ok()) return s;
  if (!HasAttr(node, "max_norm")) {
    return absl::InvalidArgumentError("op embedding_renorm: missing attr max_norm");
  }
  const double max_norm = FloatAttr(node, "max_norm", 0);
  const double p = FloatAttr(node, "norm_type", 2);
  const int64_t V = w[0], D = w[1], N = NumElements(idx);
  if (NumElements(w) == 0 || N == 0) {
    if (NumElements(w) == 0) {
      DefineEmpty(im, node);
    } else {
      im.Define(node.outputs(0), CopyOf(im, im.ValueOf(weight)));
    }
    return absl::OkStatus();
  }
  OpBuilder& b = im.builder();
  Location loc = im.loc();
  Type f32 = b.getF32Type(), f64 = b.getF64Type();
  const Value x_weight = im.ValueOf(weight);
  const Value flat_indices = Reshape(im, im.ValueOf(indices), {N});
  auto f32c = [&](OpBuilder& ob, double v) -> Value {
    return ob.create<arith::ConstantOp>(loc, ob.getF32FloatAttr(static_cast<float>(v)));
  };
  // scale[V]: per row, in float32 (the opmath of the row *= scale).
  Value init = b.create<mlir::tensor::EmptyOp>(loc, Shape{V}, f32);
  Value scales =
      b.create<mlir::linalg::GenericOp>(
           loc, mlir::TypeRange{init.getType()}, ValueRange{}, ValueRange{init},
           llvm::ArrayRef<mlir::AffineMap>{b.getMultiDimIdentityMap(1)},
           std::vector<mlir::utils::IteratorType>{mlir::utils::IteratorType::parallel},
           [&](OpBuilder& ob, Location l, ValueRange) {
             Value r = ob.create<mlir::linalg::IndexOp>(l, 0);
             Value r64 = ob.create<arith::IndexCastOp>(l, ob.getI64Type(), r);
             // Is row r named? (every index is checked, SPEC P8)
             auto scan = ob.create<mlir::scf::ForOp>(
                 l, IndexConst(ob, l, 0), IndexConst(ob, l, N), IndexConst(ob, l, 1),
                 ValueRange{ob.create<arith::ConstantIntOp>(l, 0, 1)},
                 [&](OpBuilder& sb, Location sl, Value i, ValueRange it) {
                   Value raw = sb.create<mlir::tensor::ExtractOp>(sl, flat_indices, i);
                   Value row = sb.create<arith::IndexCastOp>(
                       sl, sb.getI64Type(), im.CheckedIndex(sb, raw, V));
                   Value hit = sb.create<arith::CmpIOp>(sl, arith::CmpIPredicate::eq, row, r64);
                   sb.create<mlir::scf::YieldOp>(
                       sl, ValueRange{sb.create<arith::OrIOp>(sl, it[0], hit).getResult()});
                 });
             // The row's norm: sum |x|^p (or max |x| for p = inf) in float32.
             const bool inf = std::isinf(p);
             auto norm_loop = ob.create<mlir::scf::ForOp>(
                 l, IndexConst(ob, l, 0), IndexConst(ob, l, D), IndexConst(ob, l, 1),
                 ValueRange{f32c(ob, 0)},
                 [&](OpBuilder& nb, Location nl, Value d, ValueRange it) {
                   Value v = im.ToCompute(
                       nb, nb.create<mlir::tensor::ExtractOp>(nl, x_weight, ValueRange{r, d}), t);
                   Value a = nb.create<mlir::math::AbsFOp>(nl, v);
                   Value next;
                   if (inf) {
                     // max |x|, NaN-propagating (no arith max op
                     // spelled the same in MLIR 16 and 19).
                     Value take = nb.create<arith::OrIOp>(
                         nl, nb.create<arith::CmpFOp>(nl, arith::CmpFPredicate::OGT, a, it[0]),
                         nb.create<arith::CmpFOp>(nl, arith::CmpFPredicate::UNO, a, a));
                     next = nb.create<arith::SelectOp>(nl, take, a, it[0]);
                   } else {
                     Value term = p == 1   ? a
                                  : p == 2 ? nb.create<arith::MulFOp>(nl, a, a).getResult()
                                           : nb.create<mlir::math::PowFOp>(nl, a, f32c(nb, p))
                                                 .getResult();
                     next = nb.create<arith::AddFOp>(nl, it[0], term);
                   }
                   nb.create<mlir::scf::YieldOp>(nl, next);
                 });
             Value norm = norm_loop.getResult(0);
             if (!inf && p == 2) {
               norm = ob.create<mlir::math::SqrtOp>(l, norm);
             } else if (!inf && p != 1) {
               norm = ob.create<mlir::math::PowFOp>(l, norm, f32c(ob, 1.0 / p));
             }
             norm = im.ToCompute(ob, im.FromCompute(ob, norm, t), t);  // the norm tensor's dtype
             Value norm64 = ob.create<arith::ExtFOp>(l, f64, norm);
             Value limit = ob.create<arith::ConstantOp>(l, ob.getF64FloatAttr(max_norm));
             Value scale = ob.create<arith::DivFOp>(
                 l, limit,
                 ob.create<arith::AddFOp>(l, norm64,
                                          ob.create<arith::ConstantOp>(l, ob.getF64FloatAttr(1e-7))));
             Value over = ob.create<arith::CmpFOp>(l, arith::CmpFPredicate::OGT, norm64, limit);
             Value apply = ob.create<arith::AndIOp>(l, scan.getResult(0), over);
             Value s32 = ob.create<arith::TruncFOp>(l, f32, scale);
             ob.create<mlir::linalg::YieldOp>(
                 l, ValueRange{ob.create<arith::SelectOp>(l, apply, s32, f32c(ob, 1)).getResult()});
           })
          .getResult(0);
  mlir::AffineMap id2 = b.getMultiDimIdentityMap(2);
  mlir::AffineMap row_of = mlir::AffineMap::get(
      2, 0, {mlir::getAffineDimExpr(0, im.context())}, im.context());
  im.Define(node.outputs(0), OutputGeneric(
      im, node, ValueRange{x_weight, scales}, {id2, row_of},
      [&](OpBuilder& ob, Location l, ValueRange e) -> Value {
        // A row left alone keeps its exact bits (NaN and all).
        Value one = ob.create<arith::CmpFOp>(l, arith::CmpFPredicate::OEQ, e[1], f32c(ob, 1));
        Value scaled = im.FromCompute(
            ob, ob.create<arith::MulFOp>(l, im.ToCompute(ob, e[0], t), e[1]), t);
        return ob.create<arith::SelectOp>(l, one, e[0], scaled);
      }));
  return absl::OkStatus();
}

}  // namespace

void RegisterEmbeddingBagOps(OpConverterTable& table) {
  table["embedding_renorm"] = &ConvertEmbeddingRenorm;
  table["_embedding_bag"] = &ConvertEmbeddingBag;
  table["_embedding_bag_forward_only"] = &ConvertEmbeddingBag;
}

}  // namespace rbln::compiler
