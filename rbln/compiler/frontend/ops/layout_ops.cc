// Ops that rearrange the elements of one tensor by index arithmetic: flip,
// repeat, unfold (Tensor.unfold) and constant_pad_nd.
//
// flip, repeat and unfold are one linalg.generic whose input map is the
// affine source position of each output element ((n-1) - i, i mod n,
// i * step + j), so element-wise fusion can fold them into their
// neighbours. constant_pad_nd is one generic over the output that reads x
// where the position falls inside it and yields the value elsewhere;
// negative pads crop.
//
// IR conventions (attributes named as the ATen schema's arguments):
//   flip(x) "dims" (int list, negative counts from the end)
//   repeat(x) "repeats" (int list, at least x.dim() entries; extra ones add
//     leading dims)
//   unfold(x) "dimension", "size", "step": out has x's shape with
//     `dimension` replaced by (n - size) / step + 1 windows, plus a last dim
//     of `size`
//   constant_pad_nd(x) "pad" (int list: before/after pairs from the last
//     dim backwards, negative crops), "value" = 0
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/AffineExpr.h"
#include "rbln/compiler/frontend/graph_importer.h"
#include "rbln/compiler/frontend/ops/movement_util.h"
#include "rbln/compiler/frontend/ops/op_families.h"
#include "rbln/compiler/ir/graph_util.h"

namespace rbln::compiler {
namespace {

namespace arith = ::mlir::arith;
using ::mlir::AffineExpr;
using ::mlir::Location;
using ::mlir::OpBuilder;
using ::mlir::Value;
using ::mlir::ValueRange;

AffineExpr Dim(GraphImporter& im, int d) { return mlir::getAffineDimExpr(d, im.context()); }
AffineExpr Const(GraphImporter& im, int64_t v) {
  return mlir::getAffineConstantExpr(v, im.context());
}

absl::Status ConvertFlip(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckArity(node, 1, 1); !s.ok()) return s;
  const Shape in = ShapeOf(im.TypeOf(node.inputs(0)));
  if (absl::Status s = CheckOutputShape(node, in); !s.ok()) return s;
  absl::StatusOr<std::vector<int64_t>> dims = IntListAttr(node, "dims");
  if (!dims.ok()) return dims.status();
  std::vector<bool> flipped(in.size(), false);
  for (int64_t d : *dims) {
    absl::StatusOr<int> w = WrapDim(node, d, in.size());
    if (!w.ok()) return w.status();
    if (in.empty()) continue;
    if (flipped[*w]) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "op flip: dim %d appears multiple times in the list of dims", *w));
    }
    flipped[*w] = true;
  }
  std::vector<AffineExpr> exprs;
  for (size_t d = 0; d < in.size(); ++d) {
    if (!flipped[d]) {
      exprs.push_back(Dim(im, d));
    } else {
      exprs.push_back(in[d] == 1 ? Const(im, 0) : Const(im, in[d] - 1) - Dim(im, d));
    }
  }
  return EmitAffineCopy(im, node, exprs);
}

absl::Status ConvertRepeat(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckArity(node, 1, 1); !s.ok()) return s;
  const Shape in = ShapeOf(im.TypeOf(node.inputs(0)));
  absl::StatusOr<std::vector<int64_t>> repeats = IntListAttr(node, "repeats");
  if (!repeats.ok()) return repeats.status();
  if (repeats->size() < in.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op repeat: Number of dimensions of repeat dims (%d) can not be smaller "
        "than number of dimensions of tensor (%d)",
        repeats->size(), in.size()));
  }
  const size_t lead = repeats->size() - in.size();
  Shape expected;
  for (size_t j = 0; j < repeats->size(); ++j) {
    if ((*repeats)[j] < 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "op repeat: repeats=[%s] must be non-negative", absl::StrJoin(*repeats, ",")));
    }
    expected.push_back((*repeats)[j] * (j < lead ? 1 : in[j - lead]));
  }
  if (absl::Status s = CheckOutputShape(node, expected); !s.ok()) return s;
  // Output dim lead + i reads x dim i at (index mod n).
  std::vector<AffineExpr> exprs;
  for (size_t i = 0; i < in.size(); ++i) {
    const int od = lead + i;
    if (in[i] == 1) {
      exprs.push_back(Const(im, 0));
    } else if ((*repeats)[od] == 1) {
      exprs.push_back(Dim(im, od));
    } else {
      exprs.push_back(Dim(im, od) % in[i]);
    }
  }
  return EmitAffineCopy(im, node, exprs);
}

absl::Status ConvertUnfold(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckArity(node, 1, 1); !s.ok()) return s;
  const Shape in = ShapeOf(im.TypeOf(node.inputs(0)));
  absl::StatusOr<int> dim = WrapDim(node, IntAttr(node, "dimension", 0), in.size());
  if (!dim.ok()) return dim.status();
  const int64_t size = IntAttr(node, "size", -1), step = IntAttr(node, "step", 1);
  const int64_t n = in.empty() ? 1 : in[*dim];
  if (size < 0 || size > n) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op unfold: maximum size for tensor at dimension %d is %d but size is %d",
        *dim, n, size));
  }
  if (step <= 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op unfold: step is %d but must be > 0", step));
  }
  Shape expected = in;
  if (!in.empty()) expected[*dim] = (n - size) / step + 1;
  expected.push_back(size);
  if (absl::Status s = CheckOutputShape(node, expected); !s.ok()) return s;
  const int last = expected.size() - 1;
  std::vector<AffineExpr> exprs;
  for (size_t d = 0; d < in.size(); ++d) {
    exprs.push_back(static_cast<int>(d) == *dim ? Dim(im, d) * step + Dim(im, last)
                                                : Dim(im, d));
  }
  return EmitAffineCopy(im, node, exprs);
}

absl::Status ConvertConstantPadNd(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckArity(node, 1, 1); !s.ok()) return s;
  const std::string& x = node.inputs(0);
  if (absl::Status s = CheckSameDType(im, node, x); !s.ok()) return s;
  const Shape in = ShapeOf(im.TypeOf(x));
  absl::StatusOr<std::vector<int64_t>> pad = IntListAttr(node, "pad");
  if (!pad.ok()) return pad.status();
  if (pad->size() % 2 != 0 || pad->size() > 2 * in.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op constant_pad_nd: Length of pad must be even but instead it equals "
        "%d, and at most twice the input's %d dims",
        pad->size(), in.size()));
  }
  const int rank = in.size();
  std::vector<int64_t> before(rank, 0);
  Shape expected = in;
  for (size_t p = 0; p < pad->size() / 2; ++p) {
    const int d = rank - 1 - p;
    before[d] = (*pad)[2 * p];
    expected[d] = in[d] + (*pad)[2 * p] + (*pad)[2 * p + 1];
    if (expected[d] < 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "op constant_pad_nd: The input size %d, plus negative padding %d and "
          "%d resulted in a negative output size, which is invalid. Check "
          "dimension %d of your input.",
          in[d], (*pad)[2 * p], (*pad)[2 * p + 1], d));
    }
  }
  if (absl::Status s = CheckOutputShape(node, expected); !s.ok()) return s;
  if (NumElements(expected) == 0) {
    DefineEmpty(im, node);
    return absl::OkStatus();
  }
  const ir::DType t = OutType(node).dtype();
  ir::Attribute value;
  value.set_i(0);
  if (HasAttr(node, "value")) value = node.attrs().at("value");
  const bool x_empty = NumElements(in) == 0;
  im.Define(node.outputs(0), OutputGeneric(
      im, node, {}, {}, [&](OpBuilder& b, Location l, ValueRange) -> Value {
        Value fill = im.FromCompute(b, ScalarInDType(im, b, l, value, t), t);
        if (x_empty) return fill;
        std::vector<Value> out = LoopIndices(b, l, rank);
        Value inside = b.create<arith::ConstantIntOp>(l, 1, 1);
        std::vector<Value> at;
        for (int d = 0; d < rank; ++d) {
          if (before[d] == 0 && expected[d] <= in[d]) {
            at.push_back(out[d]);  // Cropped at most after: always inside.
            continue;
          }
          // The position in x; outside reads clamp to stay in bounds.
          Value p = b.create<arith::SubIOp>(l, out[d], IndexConst(b, l, before[d]));
          Value ge = b.create<arith::CmpIOp>(l, arith::CmpIPredicate::sge, p,
                                             IndexConst(b, l, 0));
          Value lt = b.create<arith::CmpIOp>(l, arith::CmpIPredicate::slt, p,
                                             IndexConst(b, l, in[d]));
          inside = b.create<arith::AndIOp>(l, inside,
                                           b.create<arith::AndIOp>(l, ge, lt));
          p = b.create<arith::MaxSIOp>(l, p, IndexConst(b, l, 0));
          at.push_back(b.create<arith::MinSIOp>(l, p, IndexConst(b, l, in[d] - 1)));
        }
        Value v = b.create<mlir::tensor::ExtractOp>(l, im.ValueOf(x), at);
        return b.create<arith::SelectOp>(l, inside, v, fill);
      }));
  return absl::OkStatus();
}

}  // namespace

void RegisterLayoutOps(OpConverterTable& table) {
  table["flip"] = &ConvertFlip;
  table["repeat"] = &ConvertRepeat;
  table["unfold"] = &ConvertUnfold;
  table["constant_pad_nd"] = &ConvertConstantPadNd;
}

}  // namespace rbln::compiler
