// The matmul family: mm, bmm, matmul, addmm, linear.
//
// Products stay named ops (linalg.matmul, linalg.matmul_transpose_b for
// linear's [N, K] weight, linalg.batch_matmul) so that the BLAS rewrite can
// recognize them after bufferization (SPEC P5). Half operands are converted
// to f32 tensors by a generic first, multiplied in f32 and rounded once by
// the epilogue generic, which also applies bias, alpha and beta. Batch dims
// follow PyTorch's matmul: leading dims broadcast; when the right operand has
// no batch dims the left one's batch is folded into its rows (one GEMM);
// otherwise operands are broadcast (copied) to the common batch and
// multiplied with one batch_matmul. A 1-D left (right) operand is a row
// (column) whose size-1 dim is dropped from the result.
//
// IR conventions (output dtype and shape come from the node; every input has
// the output's dtype):
//   mm(a[M,K], b[K,N]), bmm(a[B,M,K], b[B,K,N]), matmul(a, b)
//   addmm(bias, a[M,K], b[K,N])  attrs "beta", "alpha" (default 1; beta 0
//                                ignores bias, NaN included, as PyTorch;
//                                alpha 0 ignores the product on float32 and
//                                integers, as ATen's gemm)
//   linear(x[...,K], weight[N,K] or [K][, bias])
//   matmul_transpose_b(a[...,M,K], b[...,N,K]) = a @ b^T, batch dims
//                                broadcast (attention's scores; no ATen op)
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/AffineMap.h"
#include "rbln/compiler/frontend/graph_importer.h"
#include "rbln/compiler/frontend/ops/op_families.h"
#include "rbln/compiler/ir/graph_util.h"

namespace rbln::compiler {
namespace {

using ::mlir::AffineMap;
using ::mlir::Location;
using ::mlir::OpBuilder;
using ::mlir::Type;
using ::mlir::Value;
using ::mlir::ValueRange;
using ::mlir::utils::IteratorType;
int64_t Product(const Shape& s, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end; ++i) p *= s[i];
  return p;
}

Value Empty(GraphImporter& im, const Shape& shape, Type element) {
  return im.builder().create<mlir::tensor::EmptyOp>(im.loc(), shape, element);
}

Value Zeros(GraphImporter& im, const Shape& shape, Type element) {
  OpBuilder& b = im.builder();
  Value zero =
      b.create<mlir::arith::ConstantOp>(im.loc(), b.getZeroAttr(element));
  return b
      .create<mlir::linalg::FillOp>(im.loc(), ValueRange{zero},
                                    ValueRange{Empty(im, shape, element)})
      .getResult(0);
}

// A parallel linalg.generic over `shape` into a fresh tensor of `element`;
// `body` returns the value to yield.
Value ParallelGeneric(
    GraphImporter& im, ValueRange inputs, llvm::ArrayRef<AffineMap> in_maps,
    const Shape& shape, Type element,
    llvm::function_ref<Value(OpBuilder&, Location, ValueRange)> body) {
  const int rank = shape.size();
  std::vector<AffineMap> maps(in_maps.begin(), in_maps.end());
  maps.push_back(AffineMap::getMultiDimIdentityMap(rank, im.context()));
  return im.builder()
      .create<mlir::linalg::GenericOp>(
          im.loc(),
          mlir::TypeRange{mlir::RankedTensorType::get(shape, element)}, inputs,
          ValueRange{Empty(im, shape, element)}, maps,
          std::vector<IteratorType>(rank, IteratorType::parallel),
          [&](OpBuilder& b, Location l, ValueRange args) {
            b.create<mlir::linalg::YieldOp>(l, body(b, l, args));
          })
      .getResult(0);
}

// Reads a value of shape `in` from loops over `out`, NumPy broadcasting
// (missing leading dims and size-1 dims are read at 0). Empty if `in` does
// not broadcast to `out`.
std::optional<AffineMap> BroadcastMap(GraphImporter& im, const Shape& in,
                                      const Shape& out) {
  if (in.size() > out.size()) return std::nullopt;
  std::vector<mlir::AffineExpr> exprs;
  for (size_t i = 0; i < in.size(); ++i) {
    const size_t j = i + out.size() - in.size();
    if (in[i] == out[j]) {
      exprs.push_back(mlir::getAffineDimExpr(j, im.context()));
    } else if (in[i] == 1) {
      exprs.push_back(mlir::getAffineConstantExpr(0, im.context()));
    } else {
      return std::nullopt;
    }
  }
  return AffineMap::get(out.size(), 0, exprs, im.context());
}

// Reassociation grouping dims [0, split) into one and keeping the rest.
std::vector<mlir::ReassociationIndices> GroupLeading(int rank, int split) {
  std::vector<mlir::ReassociationIndices> groups(1);
  for (int d = 0; d < split; ++d) groups[0].push_back(d);
  for (int d = split; d < rank; ++d) groups.push_back({d});
  return groups;
}

// Collapses dims [0, split) of `v` into one.
Value CollapseLeading(GraphImporter& im, Value v, int split) {
  const Shape s = ShapeOf(v);
  if (split <= 1) return v;
  Shape to = {Product(s, 0, split)};
  to.insert(to.end(), s.begin() + split, s.end());
  auto type = mlir::RankedTensorType::get(
      to, v.getType().cast<mlir::RankedTensorType>().getElementType());
  return im.builder().create<mlir::tensor::CollapseShapeOp>(
      im.loc(), type, v, GroupLeading(s.size(), split));
}

// Expands dim 0 of `v` into `leading`.
Value ExpandLeading(GraphImporter& im, Value v, const Shape& leading) {
  if (leading.size() == 1) return v;
  const Shape s = ShapeOf(v);
  Shape to = leading;
  to.insert(to.end(), s.begin() + 1, s.end());
  auto type = mlir::RankedTensorType::get(
      to, v.getType().cast<mlir::RankedTensorType>().getElementType());
  return im.builder().create<mlir::tensor::ExpandShapeOp>(
      im.loc(), type, v, GroupLeading(to.size(), leading.size()));
}

// A 1-D operand as a row [1, K] (`as_row`) or a column [K, 1].
Value Promote1d(GraphImporter& im, Value v, bool as_row) {
  const int64_t k = ShapeOf(v)[0];
  const Shape to = as_row ? Shape{1, k} : Shape{k, 1};
  auto type = mlir::RankedTensorType::get(
      to, v.getType().cast<mlir::RankedTensorType>().getElementType());
  return im.builder().create<mlir::tensor::ExpandShapeOp>(
      im.loc(), type, v, std::vector<mlir::ReassociationIndices>{{0, 1}});
}

// A stack of matrices `v` (rank >= 2, storage type of `dtype`) as the
// operand of one GEMM: batch dims folded into the rows ([B*R, C], `fold`) or
// broadcast to `batch` and collapsed ([prod(batch), R, C]); in the compute
// type.
Value PrepareOperand(GraphImporter& im, Value v, ir::DType dtype,
                     const Shape& batch, bool fold) {
  Shape s = ShapeOf(v);
  const Type compute = im.ComputeType(dtype);
  const int rank = s.size();
  bool converted = false;
  if (!fold && Shape(s.begin(), s.end() - 2) != batch) {
    Shape to = batch;
    to.insert(to.end(), {s[rank - 2], s[rank - 1]});
    v = ParallelGeneric(im, v, {*BroadcastMap(im, s, to)}, to, compute,
                        [&](OpBuilder& b, Location, ValueRange args) {
                          return im.ToCompute(b, args[0], dtype);
                        });
    s = to;
    converted = true;
  }
  v = CollapseLeading(im, v, s.size() - (fold ? 1 : 2));
  if (!converted && compute != im.StorageType(dtype)) {
    const int r = ShapeOf(v).size();
    v = ParallelGeneric(
        im, v, {AffineMap::getMultiDimIdentityMap(r, im.context())}, ShapeOf(v),
        compute, [&](OpBuilder& b, Location, ValueRange args) {
          return im.ToCompute(b, args[0], dtype);
        });
  }
  return v;
}

// A product in the compute type, shaped batch + [M, N].
struct GemmResult {
  Value acc;
  Shape full;             // batch + [M, N]
  bool drop_m = false;    // a was 1-D
  bool drop_n = false;    // b was 1-D
  bool reshaped = false;  // `acc` is a reshape, not the matmul itself

  Shape OutputShape() const {
    Shape out(full.begin(), full.end() - 2);
    if (!drop_m) out.push_back(full[full.size() - 2]);
    if (!drop_n) out.push_back(full.back());
    return out;
  }
};

// a @ b (`b_transposed`: a @ b^T, b [..., N, K]) with PyTorch's matmul
// shape rules.
absl::StatusOr<GemmResult> EmitProduct(GraphImporter& im, const ir::Node& node,
                                       const std::string& a_name,
                                       const std::string& b_name,
                                       bool b_transposed) {
  const ir::DType dtype = im.TypeOf(a_name).dtype();
  Value a = im.ValueOf(a_name), b = im.ValueOf(b_name);
  const Shape a_orig = ShapeOf(a), b_orig = ShapeOf(b);
  if (a_orig.empty() || b_orig.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: both arguments need at least 1 dimension", node.op()));
  }
  GemmResult p;
  if (a_orig.size() == 1) {
    a = Promote1d(im, a, /*as_row=*/true);
    p.drop_m = true;
  }
  if (b_orig.size() == 1) {
    b = Promote1d(im, b, /*as_row=*/false);
    p.drop_n = true;
  }
  const Shape as = ShapeOf(a), bs = ShapeOf(b);
  const Shape a_batch(as.begin(), as.end() - 2),
      b_batch(bs.begin(), bs.end() - 2);
  const int64_t m = as[as.size() - 2], k = as.back();
  const int64_t bk = b_transposed ? bs.back() : bs[bs.size() - 2];
  const int64_t n = b_transposed ? bs[bs.size() - 2] : bs.back();
  if (k != bk) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: mat1 and mat2 shapes cannot be multiplied (%dx%d and %dx%d)",
        node.op(), Product(as, 0, as.size() - 1), k, bk, n));
  }
  // Broadcast batch dims, right-aligned.
  Shape batch(std::max(a_batch.size(), b_batch.size()), 1);
  for (size_t i = 0; i < batch.size(); ++i) {
    const size_t ai = i + a_batch.size(), bi = i + b_batch.size();
    const int64_t ad = ai >= batch.size() ? a_batch[ai - batch.size()] : 1;
    const int64_t bd = bi >= batch.size() ? b_batch[bi - batch.size()] : 1;
    if (ad != bd && ad != 1 && bd != 1) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "op %s: batch dims [%s] and [%s] do not broadcast", node.op(),
          absl::StrJoin(a_batch, ","), absl::StrJoin(b_batch, ",")));
    }
    batch[i] = ad == 1 ? bd : ad;
  }
  p.full = batch;
  p.full.insert(p.full.end(), {m, n});

  OpBuilder& builder = im.builder();
  const Type compute = im.ComputeType(dtype);
  mlir::Location loc = im.loc();
  if (b_batch.empty()) {
    // One GEMM: a's batch dims are more rows.
    Value lhs = PrepareOperand(im, a, dtype, a_batch, /*fold=*/true);
    Value rhs = PrepareOperand(im, b, dtype, {}, /*fold=*/true);
    const Shape c = {Product(as, 0, as.size() - 1), n};
    Value init = Zeros(im, c, compute);
    auto type = mlir::RankedTensorType::get(c, compute);
    if (b_transposed) {
      p.acc = builder
                  .create<mlir::linalg::MatmulTransposeBOp>(
                      loc, mlir::TypeRange{type}, ValueRange{lhs, rhs},
                      ValueRange{init})
                  .getResult(0);
    } else {
      p.acc = builder
                  .create<mlir::linalg::MatmulOp>(loc, mlir::TypeRange{type},
                                                  ValueRange{lhs, rhs},
                                                  ValueRange{init})
                  .getResult(0);
    }
    if (!a_batch.empty()) {
      Shape leading = a_batch;
      leading.push_back(m);
      p.acc = ExpandLeading(im, p.acc, leading);
      p.reshaped = true;
    }
    return p;
  }
  Value lhs = PrepareOperand(im, a, dtype, batch, /*fold=*/false);
  Value rhs = PrepareOperand(im, b, dtype, batch, /*fold=*/false);
  const Shape c = {Product(batch, 0, batch.size()), m, n};
  const auto c_type = mlir::RankedTensorType::get(c, compute);
  // A transposed b stays as it is stored: the GEMM library reads it
  // transposed (no copy of it into [K, N]).
  p.acc = b_transposed
              ? builder
                    .create<mlir::linalg::BatchMatmulTransposeBOp>(
                        loc, mlir::TypeRange{c_type}, ValueRange{lhs, rhs},
                        ValueRange{Zeros(im, c, compute)})
                    .getResult(0)
              : builder
                    .create<mlir::linalg::BatchMatmulOp>(
                        loc, mlir::TypeRange{c_type}, ValueRange{lhs, rhs},
                        ValueRange{Zeros(im, c, compute)})
                    .getResult(0);
  if (batch.size() > 1) {
    p.acc = ExpandLeading(im, p.acc, batch);
    p.reshaped = true;
  }
  return p;
}

struct Epilogue {
  double alpha = 1.0;
  std::string bias;  // empty: none
  double beta = 1.0;
};

// The node's output: alpha * acc + beta * bias, 1-D dims dropped, rounded
// once. A generic unless the product already is the output: each output
// must come from a destination-style op (see transforms/bind_outputs_pass.cc).
absl::Status EmitOutput(GraphImporter& im, const ir::Node& node,
                        const GemmResult& p, const Epilogue& e) {
  const ir::TensorType& out = node.outputs(0).type();
  const Shape out_shape = p.OutputShape();
  if (ShapeOf(out) != out_shape) {
    return absl::InvalidArgumentError(
        absl::StrFormat("op %s: output %%%s has shape %s, expected [%s]",
                        node.op(), node.outputs(0).name(), ir::TypeToText(out),
                        absl::StrJoin(out_shape, ",")));
  }
  const ir::DType dtype = out.dtype();
  const Type storage = im.StorageType(dtype);
  const bool has_bias = !e.bias.empty() && e.beta != 0.0;
  if (!has_bias && e.alpha == 1.0 && !p.drop_m && !p.drop_n &&
      p.acc.getType().cast<mlir::RankedTensorType>().getElementType() ==
          storage) {
    Value result = p.acc;
    if (p.reshaped) {
      // A named copy: canonicalization would erase an identity generic and
      // leave the reshape as the result.
      result = im.builder()
                   .create<mlir::linalg::CopyOp>(
                       im.loc(), ValueRange{p.acc},
                       ValueRange{Empty(im, out_shape, storage)})
                   .getResult(0);
    }
    im.Define(node.outputs(0), result);
    return absl::OkStatus();
  }
  // Loops over the output; dropped dims of the product are read at 0.
  std::vector<mlir::AffineExpr> acc_exprs;
  const size_t rank = p.full.size();
  unsigned loop = 0;
  for (size_t d = 0; d < rank; ++d) {
    const bool dropped =
        (d == rank - 2 && p.drop_m) || (d == rank - 1 && p.drop_n);
    acc_exprs.push_back(dropped ? mlir::getAffineConstantExpr(0, im.context())
                                : mlir::getAffineDimExpr(loop++, im.context()));
  }
  std::vector<Value> inputs = {p.acc};
  std::vector<AffineMap> maps = {
      AffineMap::get(out_shape.size(), 0, acc_exprs, im.context())};
  if (has_bias) {
    const Shape bias_shape = ShapeOf(im.TypeOf(e.bias));
    std::optional<AffineMap> map = BroadcastMap(im, bias_shape, out_shape);
    if (!map) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "op %s: bias of shape [%s] does not broadcast to [%s]", node.op(),
          absl::StrJoin(bias_shape, ","), absl::StrJoin(out_shape, ",")));
    }
    inputs.push_back(im.ValueOf(e.bias));
    maps.push_back(*map);
  }
  const bool is_float = IsFloat(dtype);
  auto mul = [&](OpBuilder& b, Location l, Value x, double c) -> Value {
    Value cst = im.ComputeConstant(b, c, dtype);
    if (is_float) return b.create<mlir::arith::MulFOp>(l, x, cst);
    return b.create<mlir::arith::MulIOp>(l, x, cst);
  };
  Value result = ParallelGeneric(
      im, inputs, maps, out_shape, storage,
      [&](OpBuilder& b, Location l, ValueRange args) {
        Value v = args[0];
        if (e.alpha != 1.0) v = mul(b, l, v, e.alpha);
        if (has_bias) {
          Value bias = im.ToCompute(b, args[1], dtype);
          if (e.beta != 1.0) bias = mul(b, l, bias, e.beta);
          v = is_float ? b.create<mlir::arith::AddFOp>(l, v, bias).getResult()
                       : b.create<mlir::arith::AddIOp>(l, v, bias).getResult();
        }
        return im.FromCompute(b, v, dtype);
      });
  im.Define(node.outputs(0), result);
  return absl::OkStatus();
}

absl::Status CheckOperands(GraphImporter& im, const ir::Node& node,
                           std::initializer_list<int> ranks) {
  const ir::DType dtype = node.outputs(0).type().dtype();
  if (dtype == ir::BOOL) {
    return absl::UnimplementedError(absl::StrFormat(
        "The following operators are not implemented: ['%s' on bool]",
        node.op()));
  }
  int i = 0;
  for (int rank : ranks) {
    const ir::TensorType& t = im.TypeOf(node.inputs(i));
    if (t.dtype() != dtype) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "op %s: expected all inputs to be %s, got %s for input %d", node.op(),
          ir::TypeToText(node.outputs(0).type()), ir::TypeToText(t), i));
    }
    if (rank >= 0 && t.shape_size() != rank) {
      return absl::InvalidArgumentError(
          absl::StrFormat("op %s: input %d must be a %dD tensor, got %s",
                          node.op(), i, rank, ir::TypeToText(t)));
    }
    ++i;
  }
  return absl::OkStatus();
}

absl::Status Finish(GraphImporter& im, const ir::Node& node,
                    const absl::StatusOr<GemmResult>& p,
                    const Epilogue& e = {}) {
  if (!p.ok()) return p.status();
  return EmitOutput(im, node, *p, e);
}

absl::Status ConvertMm(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckArity(node, 2, 1); !s.ok()) return s;
  if (absl::Status s = CheckOperands(im, node, {2, 2}); !s.ok()) return s;
  return Finish(im, node,
                EmitProduct(im, node, node.inputs(0), node.inputs(1),
                            /*b_transposed=*/false));
}

absl::Status ConvertBmm(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckArity(node, 2, 1); !s.ok()) return s;
  if (absl::Status s = CheckOperands(im, node, {3, 3}); !s.ok()) return s;
  if (im.TypeOf(node.inputs(0)).shape(0) !=
      im.TypeOf(node.inputs(1)).shape(0)) {
    return absl::InvalidArgumentError(
        "op bmm: batch sizes differ (bmm does not broadcast)");
  }
  return Finish(im, node,
                EmitProduct(im, node, node.inputs(0), node.inputs(1),
                            /*b_transposed=*/false));
}

absl::Status ConvertMatmul(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckArity(node, 2, 1); !s.ok()) return s;
  if (absl::Status s = CheckOperands(im, node, {-1, -1}); !s.ok()) return s;
  return Finish(im, node,
                EmitProduct(im, node, node.inputs(0), node.inputs(1),
                            /*b_transposed=*/false));
}

// a @ b^T for stacks of matrices (attention's query @ key^T): b is read as
// stored, [..., N, K], by linalg.batch_matmul_transpose_b.
absl::Status ConvertMatmulTransposeB(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckArity(node, 2, 1); !s.ok()) return s;
  if (absl::Status s = CheckOperands(im, node, {-1, -1}); !s.ok()) return s;
  if (im.TypeOf(node.inputs(0)).shape_size() < 2 ||
      im.TypeOf(node.inputs(1)).shape_size() < 2) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: both operands need at least 2 dimensions", node.op()));
  }
  return Finish(im, node,
                EmitProduct(im, node, node.inputs(0), node.inputs(1),
                            /*b_transposed=*/true));
}

// addmm with alpha = 0 on float32 and integers: beta * bias (0 when beta is
// 0), without the product. ATen's gemm has BLAS semantics there and never
// reads mat1 @ mat2, so inf and NaN in it do not reach the result.
absl::Status EmitScaledBias(GraphImporter& im, const ir::Node& node,
                            const Epilogue& e) {
  const ir::TensorType& out = node.outputs(0).type();
  const Shape a = ShapeOf(im.TypeOf(node.inputs(1)));
  const Shape b = ShapeOf(im.TypeOf(node.inputs(2)));
  const Shape out_shape = {a[0], b[1]};
  if (a[1] != b[0] || ShapeOf(out) != out_shape) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op addmm: mat1 [%s] and mat2 [%s] cannot be multiplied into output "
        "%s",
        absl::StrJoin(a, ","), absl::StrJoin(b, ","), ir::TypeToText(out)));
  }
  const ir::DType dtype = out.dtype();
  const Type storage = im.StorageType(dtype);
  if (e.beta == 0.0) {
    im.Define(node.outputs(0), Zeros(im, out_shape, storage));
    return absl::OkStatus();
  }
  const Shape bias_shape = ShapeOf(im.TypeOf(e.bias));
  std::optional<AffineMap> map = BroadcastMap(im, bias_shape, out_shape);
  if (!map) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op addmm: bias of shape [%s] does not broadcast to [%s]",
        absl::StrJoin(bias_shape, ","), absl::StrJoin(out_shape, ",")));
  }
  Value result = ParallelGeneric(
      im, ValueRange{im.ValueOf(e.bias)}, {*map}, out_shape, storage,
      [&](OpBuilder& b, Location l, ValueRange args) {
        Value v = im.ToCompute(b, args[0], dtype);
        Value beta = im.ComputeConstant(b, e.beta, dtype);
        v = IsFloat(dtype)
                ? b.create<mlir::arith::MulFOp>(l, v, beta).getResult()
                : b.create<mlir::arith::MulIOp>(l, v, beta).getResult();
        return im.FromCompute(b, v, dtype);
      });
  im.Define(node.outputs(0), result);
  return absl::OkStatus();
}

absl::Status ConvertAddmm(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckArity(node, 3, 1); !s.ok()) return s;
  if (absl::Status s = CheckOperands(im, node, {-1, 2, 2}); !s.ok()) return s;
  Epilogue e;
  e.bias = node.inputs(0);
  e.alpha = FloatAttr(node, "alpha", 1.0);
  e.beta = FloatAttr(node, "beta", 1.0);
  // ATen's half-precision addmm does multiply the float32 product by 0, so
  // there 0 * inf gives NaN, as the epilogue below does.
  const ir::DType dtype = node.outputs(0).type().dtype();
  if (e.alpha == 0.0 && dtype != ir::FLOAT16 && dtype != ir::BFLOAT16) {
    return EmitScaledBias(im, node, e);
  }
  return Finish(im, node,
                EmitProduct(im, node, node.inputs(1), node.inputs(2),
                            /*b_transposed=*/false),
                e);
}

// x @ weight^T + bias: the [N, K] weight is read as is by
// linalg.matmul_transpose_b (no transposed copy).
absl::Status ConvertLinear(GraphImporter& im, const ir::Node& node) {
  if (node.inputs_size() < 2 || node.inputs_size() > 3 ||
      node.outputs_size() != 1) {
    return absl::InvalidArgumentError(
        "op linear takes 2 or 3 inputs (x, weight, bias) and 1 output");
  }
  if (node.inputs_size() == 3) {
    if (absl::Status s = CheckOperands(im, node, {-1, -1, -1}); !s.ok())
      return s;
  } else if (absl::Status s = CheckOperands(im, node, {-1, -1}); !s.ok()) {
    return s;
  }
  const int w_rank = im.TypeOf(node.inputs(1)).shape_size();
  if (w_rank != 1 && w_rank != 2) {
    return absl::InvalidArgumentError("op linear: weight must be 1-D or 2-D");
  }
  Epilogue e;
  if (node.inputs_size() == 3) e.bias = node.inputs(2);
  // A 1-D weight is a column (PyTorch's linear is then x @ w).
  return Finish(im, node,
                EmitProduct(im, node, node.inputs(0), node.inputs(1),
                            /*b_transposed=*/w_rank == 2),
                e);
}

}  // namespace

void RegisterMatmulOps(OpConverterTable& table) {
  table["mm"] = &ConvertMm;
  table["bmm"] = &ConvertBmm;
  table["matmul"] = &ConvertMatmul;
  table["matmul_transpose_b"] = &ConvertMatmulTransposeB;
  table["addmm"] = &ConvertAddmm;
  table["linear"] = &ConvertLinear;
}

}  // namespace rbln::compiler
