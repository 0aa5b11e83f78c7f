// Grouped matrix products: torch._grouped_mm (F.grouped_mm), the experts of
// mixture-of-experts layers.
//
// As ATen's _grouped_mm on the CPU (GroupedMMUtils.h's _grouped_mm_fallback,
// a loop of mm_out calls):
//   a[M,K] x b[G,K,N], offs[G]  -> out[M,N]: group g's rows of a times b[g];
//   a[G,M,K] x b[K,N], offs[G]  -> out[M,N]: a[g] times group g's columns
//                                  of b;
//   a[M,K] x b[K,N], offs[G]    -> out[G,M,N]: group g's range of K (an
//                                  empty range gives zeros);
//   a[G,M,K] x b[G,K,N]         -> out[G,M,N] (bmm).
// Group g spans [offs[g-1], offs[g]) (offs[-1] = 0) clamped as Tensor.slice
// clamps (a negative bound counts from the end, a bound past the end stops
// there, an end before its start is empty); the next group starts where
// this one was given to end, and where groups overlap the later one's
// product is what stays. Rows (columns) no group covers are zero: the CPU
// leaves them uninitialised, transformers' own fallback zeroes them. Half
// operands are multiplied in f32 and rounded once.
//
// Only the groups' rows are computed (no dense product over all of b): an
// scf.for over the groups reads each group's bounds from offs at run time
// and multiplies the group's slice of a with b[g] -- a generic on
// dynamically sized slices of the operands as stored, each product
// widened to f32. The 2-D x 3-D loop carries kGroupedGemmAttr, by which
// grouped_gemm_rewrite_pass turns it into grouped GEMM kernel calls
// (kernels/grouped_gemm.h) after bufferization; b produced by a transpose
// of its last two dims (transformers passes weight.transpose(-2, -1)) is
// read in place as the transposed operand.
//
// IR conventions: _grouped_mm(self, mat2[, offs]); offs int32 (int64 too:
// transformers::grouped_mm_fallback, fx_to_ir's alias of this op, takes
// either); attrs "out_dtype" (self's dtype or absent), "has_offs",
// "has_bias" (false: ATen rejects a bias).
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/AffineMap.h"
#include "rbln/compiler/abi/kernel_abi.h"
#include "rbln/compiler/frontend/graph_importer.h"
#include "rbln/compiler/frontend/ops/op_families.h"
#include "rbln/compiler/frontend/ops/reduction_util.h"
#include "rbln/compiler/ir/graph_util.h"

namespace rbln::compiler {
namespace {

using ::mlir::AffineExpr;
using ::mlir::AffineMap;
using ::mlir::Location;
using ::mlir::OpBuilder;
using ::mlir::OpFoldResult;
using ::mlir::Type;
using ::mlir::Value;
using ::mlir::ValueRange;
using ::mlir::arith::CmpIPredicate;
using ::mlir::utils::IteratorType;

// The operand `name` as the product reads it: its value, and whether it is
// the source of a transpose of its last two dims (then `value` is that
// source and the product reads it transposed, without the copy).
struct Operand {
  Value value;
  bool transposed = false;
};

// Is `generic` a pure copy whose input map swaps the last two dims?
bool IsLastTwoDimsTranspose(mlir::linalg::GenericOp generic) {
  if (generic.getNumDpsInputs() != 1 || generic.getNumDpsInits() != 1 ||
      generic.getNumParallelLoops() != generic.getNumLoops()) {
    return false;
  }
  mlir::Block& body = generic.getRegion().front();
  auto yield = llvm::dyn_cast<mlir::linalg::YieldOp>(body.getTerminator());
  if (!yield || yield.getNumOperands() != 1 ||
      yield.getOperand(0) != body.getArgument(0) || body.getOperations().size() != 1) {
    return false;
  }
  llvm::SmallVector<AffineMap> maps = generic.getIndexingMapsArray();
  const unsigned rank = maps[0].getNumDims();
  if (rank < 2 || !maps[1].isIdentity() || maps[0].getNumResults() != rank) return false;
  for (unsigned d = 0; d < rank; ++d) {
    const unsigned want = d == rank - 2 ? rank - 1 : d == rank - 1 ? rank - 2 : d;
    if (maps[0].getResult(d) != mlir::getAffineDimExpr(want, generic.getContext())) return false;
  }
  return true;
}

Operand OperandOf(GraphImporter& im, const std::string& name) {
  Value v = im.ValueOf(name);
  if (auto generic = v.getDefiningOp<mlir::linalg::GenericOp>();
      generic && IsLastTwoDimsTranspose(generic)) {
    return {generic.getDpsInputOperand(0)->get(), true};
  }
  return {v, false};
}

Value Index(OpBuilder& b, Location l, int64_t v) {
  return b.create<mlir::arith::ConstantIndexOp>(l, v);
}

// Tensor.slice's bounds of [start, end) over `size` (index values).
std::pair<Value, Value> SliceBounds(OpBuilder& b, Location l, Value start,
                                    Value end, int64_t size) {
  Value zero = Index(b, l, 0), extent = Index(b, l, size);
  auto wrap = [&](Value v) {
    Value negative = b.create<mlir::arith::CmpIOp>(l, CmpIPredicate::slt, v, zero);
    return b.create<mlir::arith::SelectOp>(
        l, negative, b.create<mlir::arith::AddIOp>(l, v, extent), v);
  };
  Value s = b.create<mlir::arith::MinSIOp>(
      l, b.create<mlir::arith::MaxSIOp>(l, wrap(start), zero), extent);
  Value e = b.create<mlir::arith::MinSIOp>(
      l, b.create<mlir::arith::MaxSIOp>(l, wrap(end), s), extent);
  return {s, e};
}

// offs[i] as an index value (offs holds int32 or int64).
Value OffsetAt(OpBuilder& b, Location l, Value offs, Value i) {
  Value v = b.create<mlir::tensor::ExtractOp>(l, offs, ValueRange{i});
  return b.create<mlir::arith::IndexCastOp>(l, b.getIndexType(), v);
}

OpFoldResult Static(OpBuilder& b, int64_t v) { return b.getIndexAttr(v); }

// A slice of `t`: `offsets`/`sizes` per dim, `drop` the dims dropped.
Value Slice(OpBuilder& b, Location l, Value t, llvm::ArrayRef<OpFoldResult> offsets,
            llvm::ArrayRef<OpFoldResult> sizes, const std::vector<int64_t>& result_shape) {
  auto source = t.getType().cast<mlir::RankedTensorType>();
  llvm::SmallVector<OpFoldResult> strides(offsets.size(), Static(b, 1));
  auto type = mlir::RankedTensorType::get(result_shape, source.getElementType());
  return b.create<mlir::tensor::ExtractSliceOp>(l, type, t, offsets, sizes, strides);
}

// The product of matrices a [m, k] (a_t: stored [k, m]) and b [k, n] (b_t:
// stored [n, k]), in the operands' storage type `dtype`, accumulated in f32
// into `acc` [m, n] (its old values are overwritten: the fill first).
Value Product(GraphImporter& im, OpBuilder& b, Location l, ir::DType dtype, Value a,
              bool a_t, Value bm, bool b_t, Value acc) {
  mlir::MLIRContext* ctx = b.getContext();
  const AffineExpr m = mlir::getAffineDimExpr(0, ctx), n = mlir::getAffineDimExpr(1, ctx),
                   k = mlir::getAffineDimExpr(2, ctx);
  auto map = [&](AffineExpr r, AffineExpr c) { return AffineMap::get(3, 0, {r, c}, ctx); };
  Value zero = b.create<mlir::arith::ConstantOp>(l, b.getF32FloatAttr(0.0f));
  Value zeroed = b.create<mlir::linalg::FillOp>(l, ValueRange{zero}, ValueRange{acc}).getResult(0);
  return b
      .create<mlir::linalg::GenericOp>(
          l, mlir::TypeRange{acc.getType()}, ValueRange{a, bm}, ValueRange{zeroed},
          llvm::ArrayRef<AffineMap>{a_t ? map(k, m) : map(m, k), b_t ? map(n, k) : map(k, n),
                                    map(m, n)},
          llvm::ArrayRef<IteratorType>{IteratorType::parallel, IteratorType::parallel,
                                       IteratorType::reduction},
          [&](OpBuilder& nb, Location nl, ValueRange args) {
            Value p = nb.create<mlir::arith::MulFOp>(nl, im.ToCompute(nb, args[0], dtype),
                                                    im.ToCompute(nb, args[1], dtype));
            nb.create<mlir::linalg::YieldOp>(
                nl, ValueRange{nb.create<mlir::arith::AddFOp>(nl, args[2], p)});
          })
      .getResult(0);
}

struct Problem {
  ir::DType dtype;
  Operand a, b;
  Value offs;           // null for 3-D x 3-D
  int64_t groups = 0, m = 0, n = 0, k = 0;
  std::vector<int64_t> out_shape;
};

// A loop over the groups: group g's bounds [s, e) from offs, clamped to
// `extent`, passed to `step` with the loop-carried f32 result.
Value GroupLoop(GraphImporter& im, const Problem& p, Value init, int64_t extent,
                const std::function<Value(OpBuilder&, Location, Value g, Value s, Value e,
                                          Value acc)>& step) {
  OpBuilder& builder = im.builder();
  Location l = im.loc();
  auto loop = builder.create<mlir::scf::ForOp>(
      l, Index(builder, l, 0), Index(builder, l, p.groups), Index(builder, l, 1),
      ValueRange{init}, [&](OpBuilder& b, Location bl, Value g, ValueRange it) {
        // Group g starts where group g - 1 was given to end.
        Value is_first = b.create<mlir::arith::CmpIOp>(bl, CmpIPredicate::eq, g,
                                                       Index(b, bl, 0));
        Value prev = b.create<mlir::arith::SelectOp>(
            bl, is_first, Index(b, bl, 0),
            b.create<mlir::arith::SubIOp>(bl, g, Index(b, bl, 1)));
        Value start = b.create<mlir::arith::SelectOp>(bl, is_first, Index(b, bl, 0),
                                                      OffsetAt(b, bl, p.offs, prev));
        auto [s, e] = SliceBounds(b, bl, start, OffsetAt(b, bl, p.offs, g), extent);
        b.create<mlir::scf::YieldOp>(bl, ValueRange{step(b, bl, g, s, e, it[0])});
      });
  return loop.getResult(0);
}

// a[M,K] x b[G,K,N] -> [M,N]: rows by group.
Value RowGroups(GraphImporter& im, const Problem& p) {
  Value init = Filled(im, {p.m, p.n}, F32(im, 0.0));
  Value result = GroupLoop(im, p, init, p.m, [&](OpBuilder& b, Location l, Value g, Value s,
                                                 Value e, Value acc) {
    Value rows = b.create<mlir::arith::SubIOp>(l, e, s);
    const int64_t dyn = mlir::ShapedType::kDynamic;
    Value a = Slice(b, l, p.a.value, {s, Static(b, 0)}, {rows, Static(b, p.k)}, {dyn, p.k});
    const int64_t r0 = p.b.transposed ? p.n : p.k, r1 = p.b.transposed ? p.k : p.n;
    Value bg = Slice(b, l, p.b.value, {g, Static(b, 0), Static(b, 0)},
                     {Static(b, 1), Static(b, r0), Static(b, r1)}, {r0, r1});
    Value c = Slice(b, l, acc, {s, Static(b, 0)}, {rows, Static(b, p.n)}, {dyn, p.n});
    Value r = Product(im, b, l, p.dtype, a, false, bg, p.b.transposed, c);
    r.getDefiningOp()->setAttr(kGroupedGemmAttr, b.getUnitAttr());
    llvm::SmallVector<OpFoldResult> strides(2, Static(b, 1));
    return b.create<mlir::tensor::InsertSliceOp>(
        l, r, acc, llvm::ArrayRef<OpFoldResult>{s, Static(b, 0)},
        llvm::ArrayRef<OpFoldResult>{rows, Static(b, p.n)}, strides).getResult();
  });
  result.getDefiningOp()->setAttr(kGroupedGemmAttr, im.builder().getUnitAttr());
  return result;
}

// a[G,M,K] x b[K,N] -> [M,N]: columns by group.
Value ColumnGroups(GraphImporter& im, const Problem& p) {
  Value init = Filled(im, {p.m, p.n}, F32(im, 0.0));
  return GroupLoop(im, p, init, p.n, [&](OpBuilder& b, Location l, Value g, Value s, Value e,
                                         Value acc) {
    Value cols = b.create<mlir::arith::SubIOp>(l, e, s);
    const int64_t dyn = mlir::ShapedType::kDynamic;
    const int64_t r0 = p.a.transposed ? p.k : p.m, r1 = p.a.transposed ? p.m : p.k;
    Value ag = Slice(b, l, p.a.value, {g, Static(b, 0), Static(b, 0)},
                     {Static(b, 1), Static(b, r0), Static(b, r1)}, {r0, r1});
    Value bs = p.b.transposed
                   ? Slice(b, l, p.b.value, {s, Static(b, 0)}, {cols, Static(b, p.k)}, {dyn, p.k})
                   : Slice(b, l, p.b.value, {Static(b, 0), s}, {Static(b, p.k), cols}, {p.k, dyn});
    Value c = Slice(b, l, acc, {Static(b, 0), s}, {Static(b, p.m), cols}, {p.m, dyn});
    Value r = Product(im, b, l, p.dtype, ag, p.a.transposed, bs, p.b.transposed, c);
    llvm::SmallVector<OpFoldResult> strides(2, Static(b, 1));
    return b.create<mlir::tensor::InsertSliceOp>(
        l, r, acc, llvm::ArrayRef<OpFoldResult>{Static(b, 0), s},
        llvm::ArrayRef<OpFoldResult>{Static(b, p.m), cols}, strides).getResult();
  });
}

// a[M,K] x b[K,N] -> [G,M,N]: K by group (weight gradients).
Value KGroups(GraphImporter& im, const Problem& p) {
  Value init = Filled(im, {p.groups, p.m, p.n}, F32(im, 0.0));
  return GroupLoop(im, p, init, p.k, [&](OpBuilder& b, Location l, Value g, Value s, Value e,
                                         Value acc) {
    Value depth = b.create<mlir::arith::SubIOp>(l, e, s);
    const int64_t dyn = mlir::ShapedType::kDynamic;
    Value as = p.a.transposed
                   ? Slice(b, l, p.a.value, {s, Static(b, 0)}, {depth, Static(b, p.m)}, {dyn, p.m})
                   : Slice(b, l, p.a.value, {Static(b, 0), s}, {Static(b, p.m), depth}, {p.m, dyn});
    Value bs = p.b.transposed
                   ? Slice(b, l, p.b.value, {Static(b, 0), s}, {Static(b, p.n), depth}, {p.n, dyn})
                   : Slice(b, l, p.b.value, {s, Static(b, 0)}, {depth, Static(b, p.n)}, {dyn, p.n});
    Value c = Slice(b, l, acc, {g, Static(b, 0), Static(b, 0)},
                    {Static(b, 1), Static(b, p.m), Static(b, p.n)}, {p.m, p.n});
    Value r = Product(im, b, l, p.dtype, as, p.a.transposed, bs, p.b.transposed, c);
    llvm::SmallVector<OpFoldResult> strides(3, Static(b, 1));
    return b.create<mlir::tensor::InsertSliceOp>(
        l, r, acc, llvm::ArrayRef<OpFoldResult>{g, Static(b, 0), Static(b, 0)},
        llvm::ArrayRef<OpFoldResult>{Static(b, 1), Static(b, p.m), Static(b, p.n)}, strides)
        .getResult();
  });
}

absl::Status ConvertGroupedMm(GraphImporter& im, const ir::Node& node) {
  const bool has_offs = BoolAttr(node, "has_offs", node.inputs_size() == 3);
  if (absl::Status s = CheckArity(node, has_offs ? 3 : 2, 1); !s.ok()) return s;
  if (BoolAttr(node, "has_bias", false)) {
    return absl::InvalidArgumentError("op _grouped_mm: Bias not supported yet");
  }
  const ir::TensorType& ta = im.TypeOf(node.inputs(0));
  const ir::TensorType& tb = im.TypeOf(node.inputs(1));
  const ir::DType dtype = ta.dtype();
  auto check_dtype = [&](const ir::TensorType& t, const char* which) -> absl::Status {
    if (t.dtype() == ir::FLOAT32 || t.dtype() == ir::FLOAT16 || t.dtype() == ir::BFLOAT16) {
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(absl::StrFormat(
        "op _grouped_mm: Expected %s to be Float32, BFloat16 or Float16 matrix, got %s", which,
        ScalarTypeName(t.dtype())));
  };
  if (absl::Status s = check_dtype(ta, "mat_a"); !s.ok()) return s;
  if (absl::Status s = check_dtype(tb, "mat_b"); !s.ok()) return s;
  if (tb.dtype() != dtype) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op _grouped_mm: expected mat_a and mat_b to have the same dtype, but got: %s != %s",
        ScalarTypeName(dtype), ScalarTypeName(tb.dtype())));
  }
  const ir::TensorType& out = node.outputs(0).type();
  if (out.dtype() != dtype) {
    return absl::InvalidArgumentError(
        "op _grouped_mm: Grouped gemm output dtype must match `mat_a` dtype");
  }
  const Shape as = ShapeOf(ta), bs = ShapeOf(tb);
  const int ra = as.size(), rb = bs.size();
  if ((ra != 2 && ra != 3) || (rb != 2 && rb != 3)) {
    return absl::InvalidArgumentError("op _grouped_mm: mat_a and mat_b have to be 2 or 3d");
  }
  if (has_offs != (ra == 2 || rb == 2)) {
    return absl::InvalidArgumentError(
        "op _grouped_mm: Have to provide offsets if there is a 2d matrix, or no offset if "
        "both matrices are 3d");
  }
  if ((ra == 3 || rb == 3) && as.back() != bs[rb - 2]) {
    return absl::InvalidArgumentError(
        "op _grouped_mm: contraction dimension of mat_a and mat_b must match");
  }
  Problem p{dtype, OperandOf(im, node.inputs(0)), OperandOf(im, node.inputs(1))};
  if (has_offs) {
    const ir::TensorType& to = im.TypeOf(node.inputs(2));
    if (to.shape_size() != 1) {
      return absl::InvalidArgumentError("op _grouped_mm: offs has to be 1D");
    }
    if (to.dtype() != ir::INT32 && to.dtype() != ir::INT64) {
      return absl::InvalidArgumentError("op _grouped_mm: Offsets have to be int32");
    }
    p.offs = im.ValueOf(node.inputs(2));
    p.groups = to.shape(0);
  }
  Value acc;
  if (ra == 2 && rb == 3) {
    if (p.groups != bs[0]) {
      return absl::InvalidArgumentError("op _grouped_mm: matrix batch sizes have to match");
    }
    p.m = as[0], p.k = as[1], p.n = bs[2];
    p.out_shape = {p.m, p.n};
    if (p.a.transposed) p.a = {im.ValueOf(node.inputs(0)), false};
  } else if (ra == 3 && rb == 2) {
    if (p.groups != as[0]) {
      return absl::InvalidArgumentError("op _grouped_mm: matrix batch sizes have to match");
    }
    p.m = as[1], p.k = as[2], p.n = bs[1];
    p.out_shape = {p.m, p.n};
  } else if (ra == 2 && rb == 2) {
    p.m = as[0], p.k = as[1], p.n = bs[1];
    p.out_shape = {p.groups, p.m, p.n};
    if (bs[0] != p.k) {
      // As the CPU's mm_out on the first group's slices would report it.
      return absl::InvalidArgumentError(absl::StrFormat(
          "op _grouped_mm: mat1 and mat2 shapes cannot be multiplied (%dx%d and %dx%d)", p.m,
          p.k, bs[0], p.n));
    }
  } else {
    if (as[0] != bs[0]) {
      return absl::InvalidArgumentError("op _grouped_mm: batched dimension has to match");
    }
    p.groups = as[0], p.m = as[1], p.k = as[2], p.n = bs[2];
    p.out_shape = {p.groups, p.m, p.n};
  }
  if (absl::Status s = CheckOutputShape(node, 0, p.out_shape); !s.ok()) return s;
  if (ra == 3 && rb == 3) {
    // A batch of GEMMs: bmm's converter (BLAS / oneDNN after bufferization).
    ir::Node bmm;
    bmm.set_op("bmm");
    bmm.add_inputs(node.inputs(0));
    bmm.add_inputs(node.inputs(1));
    *bmm.add_outputs() = node.outputs(0);
    return im.EmitNode(bmm);
  }
  if (ra == 2 && rb == 3) {
    acc = RowGroups(im, p);
  } else if (ra == 3) {
    acc = ColumnGroups(im, p);
  } else {
    acc = KGroups(im, p);
  }
  im.Define(node.outputs(0), Finalize(im, node, 0, acc));
  return absl::OkStatus();
}

// One MXFP4 weight element in f32 from its byte, the element's column `k`
// (which nibble: low for even k) and its scale byte: e2m1's bits placed in
// a float's (sign, exponent e + 126 for e > 0, mantissa bit) times 2^(s -
// 127) as exponent bits (s = 0 flushes to 0, as the kernel does).
Value Mxfp4Value(OpBuilder& b, Location l, Value byte, Value k, Value scale_byte) {
  auto i32c = [&](int64_t v) { return b.create<mlir::arith::ConstantIntOp>(l, v, 32); };
  Value word = b.create<mlir::arith::ExtUIOp>(l, b.getI32Type(), byte);
  Value odd = b.create<mlir::arith::IndexCastOp>(
      l, b.getI32Type(), b.create<mlir::arith::AndIOp>(l, k, Index(b, l, 1)));
  Value nib = b.create<mlir::arith::AndIOp>(
      l, b.create<mlir::arith::ShRUIOp>(l, word, b.create<mlir::arith::MulIOp>(l, odd, i32c(4))),
      i32c(15));
  Value e = b.create<mlir::arith::AndIOp>(l, b.create<mlir::arith::ShRUIOp>(l, nib, i32c(1)),
                                          i32c(3));
  Value m = b.create<mlir::arith::AndIOp>(l, nib, i32c(1));
  Value normal = b.create<mlir::arith::OrIOp>(
      l, b.create<mlir::arith::ShLIOp>(l, b.create<mlir::arith::AddIOp>(l, e, i32c(126)), i32c(23)),
      b.create<mlir::arith::ShLIOp>(l, m, i32c(22)));
  Value subnormal = b.create<mlir::arith::MulIOp>(l, m, i32c(0x3F000000));  // 0 or 0.5
  Value is_sub = b.create<mlir::arith::CmpIOp>(l, CmpIPredicate::eq, e, i32c(0));
  Value bits = b.create<mlir::arith::OrIOp>(
      l, b.create<mlir::arith::SelectOp>(l, is_sub, subnormal, normal),
      b.create<mlir::arith::ShLIOp>(l, b.create<mlir::arith::AndIOp>(l, nib, i32c(8)), i32c(28)));
  Value scale_bits = b.create<mlir::arith::ShLIOp>(
      l, b.create<mlir::arith::ExtUIOp>(l, b.getI32Type(), scale_byte), i32c(23));
  return b.create<mlir::arith::MulFOp>(
      l, b.create<mlir::arith::BitcastOp>(l, b.getF32Type(), bits),
      b.create<mlir::arith::BitcastOp>(l, b.getF32Type(), scale_bits));
}

// rbln::grouped_mm_mxfp4(a [M, K], blocks [G, N, K/2] uint8, scales [G, N,
// K/32] uint8, offs [G]) -> [M, N]: group g's rows of a times W[g]^T, W[g]
// the MXFP4 weight (kernels/mxfp4_grouped_gemm.h). Lowered as RowGroups
// with the product's body decoding W from its byte and scale (maps (n, k / 2)
// and (n, k / 32)), marked for the rewrite to rbln_grouped_gemm_mxfp4.
absl::Status ConvertGroupedMmMxfp4(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckArity(node, 4, 1); !s.ok()) return s;
  const ir::TensorType& ta = im.TypeOf(node.inputs(0));
  const ir::TensorType& tb = im.TypeOf(node.inputs(1));
  const ir::TensorType& ts = im.TypeOf(node.inputs(2));
  const ir::TensorType& to = im.TypeOf(node.inputs(3));
  const Shape as = ShapeOf(ta), bs = ShapeOf(tb), ss = ShapeOf(ts);
  if (ta.dtype() != ir::FLOAT32 && ta.dtype() != ir::BFLOAT16) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op grouped_mm_mxfp4: activations must be float32 or bfloat16, got %s",
        ScalarTypeName(ta.dtype())));
  }
  if (tb.dtype() != ir::UINT8 || ts.dtype() != ir::UINT8 || as.size() != 2 || bs.size() != 3 ||
      ss.size() != 3 || to.shape_size() != 1 ||
      (to.dtype() != ir::INT32 && to.dtype() != ir::INT64)) {
    return absl::InvalidArgumentError(
        "op grouped_mm_mxfp4: expected a [M, K], blocks [G, N, K/2] uint8, scales [G, N, K/32] "
        "uint8 and offsets [G] int32/int64");
  }
  const int64_t m = as[0], k = as[1], groups = bs[0], n = bs[1];
  if (k % 32 != 0 || bs[2] * 2 != k || ss[0] != groups || ss[1] != n || ss[2] * 32 != k ||
      to.shape(0) != groups) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op grouped_mm_mxfp4: shapes do not agree: a [%d, %d], blocks [%d, %d, %d], scales "
        "[%d, %d, %d], offsets [%d] (K a multiple of 32)",
        m, k, bs[0], bs[1], bs[2], ss[0], ss[1], ss[2], to.shape(0)));
  }
  if (absl::Status s = CheckOutputShape(node, 0, {m, n}); !s.ok()) return s;
  Problem p{ta.dtype(), {im.ValueOf(node.inputs(0)), false}, {}};
  p.offs = im.ValueOf(node.inputs(3));
  p.groups = groups, p.m = m, p.n = n, p.k = k;
  Value blocks = im.ValueOf(node.inputs(1)), scales = im.ValueOf(node.inputs(2));
  OpBuilder& builder = im.builder();
  Value init = Filled(im, {m, n}, F32(im, 0.0));
  Value result = GroupLoop(im, p, init, m, [&](OpBuilder& b, Location l, Value g, Value s,
                                               Value e, Value acc) {
    Value rows = b.create<mlir::arith::SubIOp>(l, e, s);
    const int64_t dyn = mlir::ShapedType::kDynamic;
    Value a = Slice(b, l, p.a.value, {s, Static(b, 0)}, {rows, Static(b, k)}, {dyn, k});
    Value wb = Slice(b, l, blocks, {g, Static(b, 0), Static(b, 0)},
                     {Static(b, 1), Static(b, n), Static(b, k / 2)}, {n, k / 2});
    Value ws = Slice(b, l, scales, {g, Static(b, 0), Static(b, 0)},
                     {Static(b, 1), Static(b, n), Static(b, k / 32)}, {n, k / 32});
    Value c = Slice(b, l, acc, {s, Static(b, 0)}, {rows, Static(b, n)}, {dyn, n});
    mlir::MLIRContext* ctx = b.getContext();
    const AffineExpr dm = mlir::getAffineDimExpr(0, ctx), dn = mlir::getAffineDimExpr(1, ctx),
                     dk = mlir::getAffineDimExpr(2, ctx);
    auto map = [&](AffineExpr r, AffineExpr col) { return AffineMap::get(3, 0, {r, col}, ctx); };
    Value zero = b.create<mlir::arith::ConstantOp>(l, b.getF32FloatAttr(0.0f));
    Value zeroed = b.create<mlir::linalg::FillOp>(l, ValueRange{zero}, ValueRange{c}).getResult(0);
    auto product = b.create<mlir::linalg::GenericOp>(
        l, mlir::TypeRange{c.getType()}, ValueRange{a, wb, ws}, ValueRange{zeroed},
        llvm::ArrayRef<AffineMap>{map(dm, dk), map(dn, dk.floorDiv(2)), map(dn, dk.floorDiv(32)),
                                  map(dm, dn)},
        llvm::ArrayRef<IteratorType>{IteratorType::parallel, IteratorType::parallel,
                                     IteratorType::reduction},
        [&](OpBuilder& nb, Location nl, ValueRange args) {
          Value kk = nb.create<mlir::linalg::IndexOp>(nl, 2);
          Value w = Mxfp4Value(nb, nl, args[1], kk, args[2]);
          Value prod = nb.create<mlir::arith::MulFOp>(nl, im.ToCompute(nb, args[0], p.dtype), w);
          nb.create<mlir::linalg::YieldOp>(
              nl, ValueRange{nb.create<mlir::arith::AddFOp>(nl, args[3], prod)});
        });
    product->setAttr(kGroupedGemmAttr, b.getUnitAttr());
    product->setAttr(kGroupedGemmMxfp4Attr, b.getUnitAttr());
    llvm::SmallVector<OpFoldResult> strides(2, Static(b, 1));
    return b.create<mlir::tensor::InsertSliceOp>(
        l, product.getResult(0), acc, llvm::ArrayRef<OpFoldResult>{s, Static(b, 0)},
        llvm::ArrayRef<OpFoldResult>{rows, Static(b, n)}, strides).getResult();
  });
  result.getDefiningOp()->setAttr(kGroupedGemmAttr, builder.getUnitAttr());
  result.getDefiningOp()->setAttr(kGroupedGemmMxfp4Attr, builder.getUnitAttr());
  im.Define(node.outputs(0), Finalize(im, node, 0, result));
  return absl::OkStatus();
}

}  // namespace

void RegisterGroupedMatmulOps(OpConverterTable& table) {
  table["_grouped_mm"] = &ConvertGroupedMm;
  table["grouped_mm_mxfp4"] = &ConvertGroupedMmMxfp4;
}

}  // namespace rbln::compiler
