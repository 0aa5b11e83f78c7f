// Pooling geometry and builders shared by the pooling families; see
// pooling_util.h.
#include "rbln/compiler/frontend/ops/pooling_util.h"

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
#include "rbln/compiler/frontend/ops/nn_builders.h"
#include "rbln/compiler/frontend/ops/op_families.h"
#include "rbln/compiler/ir/graph_util.h"


namespace rbln::compiler::pooling {

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


// "max_pool3d_with_indices" -> 3.
int SpatialOf(const ir::Node& node) {
  return absl::StrContains(node.op(), "3d") ? 3 : 2;
}

absl::Status SplitInput(const ir::Node& node, const Shape& x, Pool& p) {
  const int rank = x.size();
  if (rank != p.spatial + 1 && rank != p.spatial + 2) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: Expected %dD or %dD input tensor, but got [%s]", node.op(),
        p.spatial + 1, p.spatial + 2, absl::StrJoin(x, ", ")));
  }
  p.lead.assign(x.begin(), x.end() - p.spatial);
  p.in.assign(x.end() - p.spatial, x.end());
  for (int64_t d : p.in) {
    if (d == 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "op %s: Expected input's non-batch dimensions to have positive "
          "length, but input has a shape of [%s]",
          node.op(), absl::StrJoin(x, ", ")));
    }
  }
  return absl::OkStatus();
}

namespace {

// ATen's pooling_output_shape.
int64_t PooledSize(int64_t in, int64_t kernel, int64_t pad, int64_t stride,
                   int64_t dilation, bool ceil_mode) {
  const int64_t num = in + 2 * pad - dilation * (kernel - 1) - 1 +
                      (ceil_mode ? stride - 1 : 0);
  // Division rounding toward negative infinity.
  int64_t out = (num >= 0 ? num / stride : -((-num + stride - 1) / stride)) + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

}  // namespace

// Reads the window attributes of a max (`max`) or average pool.
absl::StatusOr<Pool> ReadWindow(const ir::Node& node, const Shape& x,
                                bool max) {
  Pool p;
  p.spatial = SpatialOf(node);
  if (absl::Status s = SplitInput(node, x, p); !s.ok()) return s;
  const int n = p.spatial;
  absl::StatusOr<std::vector<int64_t>> v =
      SpatialList(node, "kernel_size", n, {});
  if (!v.ok()) return v.status();
  p.kernel = *v;
  if (v = SpatialList(node, "stride", n, p.kernel); !v.ok()) return v.status();
  p.stride = *v;
  if (v = SpatialList(node, "padding", n, {0}); !v.ok()) return v.status();
  p.padding = *v;
  if (max) {
    if (v = SpatialList(node, "dilation", n, {1}); !v.ok()) return v.status();
    p.dilation = *v;
  } else {
    p.dilation.assign(n, 1);
  }
  p.ceil_mode = BoolAttr(node, "ceil_mode", false);
  for (int i = 0; i < n; ++i) {
    if (p.kernel[i] <= 0 || p.stride[i] <= 0 || p.dilation[i] <= 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "op %s: kernel_size, stride and dilation must be greater than "
          "zero, got kernel_size [%s], stride [%s], dilation [%s]",
          node.op(), absl::StrJoin(p.kernel, ", "),
          absl::StrJoin(p.stride, ", "), absl::StrJoin(p.dilation, ", ")));
    }
    const int64_t effective = max ? (p.kernel[i] - 1) * p.dilation[i] + 1
                                  : p.kernel[i];
    if (p.padding[i] < 0 || p.padding[i] > effective / 2) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "op %s: pad should be at most half of %skernel size, but got "
          "pad=%d and kernel_size=%d",
          node.op(), max ? "effective " : "", p.padding[i], p.kernel[i]));
    }
    const int64_t o = PooledSize(p.in[i], p.kernel[i], p.padding[i],
                                 p.stride[i], p.dilation[i], p.ceil_mode);
    if (o < 1) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "op %s: Given input size [%s], calculated output size is too small "
          "(kernel [%s], stride [%s], padding [%s])",
          node.op(), absl::StrJoin(x, ", "), absl::StrJoin(p.kernel, ", "),
          absl::StrJoin(p.stride, ", "), absl::StrJoin(p.padding, ", ")));
    }
    p.out.push_back(o);
  }
  return p;
}

// The input padded so that every window (o * stride + k * dilation, before
// removing the padding) is in range; `value` fills the padding.
Value PadForWindows(GraphImporter& im, Value x, const Pool& p, double value) {
  Shape low(p.lead_rank(), 0), high(p.lead_rank(), 0);
  for (int i = 0; i < p.spatial; ++i) {
    const int64_t needed = (p.out[i] - 1) * p.stride[i] +
                           (p.kernel[i] - 1) * p.dilation[i] + 1;
    low.push_back(p.padding[i]);
    high.push_back(std::max<int64_t>(needed - p.in[i] - p.padding[i], 0));
  }
  return Pad(im, x, low, high, value);
}

// An operand that gives the window loops of a generic their extents (like
// the kernel operand of linalg.pooling_*): an uninitialized tensor of the
// window's shape read by the map (d_first .. d_{first+count-1}), never
// read in the body.
Value WindowShape(GraphImporter& im, const Shape& window) {
  return Empty(im, window, im.builder().getI8Type());
}
AffineMap WindowMap(GraphImporter& im, int loops, int first, int count) {
  std::vector<AffineExpr> e;
  for (int i = 0; i < count; ++i) {
    e.push_back(mlir::getAffineDimExpr(first + i, im.context()));
  }
  return AffineMap::get(loops, 0, e, im.context());
}

Value Cmp(OpBuilder& b, Location l, arith::CmpIPredicate pred, Value x,
          Value y) {
  return b.create<arith::CmpIOp>(l, pred, x, y);
}

// Row-major flat index of `pos` in a plane of `sizes` (index values).
Value FlatIndex(OpBuilder& b, Location l, const std::vector<Value>& pos,
                const Shape& sizes) {
  Value flat = IndexConst(b, l, 0);
  for (size_t i = 0; i < pos.size(); ++i) {
    flat = b.create<arith::AddIOp>(
        l, b.create<arith::MulIOp>(l, flat, IndexConst(b, l, sizes[i])),
        pos[i]);
  }
  return flat;
}

Value ToI64(OpBuilder& b, Location l, Value index) {
  return b.create<arith::IndexCastOp>(l, b.getI64Type(), index);
}

Value Greater(OpBuilder& b, Location l, Value x, Value y) {
  if (x.getType().isa<mlir::FloatType>()) {
    return b.create<arith::CmpFOp>(l, arith::CmpFPredicate::OGT, x, y);
  }
  return b.create<arith::CmpIOp>(l, arith::CmpIPredicate::sgt, x, y);
}

Value IsNan(OpBuilder& b, Location l, Value x) {
  if (!x.getType().isa<mlir::FloatType>()) {
    return b.create<arith::ConstantIntOp>(l, 0, 1);
  }
  return b.create<arith::CmpFOp>(l, arith::CmpFPredicate::UNO, x, x);
}

Value SmallestConst(OpBuilder& b, Location l, Type type) {
  if (type.isa<mlir::FloatType>()) return F32Const(b, l, -INFINITY);
  const unsigned w = type.getIntOrFloatBitWidth();
  return b.create<arith::ConstantOp>(
      l, b.getIntegerAttr(type, llvm::APInt::getSignedMinValue(w)));
}

// A filled tensor of the compute type holding its smallest value.
Value SmallestFilled(GraphImporter& im, const Shape& shape, ir::DType t) {
  const Type type = im.ComputeType(t);
  if (IsFloat(t)) return Filled(im, shape, type, -INFINITY);
  OpBuilder& b = im.builder();
  Value init = SmallestConst(b, im.loc(), type);
  return b
      .create<mlir::linalg::FillOp>(im.loc(), ValueRange{init},
                                    ValueRange{Empty(im, shape, type)})
      .getResult(0);
}

absl::Status CheckPoolDType(GraphImporter& im, const ir::Node& node,
                            bool ints) {
  const ir::DType t = im.TypeOf(node.inputs(0)).dtype();
  const bool ok = IsFloat(t) || (ints && t != ir::BOOL);
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: input %%%s is %s; PyTorch's CPU kernel takes %s", node.op(),
        node.inputs(0), ir::TypeToText(im.TypeOf(node.inputs(0))),
        ints ? "floating point and integer (not bool) inputs"
             : "floating point inputs"));
  }
  return absl::OkStatus();
}

}  // namespace rbln::compiler::pooling
