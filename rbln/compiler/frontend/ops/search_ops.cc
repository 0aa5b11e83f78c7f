// Sorted searches: bucketize and searchsorted.
//
// A parallel linalg.generic over the values whose body runs ATen's binary
// search (cus_lower_bound / cus_upper_bound) as an scf.while over the
// boundaries: left finds the first boundary b with b >= v, right the first
// with b > v, so a NaN value lands past the end, as in PyTorch. Values and
// boundaries compare in their promoted dtype. With a sorter, boundary i of a
// row is sequence[sorter[i]]; sorter entries are range-checked (SPEC P8).
//
// IR conventions (output int64, or int32 with "out_int32"):
//   bucketize(x, boundaries[n])           "right"; x may instead be the
//                                         scalar attr "self" (0-d output)
//   searchsorted(sequence, x[, sorter])   "right" or "side" ("left",
//     "right"), "out_int32"; sequence is 1-D or has x's leading dims and
//     searches its last dim per row; x may be the scalar attr "self".
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/AffineMap.h"
#include "rbln/compiler/frontend/graph_importer.h"
#include "rbln/compiler/frontend/ops/op_families.h"
#include "rbln/compiler/frontend/ops/reduction_util.h"
#include "rbln/compiler/ir/graph_util.h"

namespace rbln::compiler {
namespace {

using ::mlir::AffineMap;
using ::mlir::Location;
using ::mlir::OpBuilder;
using ::mlir::Value;
using ::mlir::ValueRange;
using ::mlir::arith::CmpFPredicate;
using ::mlir::arith::CmpIPredicate;
using ::mlir::utils::IteratorType;

// PyTorch's promotion of two of the IR dtypes.
ir::DType Promote(ir::DType a, ir::DType b) {
  if (a == b) return a;
  const bool af = IsFloat(a), bf = IsFloat(b);
  if (af && bf) return ir::FLOAT32;  // f16 + bf16, or either + f32
  if (af) return a;
  if (bf) return b;
  if (a == ir::BOOL) return b;
  if (b == ir::BOOL) return a;
  return ir::INT64;  // int32 + int64
}

// `v` (compute value of `from`) as a compute value of `to`, rounded to `to`
// as a tensor conversion would.
Value Convert(GraphImporter& im, OpBuilder& b, Value v, ir::DType from,
              ir::DType to) {
  Value c = im.CastCompute(b, v, from, to);
  if (from != to && (to == ir::FLOAT16 || to == ir::BFLOAT16)) {
    c = im.ToCompute(b, im.FromCompute(b, c, to), to);
  }
  return c;
}

struct Search {
  std::string sequence;  // IR value of the sorted sequence
  std::string values;    // IR value of x, or "" for a scalar
  std::string sorter;    // IR value of the sorter, or ""
  double scalar = 0;     // x when `values` is ""
};

absl::Status EmitSearch(GraphImporter& im, const ir::Node& node,
                        const Search& search, bool right) {
  const ir::TensorType& seq = im.TypeOf(search.sequence);
  const Shape seq_shape = ShapeOf(seq);
  const Shape x_shape =
      search.values.empty() ? Shape{} : ShapeOf(im.TypeOf(search.values));
  const ir::DType out_dtype = node.outputs(0).type().dtype();
  if (out_dtype != ir::INT64 && out_dtype != ir::INT32) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: the output must be int64 (or int32 with out_int32)",
        node.op()));
  }
  if (absl::Status s = CheckOutputShape(node, 0, x_shape); !s.ok()) return s;
  if (seq_shape.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: boundaries tensor must have at least one dimension, got 0-d "
        "%%%s",
        node.op(), search.sequence));
  }
  const int seq_rank = seq_shape.size();
  const bool per_row = seq_rank > 1;
  if (per_row &&
      (x_shape.size() != seq_shape.size() ||
       !std::equal(seq_shape.begin(), seq_shape.end() - 1, x_shape.begin()))) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: boundaries tensor should be 1 dimension or the first N-1 "
        "dimensions of boundaries tensor and input value tensor must match, "
        "but we got boundaries tensor %s and input value tensor %s",
        node.op(), ir::TypeToText(seq),
        search.values.empty() ? "(a scalar)"
                              : ir::TypeToText(im.TypeOf(search.values))));
  }
  if (!search.sorter.empty()) {
    const ir::TensorType& sorter = im.TypeOf(search.sorter);
    if (ShapeOf(sorter) != seq_shape || sorter.dtype() != ir::INT64) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "op %s: sorter %%%s must be an int64 tensor of the boundaries' "
          "shape %s, got %s",
          node.op(), search.sorter, ir::TypeToText(seq),
          ir::TypeToText(sorter)));
    }
  }
  const int64_t n = seq_shape.back();
  const ir::DType seq_dtype = seq.dtype();
  // A scalar x is a double or long tensor in ATen: compare as f32 (int64
  // for an integral scalar and integer boundaries).
  const ir::DType x_dtype =
      !search.values.empty() ? im.TypeOf(search.values).dtype()
      : IsFloat(seq_dtype) || search.scalar != std::floor(search.scalar)
          ? ir::FLOAT32
          : ir::INT64;
  const ir::DType common = Promote(seq_dtype, x_dtype);
  const int rank = x_shape.size();
  std::vector<Value> inputs;
  std::vector<AffineMap> maps;
  if (!search.values.empty()) {
    inputs.push_back(im.ValueOf(search.values));
    maps.push_back(Identity(im, rank));
  }
  maps.push_back(Identity(im, rank));
  Value sequence = im.ValueOf(search.sequence);
  Value sorter = search.sorter.empty() ? Value() : im.ValueOf(search.sorter);
  Value result = Generic(
      im, inputs, Empty(im, x_shape, im.StorageType(out_dtype)), maps,
      std::vector<IteratorType>(rank, IteratorType::parallel),
      [&](OpBuilder& b, Location l, ValueRange args) {
        Value v;
        if (search.values.empty()) {
          v = Convert(im, b, im.ComputeConstant(b, search.scalar, x_dtype),
                      x_dtype, common);
        } else {
          v = Convert(im, b, im.ToCompute(b, args[0], x_dtype), x_dtype,
                      common);
        }
        std::vector<Value> row;
        if (per_row) {
          for (int d = 0; d < rank - 1; ++d) {
            row.push_back(b.create<mlir::linalg::IndexOp>(l, d));
          }
        }
        auto boundary = [&](OpBuilder& rb, Location rl, Value i) {
          std::vector<Value> coords = row;
          if (sorter) {
            coords.push_back(i);
            i = im.CheckedIndex(
                rb, rb.create<mlir::tensor::ExtractOp>(rl, sorter, coords), n);
            coords.pop_back();
          }
          coords.push_back(i);
          Value e = rb.create<mlir::tensor::ExtractOp>(rl, sequence, coords);
          return Convert(im, rb, im.ToCompute(rb, e, seq_dtype), seq_dtype,
                         common);
        };
        auto loop = b.create<mlir::scf::WhileOp>(
            l, mlir::TypeRange{b.getIndexType(), b.getIndexType()},
            ValueRange{IndexConst(b, l, 0), IndexConst(b, l, n)},
            [&](OpBuilder& wb, Location wl, ValueRange it) {
              wb.create<mlir::scf::ConditionOp>(
                  wl,
                  wb.create<mlir::arith::CmpIOp>(wl, CmpIPredicate::slt, it[0],
                                                 it[1]),
                  it);
            },
            [&](OpBuilder& wb, Location wl, ValueRange it) {
              Value mid = wb.create<mlir::arith::AddIOp>(
                  wl, it[0],
                  wb.create<mlir::arith::ShRUIOp>(
                      wl, wb.create<mlir::arith::SubIOp>(wl, it[1], it[0]),
                      IndexConst(wb, wl, 1)));
              Value m = boundary(wb, wl, mid);
              // ATen: if (!(mid_val >= val)) (left) / !(mid_val > val)
              // (right): start = mid + 1, else end = mid.
              Value stop;
              if (m.getType().isa<mlir::FloatType>()) {
                stop = wb.create<mlir::arith::CmpFOp>(
                    wl, right ? CmpFPredicate::OGT : CmpFPredicate::OGE, m, v);
              } else {
                stop = wb.create<mlir::arith::CmpIOp>(
                    wl, right ? CmpIPredicate::sgt : CmpIPredicate::sge, m, v);
              }
              Value next = wb.create<mlir::arith::AddIOp>(
                  wl, mid, IndexConst(wb, wl, 1));
              wb.create<mlir::scf::YieldOp>(
                  wl,
                  ValueRange{
                      wb.create<mlir::arith::SelectOp>(wl, stop, it[0], next),
                      wb.create<mlir::arith::SelectOp>(wl, stop, mid, it[1])});
            });
        Value pos = b.create<mlir::arith::IndexCastOp>(
            l, im.StorageType(out_dtype), loop.getResult(0));
        return llvm::SmallVector<Value>{pos};
      })[0];
  im.Define(node.outputs(0), result);
  return absl::OkStatus();
}

absl::StatusOr<bool> RightSide(const ir::Node& node) {
  const bool right = BoolAttr(node, "right", false);
  auto it = node.attrs().find("side");
  if (it == node.attrs().end()) return right;
  const std::string& side = it->second.s();
  if (side != "left" && side != "right") {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: side can only be 'left' or 'right' but got '%s'", node.op(),
        side));
  }
  if (right && side == "left") {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: side and right can't be set to opposites, got side of left "
        "while right was True",
        node.op()));
  }
  return side == "right";
}

absl::Status ConvertBucketize(GraphImporter& im, const ir::Node& node) {
  Search search;
  if (HasAttr(node, "self")) {
    if (absl::Status s = CheckArity(node, 1, 1); !s.ok()) return s;
    search.sequence = node.inputs(0);
    search.scalar = FloatAttr(node, "self", 0);
  } else {
    if (absl::Status s = CheckArity(node, 2, 1); !s.ok()) return s;
    search.values = node.inputs(0);
    search.sequence = node.inputs(1);
  }
  if (im.TypeOf(search.sequence).shape_size() != 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op bucketize: boundaries tensor must be 1 dimension, but got dim(%d)",
        im.TypeOf(search.sequence).shape_size()));
  }
  return EmitSearch(im, node, search, BoolAttr(node, "right", false));
}

absl::Status ConvertSearchsorted(GraphImporter& im, const ir::Node& node) {
  Search search;
  const bool scalar = HasAttr(node, "self");
  const int tensors = scalar ? 1 : 2;
  if (node.outputs_size() != 1 || node.inputs_size() < tensors ||
      node.inputs_size() > tensors + 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op searchsorted takes (sorted_sequence, x[, sorter]) or, with attr "
        "self, (sorted_sequence[, sorter]) and 1 output; got %d inputs",
        node.inputs_size()));
  }
  search.sequence = node.inputs(0);
  if (scalar) {
    search.scalar = FloatAttr(node, "self", 0);
  } else {
    search.values = node.inputs(1);
  }
  if (node.inputs_size() == tensors + 1) search.sorter = node.inputs(tensors);
  absl::StatusOr<bool> right = RightSide(node);
  if (!right.ok()) return right.status();
  return EmitSearch(im, node, search, *right);
}

}  // namespace

void RegisterSearchOps(OpConverterTable& table) {
  table["bucketize"] = &ConvertBucketize;
  table["searchsorted"] = &ConvertSearchsorted;
}

}  // namespace rbln::compiler
