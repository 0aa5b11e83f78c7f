// Small linear algebra: addmv (through addmm) and addbmm (through bmm), so
// they share the matmul family's GEMMs and f32 accumulation, and _trilinear
// (bilinear's contraction, one f32 reduction generic).
//
// IR conventions (output dtype and shape come from the node):
//   addmv(self, mat[N,M], vec[M])  "beta", "alpha": beta * self +
//     alpha * (mat @ vec); self broadcasts to [N]. Converted as
//     addmm(self[N,1], mat, vec[M,1]) squeezed, whose steps are internal
//     nodes named "<output>/<step>".
//   addbmm(self, b1[B,N,M], b2[B,M,P])  "beta", "alpha": beta * self +
//     alpha * sum_b b1[b] @ b2[b]: the products by one bmm in f32 (the
//     integer type for integers), then summed over b in order with a
//     rounding to the output dtype after each batch, as ATen's loop of
//     addmm_ rounds half types.
//   _trilinear(i1, i2, i3)  "expand1", "expand2", "expand3" (dims each
//     input lacks, as unsqueezed), "sumdim" (dims summed over and dropped
//     from the output), "unroll_dim" (ignored: an ATen loop choice):
//     out = sum over sumdim of i1 * i2 * i3, in f32 for half types,
//     rounded once.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
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
using ::mlir::utils::IteratorType;

ir::Attribute IntAttribute(int64_t v) {
  ir::Attribute a;
  a.set_i(v);
  return a;
}
ir::Attribute FloatAttribute(double v) {
  ir::Attribute a;
  a.set_f(v);
  return a;
}

// Converts the internal nodes of one composite node; each step's output is
// "<output>/<step>", the last one the node's own output.
class Steps {
 public:
  Steps(GraphImporter& im, const ir::Node& node) : im_(im), node_(node) {}

  absl::StatusOr<std::string> Emit(
      const std::string& op, const std::vector<std::string>& inputs,
      const std::string& step, const Shape& shape,
      std::vector<std::pair<std::string, ir::Attribute>> attrs = {},
      bool last = false, std::optional<ir::DType> dtype = std::nullopt) {
    ir::Node n;
    n.set_op(op);
    for (const std::string& in : inputs) n.add_inputs(in);
    ir::Value* v = n.add_outputs();
    if (last) {
      *v = node_.outputs(0);
    } else {
      v->set_name(absl::StrFormat("%s/%s", node_.outputs(0).name(), step));
      v->mutable_type()->set_dtype(
          dtype.value_or(node_.outputs(0).type().dtype()));
      for (int64_t d : shape) v->mutable_type()->add_shape(d);
    }
    for (auto& [name, attr] : attrs) (*n.mutable_attrs())[name] = attr;
    if (absl::Status s = im_.EmitNode(n); !s.ok()) return s;
    return v->name();
  }

 private:
  GraphImporter& im_;
  const ir::Node& node_;
};

absl::Status CheckSameDTypes(GraphImporter& im, const ir::Node& node) {
  const ir::DType dtype = node.outputs(0).type().dtype();
  for (const std::string& in : node.inputs()) {
    if (im.TypeOf(in).dtype() != dtype) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "op %s: expected every input to be %s like the output, got %s for "
          "%%%s",
          node.op(), ScalarTypeName(dtype),
          ScalarTypeName(im.TypeOf(in).dtype()), in));
    }
  }
  return absl::OkStatus();
}

std::vector<std::pair<std::string, ir::Attribute>> Scales(
    const ir::Node& node) {
  return {{"beta", FloatAttribute(FloatAttr(node, "beta", 1.0))},
          {"alpha", FloatAttribute(FloatAttr(node, "alpha", 1.0))}};
}

absl::Status ConvertAddmv(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckArity(node, 3, 1); !s.ok()) return s;
  if (absl::Status s = CheckSameDTypes(im, node); !s.ok()) return s;
  const Shape self = ShapeOf(im.TypeOf(node.inputs(0)));
  const Shape mat = ShapeOf(im.TypeOf(node.inputs(1)));
  const Shape vec = ShapeOf(im.TypeOf(node.inputs(2)));
  if (mat.size() != 2 || vec.size() != 1 || mat[1] != vec[0]) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op addmv: vector + matrix @ vector expected, got %s, %s, %s",
        ir::TypeToText(im.TypeOf(node.inputs(0))),
        ir::TypeToText(im.TypeOf(node.inputs(1))),
        ir::TypeToText(im.TypeOf(node.inputs(2)))));
  }
  const int64_t n = mat[0];
  if (self.size() > 1 || (self.size() == 1 && self[0] != n && self[0] != 1)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("op addmv: self %s does not broadcast to [%d]",
                        ir::TypeToText(im.TypeOf(node.inputs(0))), n));
  }
  if (absl::Status s = CheckOutputShape(node, 0, {n}); !s.ok()) return s;
  Steps steps(im, node);
  absl::StatusOr<std::string> column =
      steps.Emit("unsqueeze", {node.inputs(2)}, "vec", {vec[0], 1},
                 {{"dim", IntAttribute(1)}});
  if (!column.ok()) return column.status();
  std::string bias = node.inputs(0);
  if (self.size() == 1) {
    absl::StatusOr<std::string> b = steps.Emit(
        "unsqueeze", {bias}, "self", {self[0], 1}, {{"dim", IntAttribute(1)}});
    if (!b.ok()) return b.status();
    bias = *b;
  }
  absl::StatusOr<std::string> product = steps.Emit(
      "addmm", {bias, node.inputs(1), *column}, "addmm", {n, 1}, Scales(node));
  if (!product.ok()) return product.status();
  return steps
      .Emit("squeeze", {*product}, "", {n}, {{"dim", IntAttribute(1)}},
            /*last=*/true)
      .status();
}

absl::Status ConvertAddbmm(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckArity(node, 3, 1); !s.ok()) return s;
  if (absl::Status s = CheckSameDTypes(im, node); !s.ok()) return s;
  const ir::DType dtype = node.outputs(0).type().dtype();
  if (dtype == ir::BOOL) {
    return absl::UnimplementedError(
        "The following operators are not implemented: ['addbmm' on bool]");
  }
  const Shape self = ShapeOf(im.TypeOf(node.inputs(0)));
  const Shape b1 = ShapeOf(im.TypeOf(node.inputs(1)));
  const Shape b2 = ShapeOf(im.TypeOf(node.inputs(2)));
  if (b1.size() != 3 || b2.size() != 3 || b1[0] != b2[0] || b1[2] != b2[1]) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op addbmm: batch1 and batch2 must be 3-D with equal batches and "
        "matching inner dims, got %s and %s",
        ir::TypeToText(im.TypeOf(node.inputs(1))),
        ir::TypeToText(im.TypeOf(node.inputs(2)))));
  }
  const int64_t batches = b1[0], n = b1[1], m = b1[2], p = b2[2];
  if (absl::Status s = CheckOutputShape(node, 0, {n, p}); !s.ok()) return s;
  const Shape out = {n, p};
  std::vector<mlir::AffineExpr> self_exprs;
  for (size_t i = 0; i < self.size(); ++i) {
    const int d = i + 2 - self.size();
    if (d < 0 || (self[i] != 1 && self[i] != out[d])) {
      return absl::InvalidArgumentError(
          absl::StrFormat("op addbmm: self %s does not broadcast to [%d, %d]",
                          ir::TypeToText(im.TypeOf(node.inputs(0))), n, p));
    }
    self_exprs.push_back(self[i] == out[d]
                             ? mlir::getAffineDimExpr(d, im.context())
                             : mlir::getAffineConstantExpr(0, im.context()));
  }
  const double beta = FloatAttr(node, "beta", 1.0);
  const double alpha = FloatAttr(node, "alpha", 1.0);
  // The batch's products in the compute type (one bmm: GEMMs).
  const ir::DType compute = IsFloat(dtype) ? ir::FLOAT32 : dtype;
  Steps steps(im, node);
  std::string lhs = node.inputs(1), rhs = node.inputs(2);
  Value products;
  // float32 and integers ignore the product when alpha is 0 (ATen's gemm).
  const bool use_products =
      batches > 0 && !(alpha == 0 && (dtype == ir::FLOAT32 || !IsFloat(dtype)));
  if (use_products) {
    if (compute != dtype) {
      absl::StatusOr<std::string> l =
          steps.Emit("to_dtype", {lhs}, "batch1", b1, {}, false, compute);
      if (!l.ok()) return l.status();
      absl::StatusOr<std::string> r =
          steps.Emit("to_dtype", {rhs}, "batch2", b2, {}, false, compute);
      if (!r.ok()) return r.status();
      lhs = *l;
      rhs = *r;
    }
    absl::StatusOr<std::string> bmm = steps.Emit(
        "bmm", {lhs, rhs}, "products", {batches, n, p}, {}, false, compute);
    if (!bmm.ok()) return bmm.status();
    products = im.ValueOf(*bmm);
  }
  // ATen's loop of addmm_: beta * self + alpha * product_0, then
  // + alpha * product_b, each step rounded to the output dtype.
  const AffineMap id = Identity(im, 2);
  Value acc = Generic(
      im, im.ValueOf(node.inputs(0)), Empty(im, out, im.ComputeType(dtype)),
      {AffineMap::get(2, 0, self_exprs, im.context()), id},
      {IteratorType::parallel, IteratorType::parallel},
      [&](OpBuilder& b, Location l, ValueRange args) {
        if (beta == 0) {
          return llvm::SmallVector<Value>{im.ComputeConstant(b, 0, dtype)};
        }
        return llvm::SmallVector<Value>{
            Mul(b, l, im.ToCompute(b, args[0], dtype),
                im.ComputeConstant(b, beta, dtype))};
      })[0];
  const bool half = dtype == ir::FLOAT16 || dtype == ir::BFLOAT16;
  if (use_products) {
    const AffineMap batch_first =
        AffineMap::get(3, 0,
                       {mlir::getAffineDimExpr(2, im.context()),
                        mlir::getAffineDimExpr(0, im.context()),
                        mlir::getAffineDimExpr(1, im.context())},
                       im.context());
    const AffineMap to_out =
        AffineMap::get(3, 0,
                       {mlir::getAffineDimExpr(0, im.context()),
                        mlir::getAffineDimExpr(1, im.context())},
                       im.context());
    acc = Generic(im, products, acc, {batch_first, to_out},
                  {IteratorType::parallel, IteratorType::parallel,
                   IteratorType::reduction},
                  [&](OpBuilder& b, Location l, ValueRange args) {
                    // int8/int16/uint8 products are stored narrow: widen them
                    // (wrap-around makes where they are cut irrelevant).
                    Value v = Add(b, l, args[1],
                                  Mul(b, l, im.ToCompute(b, args[0], compute),
                                      im.ComputeConstant(b, alpha, dtype)));
                    if (half) {
                      v = im.ToCompute(b, im.FromCompute(b, v, dtype), dtype);
                    }
                    return llvm::SmallVector<Value>{v};
                  })[0];
  }
  im.Define(node.outputs(0), Finalize(im, node, 0, acc));
  return absl::OkStatus();
}

absl::Status ConvertTrilinear(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckArity(node, 3, 1); !s.ok()) return s;
  if (absl::Status s = CheckSameDTypes(im, node); !s.ok()) return s;
  const ir::DType dtype = node.outputs(0).type().dtype();
  if (dtype == ir::BOOL) {
    return absl::UnimplementedError(
        "The following operators are not implemented: ['_trilinear' on "
        "bool]");
  }
  std::vector<std::vector<int64_t>> expand(3);
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<std::vector<int64_t>> e =
        IntListAttr(node, absl::StrCat("expand", i + 1));
    if (!e.ok()) return e.status();
    expand[i] = *e;
  }
  absl::StatusOr<std::vector<int64_t>> sumdim = IntListAttr(node, "sumdim");
  if (!sumdim.ok()) return sumdim.status();
  const int total = im.TypeOf(node.inputs(0)).shape_size() + expand[0].size();
  // Each input's dims in the loop space, and the loop sizes.
  Shape loop(total, 1);
  std::vector<AffineMap> maps;
  std::vector<Shape> in_shapes;
  for (int i = 0; i < 3; ++i) {
    const Shape s = ShapeOf(im.TypeOf(node.inputs(i)));
    std::vector<bool> expanded(total, false);
    for (int64_t d : expand[i]) {
      if (d < 0 || d >= total) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "op _trilinear: expand%d dim %d out of range [0, %d)", i + 1, d,
            total));
      }
      expanded[d] = true;
    }
    if (static_cast<int>(s.size() + expand[i].size()) != total) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "op _trilinear: input %d of rank %d with %d expanded dims does not "
          "have %d dims",
          i + 1, s.size(), expand[i].size(), total));
    }
    int k = 0;
    for (int d = 0; d < total; ++d) {
      if (expanded[d]) continue;
      if (loop[d] != 1 && s[k] != 1 && s[k] != loop[d]) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "op _trilinear: sizes of dim %d do not match (%d and %d)", d,
            loop[d], s[k]));
      }
      if (s[k] != 1) loop[d] = s[k];
      ++k;
    }
    in_shapes.push_back(s);
  }
  for (int i = 0; i < 3; ++i) {
    std::vector<bool> expanded(total, false);
    for (int64_t d : expand[i]) expanded[d] = true;
    std::vector<mlir::AffineExpr> exprs;
    int k = 0;
    for (int d = 0; d < total; ++d) {
      if (expanded[d]) continue;
      exprs.push_back(in_shapes[i][k] == loop[d] || loop[d] == 1
                          ? mlir::getAffineDimExpr(d, im.context())
                          : mlir::getAffineConstantExpr(0, im.context()));
      ++k;
    }
    maps.push_back(AffineMap::get(total, 0, exprs, im.context()));
  }
  std::vector<bool> reduced(total, false);
  for (int64_t d : *sumdim) {
    if (d < 0 || d >= total) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "op _trilinear: sumdim %d out of range [0, %d)", d, total));
    }
    reduced[d] = true;
  }
  const Shape out_shape = ReducedShape(loop, reduced, false);
  if (absl::Status s = CheckOutputShape(node, 0, out_shape); !s.ok()) {
    return s;
  }
  maps.push_back(ReducedMap(im, reduced, false));
  std::vector<Value> inputs;
  for (int i = 0; i < 3; ++i) inputs.push_back(im.ValueOf(node.inputs(i)));
  Value acc = Generic(im, inputs, Filled(im, out_shape, Zero(im, dtype)), maps,
                      Iterators(reduced),
                      [&](OpBuilder& b, Location l, ValueRange args) {
                        Value p = Mul(b, l, im.ToCompute(b, args[0], dtype),
                                      im.ToCompute(b, args[1], dtype));
                        p = Mul(b, l, p, im.ToCompute(b, args[2], dtype));
                        return llvm::SmallVector<Value>{Add(b, l, args[3], p)};
                      })[0];
  im.Define(node.outputs(0), Finalize(im, node, 0, acc));
  return absl::OkStatus();
}

}  // namespace

void RegisterLinalgOps(OpConverterTable& table) {
  table["addmv"] = &ConvertAddmv;
  table["addbmm"] = &ConvertAddbmm;
  table["_trilinear"] = &ConvertTrilinear;
}

}  // namespace rbln::compiler
