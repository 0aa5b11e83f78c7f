// Unary math: trigonometric, hyperbolic, exponential/logarithmic, error and
// gamma functions, Bessel functions, rounding, sign and classification.
// One linalg.generic each (elementwise_util.h); half types compute in f32 and
// round once, as PyTorch's CPU kernels do.
//
// - Floating ops take any input dtype and give a float output; integer and
//   bool inputs compute in f32 (PyTorch promotes them to float32).
//   Functions come from MLIR's math dialect where its LLVM lowering calls the
//   libm function (sin, cos, tan, atan, erf, exp2, log2, log10); the rest
//   call libm directly (asinf, sinhf, ..., and expm1f/log1pf, which MLIR 16
//   lowers as exp(x) - 1 and log(1 + x), losing small values) or the special
//   functions of special_math.h (lgamma, digamma, polygamma, erfinv, the
//   Bessel functions).
// - sign/sgn, trunc and round keep integer dtypes (round's "decimals" is
//   float-only, as in PyTorch); sign of bool is the bool; frac is float-only.
// - signbit, isnan, isinf, isfinite, isposinf, isneginf give bool for every
//   input dtype.
//
// IR conventions: one tensor input; polygamma(x) "n" (the derivative's
// order); round(x) "decimals" optional.
#include <cmath>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "rbln/compiler/frontend/graph_importer.h"
#include "rbln/compiler/frontend/ops/elementwise_util.h"
#include "rbln/compiler/frontend/ops/op_families.h"

namespace rbln::compiler {
namespace elementwise {
namespace {

namespace arith = ::mlir::arith;
namespace math = ::mlir::math;
using ::mlir::Location;
using ::mlir::OpBuilder;
using ::mlir::Type;
using ::mlir::Value;
using ::mlir::ValueRange;

constexpr double kPi = 3.14159265358979323846;

// --- Floating results. ---

template <typename MathOp>
absl::Status ConvertMathOp(GraphImporter& im, const ir::Node& node) {
  return ConvertFloating(im, node, [](OpBuilder& b, Location l, Value x) {
    return b.create<MathOp>(l, x).getResult();
  });
}

// `name`(x) on f32, a libm or special_math.h function.
absl::Status ConvertFloatCall(GraphImporter& im, const ir::Node& node,
                              const char* name) {
  return ConvertFloating(im, node, [&im, name](OpBuilder& b, Location l,
                                               Value x) {
    return CallFunction(im, b, l, name, b.getF32Type(), x);
  });
}

// The libm (or special_math.h) function of each call-based op.
struct FloatFunction {
  const char* op;
  const char* function;
};
constexpr FloatFunction kFloatFunctions[] = {
    {"asin", "asinf"},
    {"acos", "acosf"},
    {"sinh", "sinhf"},
    {"cosh", "coshf"},
    {"asinh", "asinhf"},
    {"acosh", "acoshf"},
    {"atanh", "atanhf"},
    {"erfc", "erfcf"},
    {"expm1", "expm1f"},
    {"log1p", "log1pf"},
    {"lgamma", "rbln_lgammaf"},
    {"digamma", "rbln_digammaf"},
    {"erfinv", "rbln_erfinvf"},
    {"i0", "rbln_i0f"},
    {"special_i0e", "rbln_i0ef"},
    {"special_i1", "rbln_i1f"},
    {"special_i1e", "rbln_i1ef"},
};

absl::Status ConvertFloatFunction(GraphImporter& im, const ir::Node& node) {
  for (const FloatFunction& f : kFloatFunctions) {
    if (node.op() == f.op) return ConvertFloatCall(im, node, f.function);
  }
  return absl::InternalError("no function for op " + node.op());
}

// polygamma(x) "n": psi's n-th derivative, n >= 0.
absl::Status ConvertPolygamma(GraphImporter& im, const ir::Node& node) {
  if (!HasAttr(node, "n")) {
    return absl::InvalidArgumentError(
        "op polygamma needs the attr n (the derivative's order)");
  }
  const int64_t n = IntAttr(node, "n", 0);
  if (n < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "polygamma(n, x) does not support negative n (got n = %d)", n));
  }
  return ConvertFloating(im, node, [&](OpBuilder& b, Location l, Value x) {
    Value order = IntConstant(b, l, b.getI64Type(), n);
    return CallFunction(im, b, l, "rbln_polygammaf", b.getF32Type(),
                        {order, x});
  });
}

absl::Status ConvertReciprocal(GraphImporter& im, const ir::Node& node) {
  return ConvertFloating(im, node, [](OpBuilder& b, Location l, Value x) {
    return b.create<arith::DivFOp>(l, Constant(b, l, x.getType(), 1), x)
        .getResult();
  });
}

// angle of a real number: pi for negative values, NaN stays NaN, else 0.
absl::Status ConvertAngle(GraphImporter& im, const ir::Node& node) {
  return ConvertFloating(im, node, [](OpBuilder& b, Location l, Value x) {
    Type f32 = x.getType();
    Value angle = Select(b, l, Compare(b, l, Cmp::kLt, x, Constant(b, l, f32, 0)),
                         Constant(b, l, f32, kPi), Constant(b, l, f32, 0));
    return Select(b, l, IsNaN(b, l, x), x, angle);
  });
}

// --- Rounding and sign. ---

// sign = (0 < x) - (x < 0): NaN and -0 give +0; bool stays itself.
absl::Status ConvertSign(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckUnary(node); !s.ok()) return s;
  if (OutDType(node) == ir::BOOL) {
    return EmitUnary(im, node, [](OpBuilder&, Location, Value x) { return x; });
  }
  return EmitUnary(im, node, [](OpBuilder& b, Location l, Value x) {
    Type t = x.getType();
    Value zero = Constant(b, l, t, 0);
    return Select(b, l, Compare(b, l, Cmp::kGt, x, zero), Constant(b, l, t, 1),
                  Select(b, l, Compare(b, l, Cmp::kLt, x, zero),
                         Constant(b, l, t, -1), zero));
  });
}

// trunc and round of an integer is the integer.
template <typename MathOp>
absl::Status ConvertIntegerPreservingRounding(GraphImporter& im,
                                              const ir::Node& node) {
  return ConvertNumeric(im, node, [](OpBuilder& b, Location l, Value x) {
    if (!IsFp(x)) return x;
    return b.create<MathOp>(l, x).getResult();
  });
}

// round(x): to nearest, ties to even (std::nearbyint). With "decimals" d
// (float dtypes only), ATen's round_decimals in f32: nearbyint(x * 10^d) /
// 10^d, or nearbyint(x / 10^-d) * 10^-d for negative d.
absl::Status ConvertRound(GraphImporter& im, const ir::Node& node) {
  if (!HasAttr(node, "decimals")) {
    return ConvertIntegerPreservingRounding<math::RoundEvenOp>(im, node);
  }
  if (absl::Status s = CheckUnary(node); !s.ok()) return s;
  const ir::DType out = OutDType(node);
  if (!IsFloat(out)) return NotImplementedFor(node, out);
  const int64_t decimals = IntAttr(node, "decimals", 0);
  const bool negative = decimals < 0;
  const float ten_pow = static_cast<float>(
      std::pow(10.0, static_cast<double>(negative ? -decimals : decimals)));
  return EmitUnary(im, node, [&](OpBuilder& b, Location l, Value x) {
    Value scale = Constant(b, l, x.getType(), ten_pow);
    if (negative) {
      Value q = b.create<arith::DivFOp>(l, x, scale);
      return Mul(b, l, b.create<math::RoundEvenOp>(l, q), scale);
    }
    Value r = b.create<math::RoundEvenOp>(l, Mul(b, l, x, scale));
    return b.create<arith::DivFOp>(l, r, scale).getResult();
  });
}

// frac = x - trunc(x) (inf gives NaN); floats only, as in PyTorch.
absl::Status ConvertFrac(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckUnary(node); !s.ok()) return s;
  const ir::DType out = OutDType(node);
  if (!IsFloat(out)) return NotImplementedFor(node, out);
  return EmitUnary(im, node, [](OpBuilder& b, Location l, Value x) {
    return Sub(b, l, x, b.create<math::TruncOp>(l, x));
  });
}

// --- Predicates on the value's class (bool results). ---

enum class FloatClass { kNaN, kInf, kFinite, kPosInf, kNegInf, kSignBit };

// The class test on an f32 (a widened half keeps its class and sign) on its
// bits, which vectorizes; integer inputs are never NaN or infinite.
Value ClassTest(OpBuilder& b, Location l, Value x, FloatClass c) {
  auto i32 = [&](int64_t v) { return IntConstant(b, l, b.getI32Type(), v); };
  if (!IsFp(x)) {
    switch (c) {
      case FloatClass::kFinite:
        return IntConstant(b, l, b.getI1Type(), 1);
      case FloatClass::kSignBit:
        return Compare(b, l, Cmp::kLt, x, Constant(b, l, x.getType(), 0));
      default:
        return IntConstant(b, l, b.getI1Type(), 0);
    }
  }
  Value bits = b.create<arith::BitcastOp>(l, b.getI32Type(), x);
  Value magnitude = b.create<arith::AndIOp>(l, bits, i32(0x7fffffff));
  const Value inf = i32(0x7f800000);
  switch (c) {
    case FloatClass::kNaN:
      return Compare(b, l, Cmp::kGt, magnitude, inf);
    case FloatClass::kInf:
      return Compare(b, l, Cmp::kEq, magnitude, inf);
    case FloatClass::kFinite:
      return Compare(b, l, Cmp::kLt, magnitude, inf);
    case FloatClass::kPosInf:
      return Compare(b, l, Cmp::kEq, bits, inf);
    case FloatClass::kNegInf:
      return Compare(b, l, Cmp::kEq, bits, i32(0xff800000));
    case FloatClass::kSignBit:
      return Compare(b, l, Cmp::kLt, bits, i32(0));
  }
  return Value();
}

template <FloatClass kClass>
absl::Status ConvertClassTest(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckUnary(node); !s.ok()) return s;
  const ir::DType out = OutDType(node);
  return Emit(im, node, InputDTypes(im, node),
              [&](OpBuilder& b, Location l, ValueRange x) {
                return FromBool(im, b, l, ClassTest(b, l, x[0], kClass), out);
              });
}

void Register(OpConverterTable& table) {
  table["sin"] = &ConvertMathOp<math::SinOp>;
  table["cos"] = &ConvertMathOp<math::CosOp>;
  table["tan"] = &ConvertMathOp<math::TanOp>;
  table["atan"] = &ConvertMathOp<math::AtanOp>;
  table["erf"] = &ConvertMathOp<math::ErfOp>;
  table["exp2"] = &ConvertMathOp<math::Exp2Op>;
  table["log2"] = &ConvertMathOp<math::Log2Op>;
  table["log10"] = &ConvertMathOp<math::Log10Op>;
  for (const FloatFunction& f : kFloatFunctions) {
    table[f.op] = &ConvertFloatFunction;
  }
  table["polygamma"] = &ConvertPolygamma;
  table["reciprocal"] = &ConvertReciprocal;
  table["angle"] = &ConvertAngle;
  table["sign"] = &ConvertSign;
  table["sgn"] = &ConvertSign;
  table["trunc"] = &ConvertIntegerPreservingRounding<math::TruncOp>;
  table["round"] = &ConvertRound;
  table["frac"] = &ConvertFrac;
  table["isnan"] = &ConvertClassTest<FloatClass::kNaN>;
  table["isinf"] = &ConvertClassTest<FloatClass::kInf>;
  table["isfinite"] = &ConvertClassTest<FloatClass::kFinite>;
  table["isposinf"] = &ConvertClassTest<FloatClass::kPosInf>;
  table["isneginf"] = &ConvertClassTest<FloatClass::kNegInf>;
  table["signbit"] = &ConvertClassTest<FloatClass::kSignBit>;
}

}  // namespace
}  // namespace elementwise

void RegisterUnaryMathOps(OpConverterTable& table) {
  elementwise::Register(table);
}

}  // namespace rbln::compiler
