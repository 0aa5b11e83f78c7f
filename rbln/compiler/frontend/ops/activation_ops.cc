// Activations that PyTorch's core ATen decompositions keep as ops: hardtanh
// (and relu6, which decomposes to it), elu (and selu, celu's expm1 form) and
// leaky_relu. One linalg.generic each; half types compute in f32 and round
// once, as ATen's CPU kernels (Activation.cpp, Elu.h) do.
//
// IR conventions: one tensor input and the schema's scalars:
//   hardtanh(x) "min_val"=-1, "max_val"=1: clamp(x, min_val, max_val), also
//     on integers (bounds cast to the dtype), NaN stays NaN;
//   elu(x) "alpha"=1, "scale"=1, "input_scale"=1:
//     x < 0 ? expm1(x * input_scale) * (alpha * scale) : x * scale;
//   leaky_relu(x) "negative_slope"=0.01: x > 0 ? x : x * negative_slope.
// elu and leaky_relu take floating dtypes only, as PyTorch.
#include "absl/status/status.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "rbln/compiler/frontend/graph_importer.h"
#include "rbln/compiler/frontend/ops/elementwise_util.h"
#include "rbln/compiler/frontend/ops/op_families.h"

namespace rbln::compiler {
namespace elementwise {
namespace {

using ::mlir::Location;
using ::mlir::OpBuilder;
using ::mlir::Value;

absl::Status CheckFloatActivation(const ir::Node& node) {
  if (absl::Status s = CheckUnary(node); !s.ok()) return s;
  if (!IsFloat(OutDType(node))) return NotImplementedFor(node, OutDType(node));
  return absl::OkStatus();
}

absl::Status ConvertHardtanh(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckUnary(node); !s.ok()) return s;
  const ir::DType out = OutDType(node);
  if (out == ir::BOOL) return NotImplementedFor(node, out);
  const double lo = FloatAttr(node, "min_val", -1.0);
  const double hi = FloatAttr(node, "max_val", 1.0);
  return EmitUnary(im, node, [&](OpBuilder& b, Location l, Value x) {
    ir::Attribute lo_attr, hi_attr;
    lo_attr.set_f(lo);
    hi_attr.set_f(hi);
    Value min = ScalarOperand(im, b, l, lo_attr, out, /*round=*/true);
    Value max = ScalarOperand(im, b, l, hi_attr, out, /*round=*/true);
    return ClampValue(b, l, x, min, max);
  });
}

absl::Status ConvertElu(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckFloatActivation(node); !s.ok()) return s;
  // ATen's coefficients, in float (its MathT for every floating dtype here).
  const float alpha = FloatAttr(node, "alpha", 1.0);
  const float scale = FloatAttr(node, "scale", 1.0);
  const float input_scale = FloatAttr(node, "input_scale", 1.0);
  const float negative_coefficient = alpha * scale;
  return EmitUnary(im, node, [&](OpBuilder& b, Location l, Value x) {
    auto c = [&](double v) { return Constant(b, l, x.getType(), v); };
    Value expm1 = CallFunction(im, b, l, "expm1f", x.getType(),
                               Mul(b, l, x, c(input_scale)));
    Value negative = Mul(b, l, expm1, c(negative_coefficient));
    return Select(b, l, Compare(b, l, Cmp::kLt, x, c(0)), negative,
                  Mul(b, l, x, c(scale)));
  });
}

absl::Status ConvertLeakyRelu(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckFloatActivation(node); !s.ok()) return s;
  const float slope = FloatAttr(node, "negative_slope", 0.01);
  return EmitUnary(im, node, [&](OpBuilder& b, Location l, Value x) {
    Value zero = Constant(b, l, x.getType(), 0);
    return Select(b, l, Compare(b, l, Cmp::kGt, x, zero), x,
                  Mul(b, l, x, Constant(b, l, x.getType(), slope)));
  });
}

void Register(OpConverterTable& table) {
  table["hardtanh"] = &ConvertHardtanh;
  table["elu"] = &ConvertElu;
  table["leaky_relu"] = &ConvertLeakyRelu;
}

}  // namespace
}  // namespace elementwise

void RegisterActivationOps(OpConverterTable& table) {
  elementwise::Register(table);
}

}  // namespace rbln::compiler
