// Adaptive pools: _adaptive_avg_pool2d/3d, adaptive_max_pool2d/3d and
// _adaptive_avg_pool*_backward (adaptive_max_pool*_backward is the max pools'
// index scatter, pooling_ops.cc). Semantics and IR conventions are those in
// pooling_ops.cc's header; each output o reads the input window
// [floor(o*I/O), ceil((o+1)*I/O)) as ATen's start_index/end_index do.
//
// Lowering:
//   _adaptive_avg_pool*, adaptive_max_pool*
//                              reduction generics over the largest window,
//                              reading with tensor.extract inside each
//                              output's window
//   _adaptive_avg_pool*_backward
//                              a gather: each input position sums the
//                              gradients of the windows that contain it
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
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

// --- Adaptive pools. ----------------------------------------------------------

// ATen's start_index/end_index: [floor(o * I / O), ceil((o + 1) * I / O)).
int64_t StartIndex(int64_t o, int64_t out, int64_t in) {
  return (o * in) / out;
}
int64_t EndIndex(int64_t o, int64_t out, int64_t in) {
  return ((o + 1) * in + out - 1) / out;
}

Value StartIndexValue(OpBuilder& b, Location l, Value o, int64_t out,
                      int64_t in) {
  return b.create<arith::DivUIOp>(
      l, b.create<arith::MulIOp>(l, o, IndexConst(b, l, in)),
      IndexConst(b, l, out));
}
Value EndIndexValue(OpBuilder& b, Location l, Value o, int64_t out,
                    int64_t in) {
  Value next = b.create<arith::AddIOp>(l, o, IndexConst(b, l, 1));
  return b.create<arith::DivUIOp>(
      l,
      b.create<arith::AddIOp>(
          l, b.create<arith::MulIOp>(l, next, IndexConst(b, l, in)),
          IndexConst(b, l, out - 1)),
      IndexConst(b, l, out));
}

absl::StatusOr<Pool> ReadAdaptive(const ir::Node& node, const Shape& x) {
  Pool p;
  p.spatial = SpatialOf(node);
  if (absl::Status s = SplitInput(node, x, p); !s.ok()) return s;
  absl::StatusOr<std::vector<int64_t>> size =
      SpatialList(node, "output_size", p.spatial, {});
  if (!size.ok()) return size.status();
  p.out = *size;
  for (int i = 0; i < p.spatial; ++i) {
    if (p.out[i] < 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "op %s: output_size must be non-negative, got [%s]", node.op(),
          absl::StrJoin(p.out, ", ")));
    }
    // The largest window, for the reduction loops.
    int64_t widest = 0;
    for (int64_t o = 0; o < p.out[i]; ++o) {
      widest = std::max(widest, EndIndex(o, p.out[i], p.in[i]) -
                                    StartIndex(o, p.out[i], p.in[i]));
    }
    p.kernel.push_back(widest);
  }
  return p;
}

// Loops (lead..., o..., k...) over the largest windows; the body gets the
// input element at start(o) + k (clamped), whether it is inside o's window,
// and its flat index in the plane.
struct WindowElement {
  Value value, inside, flat;
};

using WindowBody = std::function<llvm::SmallVector<Value>(
    OpBuilder&, Location, const WindowElement&, ValueRange)>;

mlir::ResultRange AdaptiveWindows(GraphImporter& im, const Pool& p, Value x,
                                  ValueRange inits, const WindowBody& body) {
  const int lead = p.lead_rank(), out_rank = p.rank();
  const int loops = out_rank + p.spatial;
  std::vector<AffineExpr> o_exprs;
  for (int i = 0; i < out_rank; ++i) {
    o_exprs.push_back(mlir::getAffineDimExpr(i, im.context()));
  }
  std::vector<IteratorType> iterators(loops, IteratorType::parallel);
  for (int i = out_rank; i < loops; ++i) iterators[i] = IteratorType::reduction;
  std::vector<AffineMap> maps = {WindowMap(im, loops, out_rank, p.spatial)};
  maps.insert(maps.end(), inits.size(),
              AffineMap::get(loops, 0, o_exprs, im.context()));
  return Generic(
      im, WindowShape(im, p.kernel), inits, maps, iterators,
      [&](OpBuilder& b, Location l, ValueRange args) {
        WindowElement e;
        e.inside = b.create<arith::ConstantIntOp>(l, 1, 1);
        std::vector<Value> coords, pos;
        for (int d = 0; d < lead; ++d) coords.push_back(LoopIndex(b, l, d));
        for (int i = 0; i < p.spatial; ++i) {
          Value o = LoopIndex(b, l, lead + i);
          Value start = StartIndexValue(b, l, o, p.out[i], p.in[i]);
          Value end = EndIndexValue(b, l, o, p.out[i], p.in[i]);
          Value at = b.create<arith::AddIOp>(l, start,
                                             LoopIndex(b, l, out_rank + i));
          e.inside = b.create<arith::AndIOp>(
              l, e.inside, Cmp(b, l, arith::CmpIPredicate::slt, at, end));
          Value clamped =
              b.create<arith::MinSIOp>(l, at, IndexConst(b, l, p.in[i] - 1));
          coords.push_back(clamped);
          pos.push_back(clamped);
        }
        e.value = b.create<mlir::tensor::ExtractOp>(l, x, coords);
        e.flat = ToI64(b, l, FlatIndex(b, l, pos, p.in));
        return body(b, l, e, args.drop_front(1));
      });
}

absl::Status ConvertAdaptiveAvgPool(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckArity(node, 1, 1); !s.ok()) return s;
  if (absl::Status s = CheckPoolDType(im, node, false); !s.ok()) return s;
  const std::string& x = node.inputs(0);
  const ir::DType t = im.TypeOf(x).dtype();
  absl::StatusOr<Pool> pool = ReadAdaptive(node, ShapeOf(im.TypeOf(x)));
  if (!pool.ok()) return pool.status();
  const Pool& p = *pool;
  if (absl::Status s = CheckOutput(node, 0, p.OutShape(), t); !s.ok()) return s;
  if (NumElements(p.OutShape()) == 0) {
    im.Define(node.outputs(0), Empty(im, p.OutShape(), im.StorageType(t)));
    return absl::OkStatus();
  }
  Value xc = ToComputeTensor(im, im.ValueOf(x), t);
  Value sum = AdaptiveWindows(
      im, p, xc, ValueRange{Filled(im, p.OutShape(), im.ComputeType(t), 0.0)},
      [&](OpBuilder& b, Location l, const WindowElement& e, ValueRange args) {
        Value term =
            b.create<arith::SelectOp>(l, e.inside, e.value, F32Const(b, l, 0));
        return llvm::SmallVector<Value>{
            b.create<arith::AddFOp>(l, args[0], term)};
      })[0];
  const int lead = p.lead_rank();
  im.Define(
      node.outputs(0),
      Parallel(im, sum, {IdentityMap(im, p.rank())}, p.OutShape(),
               im.StorageType(t),
               [&](OpBuilder& b, Location l, ValueRange args) {
                 // sum / kh / kw, dividing one dim at a time as ATen does.
                 Value v = args[0];
                 for (int i = 0; i < p.spatial; ++i) {
                   Value o = LoopIndex(b, l, lead + i);
                   Value size = b.create<arith::SubIOp>(
                       l, EndIndexValue(b, l, o, p.out[i], p.in[i]),
                       StartIndexValue(b, l, o, p.out[i], p.in[i]));
                   v = b.create<arith::DivFOp>(
                       l, v,
                       b.create<arith::SIToFPOp>(l, b.getF32Type(),
                                                 ToI64(b, l, size)));
                 }
                 return im.FromCompute(b, v, t);
               }));
  return absl::OkStatus();
}

// grad_input[b, i] = sum over the windows o containing i of
// grad_output[b, o] / |window(o)|; the windows containing i start at
// o = floor(i * O / I).
absl::Status ConvertAdaptiveAvgPoolBackward(GraphImporter& im,
                                            const ir::Node& node) {
  if (absl::Status s = CheckArity(node, 2, 1); !s.ok()) return s;
  if (absl::Status s = CheckPoolDType(im, node, false); !s.ok()) return s;
  const std::string &go = node.inputs(0), &x = node.inputs(1);
  const ir::DType t = im.TypeOf(go).dtype();
  const Shape xs = ShapeOf(im.TypeOf(x)), gos = ShapeOf(im.TypeOf(go));
  Pool p;
  p.spatial = SpatialOf(node);
  if (absl::Status s = SplitInput(node, xs, p); !s.ok()) return s;
  if (gos.size() != xs.size() ||
      !std::equal(gos.begin(), gos.end() - p.spatial, xs.begin())) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: grad_output %%%s is [%s], which does not match the input "
        "[%s]",
        node.op(), go, absl::StrJoin(gos, ", "), absl::StrJoin(xs, ", ")));
  }
  p.out.assign(gos.end() - p.spatial, gos.end());
  if (absl::Status s = CheckOutput(node, 0, xs, t); !s.ok()) return s;
  if (NumElements(gos) == 0) {
    im.Define(node.outputs(0), Filled(im, xs, im.StorageType(t), 0.0));
    return absl::OkStatus();
  }
  // The most windows any input position is in, per dim.
  std::vector<int64_t> most;
  for (int i = 0; i < p.spatial; ++i) {
    std::vector<int64_t> count(p.in[i], 0);
    for (int64_t o = 0; o < p.out[i]; ++o) {
      for (int64_t j = StartIndex(o, p.out[i], p.in[i]);
           j < EndIndex(o, p.out[i], p.in[i]); ++j) {
        ++count[j];
      }
    }
    most.push_back(*std::max_element(count.begin(), count.end()));
  }
  Value grad = ToComputeTensor(im, im.ValueOf(go), t);
  const int lead = p.lead_rank(), in_rank = p.rank();
  const int loops = in_rank + p.spatial;
  std::vector<AffineExpr> id;
  for (int i = 0; i < in_rank; ++i) {
    id.push_back(mlir::getAffineDimExpr(i, im.context()));
  }
  std::vector<IteratorType> iterators(loops, IteratorType::parallel);
  for (int i = in_rank; i < loops; ++i) iterators[i] = IteratorType::reduction;
  // The reduction loops run over `most` windows per dim.
  Value acc = Generic(
      im, WindowShape(im, most), Filled(im, xs, im.builder().getF32Type(), 0.0),
      {WindowMap(im, loops, in_rank, p.spatial),
       AffineMap::get(loops, 0, id, im.context())},
      iterators, [&](OpBuilder& b, Location l, ValueRange args) {
        Value inside = b.create<arith::ConstantIntOp>(l, 1, 1);
        std::vector<Value> coords, sizes;
        for (int d = 0; d < lead; ++d) coords.push_back(LoopIndex(b, l, d));
        for (int i = 0; i < p.spatial; ++i) {
          Value pos = LoopIndex(b, l, lead + i);
          Value first = b.create<arith::DivUIOp>(
              l, b.create<arith::MulIOp>(l, pos, IndexConst(b, l, p.out[i])),
              IndexConst(b, l, p.in[i]));
          Value o = b.create<arith::AddIOp>(l, first,
                                            LoopIndex(b, l, in_rank + i));
          Value clamped =
              b.create<arith::MinSIOp>(l, o, IndexConst(b, l, p.out[i] - 1));
          Value start = StartIndexValue(b, l, clamped, p.out[i], p.in[i]);
          Value end = EndIndexValue(b, l, clamped, p.out[i], p.in[i]);
          inside = b.create<arith::AndIOp>(
              l, inside,
              b.create<arith::AndIOp>(
                  l,
                  Cmp(b, l, arith::CmpIPredicate::slt, o,
                      IndexConst(b, l, p.out[i])),
                  b.create<arith::AndIOp>(
                      l, Cmp(b, l, arith::CmpIPredicate::sle, start, pos),
                      Cmp(b, l, arith::CmpIPredicate::slt, pos, end))));
          coords.push_back(clamped);
          sizes.push_back(b.create<arith::SubIOp>(l, end, start));
        }
        Value v = b.create<mlir::tensor::ExtractOp>(l, grad, coords);
        for (Value size : sizes) {
          v = b.create<arith::DivFOp>(
              l, v,
              b.create<arith::SIToFPOp>(l, b.getF32Type(), ToI64(b, l, size)));
        }
        Value term =
            b.create<arith::SelectOp>(l, inside, v, F32Const(b, l, 0));
        return llvm::SmallVector<Value>{
            b.create<arith::AddFOp>(l, args[1], term)};
      })[0];
  im.Define(node.outputs(0), ToStorageTensor(im, acc, t));
  return absl::OkStatus();
}

absl::Status ConvertAdaptiveMaxPool(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckArity(node, 1, 2); !s.ok()) return s;
  if (absl::Status s = CheckPoolDType(im, node, false); !s.ok()) return s;
  const std::string& x = node.inputs(0);
  const ir::DType t = im.TypeOf(x).dtype();
  absl::StatusOr<Pool> pool = ReadAdaptive(node, ShapeOf(im.TypeOf(x)));
  if (!pool.ok()) return pool.status();
  const Pool& p = *pool;
  if (absl::Status s = CheckOutput(node, 0, p.OutShape(), t); !s.ok()) return s;
  if (absl::Status s = CheckOutput(node, 1, p.OutShape(), ir::INT64); !s.ok()) {
    return s;
  }
  if (NumElements(p.OutShape()) == 0) {
    im.Define(node.outputs(0), Empty(im, p.OutShape(), im.StorageType(t)));
    im.Define(node.outputs(1),
              Empty(im, p.OutShape(), im.builder().getI64Type()));
    return absl::OkStatus();
  }
  const int lead = p.lead_rank();
  // Each window's first position: ATen's initial index.
  Value first = Parallel(
      im, {}, {}, p.OutShape(), im.builder().getI64Type(),
      [&](OpBuilder& b, Location l, ValueRange) {
        std::vector<Value> pos;
        for (int i = 0; i < p.spatial; ++i) {
          pos.push_back(StartIndexValue(b, l, LoopIndex(b, l, lead + i),
                                        p.out[i], p.in[i]));
        }
        return ToI64(b, l, FlatIndex(b, l, pos, p.in));
      });
  Value xc = ToComputeTensor(im, im.ValueOf(x), t);
  mlir::ResultRange results = AdaptiveWindows(
      im, p, xc, ValueRange{SmallestFilled(im, p.OutShape(), t), first},
      [&](OpBuilder& b, Location l, const WindowElement& e, ValueRange args) {
        Value take = b.create<arith::AndIOp>(
            l, e.inside,
            b.create<arith::OrIOp>(l, Greater(b, l, e.value, args[0]),
                                   IsNan(b, l, e.value)));
        return llvm::SmallVector<Value>{
            b.create<arith::SelectOp>(l, take, e.value, args[0]),
            b.create<arith::SelectOp>(l, take, e.flat, args[1])};
      });
  im.Define(node.outputs(0), ToStorageTensor(im, results[0], t));
  im.Define(node.outputs(1), results[1]);
  return absl::OkStatus();
}

}  // namespace

void RegisterAdaptivePoolingOps(OpConverterTable& table) {
  table["_adaptive_avg_pool2d"] = &ConvertAdaptiveAvgPool;
  table["_adaptive_avg_pool3d"] = &ConvertAdaptiveAvgPool;
  table["_adaptive_avg_pool2d_backward"] = &ConvertAdaptiveAvgPoolBackward;
  table["_adaptive_avg_pool3d_backward"] = &ConvertAdaptiveAvgPoolBackward;
  table["adaptive_max_pool2d"] = &ConvertAdaptiveMaxPool;
  table["adaptive_max_pool3d"] = &ConvertAdaptiveMaxPool;
}

}  // namespace rbln::compiler
