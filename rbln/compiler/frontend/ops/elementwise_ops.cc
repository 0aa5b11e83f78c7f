// Element-wise ops: one linalg.generic each, NumPy broadcasting, computed in
// f32 for half types and rounded once (as PyTorch's CPU kernels do).
//
// IR conventions (graph op names are ATen base names):
// - Binary ops take two tensor inputs, or one tensor input and a scalar
//   operand attribute (elementwise_util.h): "other" (pow: "exponent") for
//   the second operand, "self" for the first (rsub's sub(1, x)).
// - Arithmetic computes in the output's compute type; inputs are converted to
//   it and a scalar keeps its value in f32 (PyTorch's opmath scalar).
//   Comparisons and logical ops produce 0/1 in the output type (normally
//   bool) and compare in the compute type of the inputs' promoted dtype, with
//   a scalar first rounded to that dtype.
// - NaN behaves as in PyTorch. MLIR 16 lowers arith.maxf/minf to llvm.maxnum
//   and llvm.minnum, which drop NaN, so maximum, minimum, clamp and relu are
//   compares and selects here.
// - Integer division by zero cannot raise from a kernel: it gives 0 (PyTorch
//   raises ZeroDivisionError; callers that care check first).
// - clamp(x) "min"/"max" (scalars), clamp(x, min, max) (tensors);
//   clamp_min(x, min) / clamp_max(x, max) with a tensor or a scalar "min" /
//   "max". A one-sided tensor clamp reaches the compiler as clamp_min or
//   clamp_max (the torch.compile backend rewrites it so).
// - copy(x) casts x; copy(dst, src) is src broadcast and cast to dst's shape
//   and dtype (the functional form of dst.copy_(src)).
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "rbln/compiler/frontend/graph_importer.h"
#include "rbln/compiler/frontend/ops/elementwise_util.h"
#include "rbln/compiler/frontend/ops/op_families.h"
#include "rbln/compiler/ir/graph_util.h"

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

// --- Arithmetic. ---

// Bool add: logical or of the operands (a scalar operand tested for
// nonzero), the second one dropped by a zero alpha.
absl::Status ConvertBoolAdd(GraphImporter& im, const ir::Node& node,
                            const ir::Attribute* alpha) {
  for (ir::DType t : InputDTypes(im, node)) {
    if (t != ir::BOOL) return NotImplementedFor(node, t);
  }
  // A bool or int alpha (a float one was refused): a + alpha * b stored as
  // bool is a | b for a nonzero alpha, a for alpha 0.
  const bool keep_rhs = alpha == nullptr || AsDouble(*alpha) != 0;
  const ir::Attribute* self = ScalarSelf(node);
  const ir::Attribute* other = ScalarOther(node);
  return Emit(im, node, InputDTypes(im, node),
              [&](OpBuilder& b, Location l, ValueRange x) {
                auto bit = [&](const ir::Attribute* scalar, Value v) {
                  return scalar != nullptr
                             ? IntConstant(b, l, b.getI1Type(),
                                           AsDouble(*scalar) != 0)
                             : NonZero(b, l, v);
                };
                Value lhs = bit(self, x[0]);
                Value rhs = bit(other, x[x.size() - 1]);
                rhs = b.create<arith::AndIOp>(
                    l, rhs, IntConstant(b, l, b.getI1Type(), keep_rhs));
                Value r = b.create<arith::OrIOp>(l, lhs, rhs);
                return FromBool(im, b, l, r, ir::BOOL);
              });
}

// add(a, b, alpha) = a + alpha * b and sub(a, b, alpha) = a - alpha * b as
// ATen's CPU kernels compute them (sub is add with -alpha):
// - half types cast alpha and a Python scalar operand to the dtype first;
//   the product of two half values is exact in f32, and the sum rounds once;
// - float32 fuses alpha * b + a into one rounding (ATen's vec::fmadd), so
//   the product is an explicit math.fma, never a contraction left to LLVM;
// - integers and bool take an int (or, bool only, a bool) alpha only;
//   integers compute a + alpha * b, wrapping;
// - bool add is logical or (a | (alpha != 0 & b)); bool sub is
//   not implemented (PyTorch raises).
absl::Status ConvertAddOrSub(GraphImporter& im, const ir::Node& node,
                             bool subtract) {
  if (absl::Status s = CheckBinary(node); !s.ok()) return s;
  const ir::DType out = OutDType(node);
  if (subtract && (out == ir::BOOL || absl::c_linear_search(
                                          InputDTypes(im, node), ir::BOOL))) {
    // PyTorch raises for it (before checking alpha); callers that fall back
    // to ATen get its message.
    return NotImplementedFor(node, ir::BOOL);
  }
  const ir::Attribute* alpha_attr = FindAttr(node, "alpha");
  // ATen's alpha_check, by the kind of Python scalar: producers write an int
  // alpha as an int attribute and a float one (even 2.0) as a float one.
  if (alpha_attr != nullptr &&
      alpha_attr->value_case() == ir::Attribute::kB && out != ir::BOOL) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "Boolean alpha only supported for Boolean results. (%s on %s got "
        "alpha=%s)",
        node.op(), DTypeText(out), alpha_attr->b() ? "True" : "False"));
  }
  if (alpha_attr != nullptr &&
      alpha_attr->value_case() == ir::Attribute::kF && !IsFloat(out)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "For integral input tensors, argument alpha must not be a floating "
        "point number. (%s on %s got alpha=%g; pass an integer alpha)",
        node.op(), DTypeText(out), alpha_attr->f()));
  }
  if (out == ir::BOOL) return ConvertBoolAdd(im, node, alpha_attr);
  double alpha = FloatAttr(node, "alpha", 1.0);
  if (subtract) alpha = -alpha;
  if (IsFloat(out)) alpha = RoundToDType(alpha, out);
  return EmitBinary(
      im, node, out, /*round_scalar=*/true,
      [&](OpBuilder& b, Location l, Value x, Value y) -> Value {
        if (alpha == 1.0) return Add(b, l, x, y);
        if (alpha == -1.0) return Sub(b, l, x, y);
        Value a = Constant(b, l, y.getType(), alpha);
        if (IsFp(x)) return b.create<math::FmaOp>(l, a, y, x);
        return Add(b, l, x, Mul(b, l, a, y));
      });
}

absl::Status ConvertAdd(GraphImporter& im, const ir::Node& node) {
  return ConvertAddOrSub(im, node, /*subtract=*/false);
}

absl::Status ConvertSub(GraphImporter& im, const ir::Node& node) {
  return ConvertAddOrSub(im, node, /*subtract=*/true);
}

// lerp(self, end, weight) with a Python scalar weight (the optimizers'
// exp_avg.lerp_(grad, 1 - beta1)) as ATen's CPU kernel computes it: in f32
// for the half types, self + w * (end - self) for |w| < 0.5 and
// end - (end - self) * (1 - w) otherwise, so that w = 1 gives end exactly.
// A tensor weight is not supported (callers fall back).
absl::Status ConvertLerp(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckArity(node, 2, 1); !s.ok()) return s;
  const ir::Attribute* weight_attr = FindAttr(node, "weight");
  if (weight_attr == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s takes a scalar attribute \"weight\" (a tensor weight is not "
        "supported)",
        node.op()));
  }
  const ir::DType out = OutDType(node);
  if (!IsFloat(out)) return NotImplementedFor(node, out);
  // ATen's opmath weight: the scalar as a float.
  const float weight = static_cast<float>(AsDouble(*weight_attr));
  return Emit(im, node, {out, out},
              [&](OpBuilder& b, Location l, ValueRange x) -> Value {
                Type t = x[0].getType();
                Value diff = Sub(b, l, x[1], x[0]);
                if (std::abs(weight) < 0.5f) {
                  return Add(b, l, x[0], Mul(b, l, Constant(b, l, t, weight), diff));
                }
                return Sub(b, l, x[1],
                           Mul(b, l, diff, Constant(b, l, t, 1.0f - weight)));
              });
}

// On bool (0/1 in i8) the product is logical and, as in PyTorch.
absl::Status ConvertMul(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckBinary(node); !s.ok()) return s;
  return EmitArithmetic(im, node, &Mul);
}

// addcdiv(x, t1, t2) "value"=1: x + value * t1 / t2 as ATen's CPU kernel
// computes it, left to right in f32 with value as a float (not rounded to a
// half dtype) and one rounding at the end; PyTorch's decomposition rounds
// t1 / t2 to the half dtype first. Floating dtypes only (PyTorch refuses
// integer division here).
absl::Status ConvertAddcdiv(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckArity(node, 3, 1); !s.ok()) return s;
  const ir::DType out = OutDType(node);
  if (!IsFloat(out)) return NotImplementedFor(node, out);
  const double value = FloatAttr(node, "value", 1.0);
  return Emit(im, node, {out, out, out},
              [&](OpBuilder& b, Location l, ValueRange x) -> Value {
                Value scaled = Mul(b, l, Constant(b, l, x[1].getType(), value),
                                   x[1]);
                return Add(b, l, x[0],
                           b.create<arith::DivFOp>(l, scaled, x[2]));
              });
}

// Integer a / b rounded toward zero; `y` is never 0 (CheckedDivisor).
// INT_MIN / -1 wraps, where the hardware would trap.
Value TruncDivInt(OpBuilder& b, Location l, Value x, Value y) {
  Type t = x.getType();
  Value zero = IntConstant(b, l, t, 0), one = IntConstant(b, l, t, 1);
  Value by_minus_one = Compare(b, l, Cmp::kEq, y, IntConstant(b, l, t, -1));
  Value q = b.create<arith::DivSIOp>(l, x, Select(b, l, by_minus_one, one, y));
  return Select(b, l, by_minus_one, Sub(b, l, zero, x), q);
}

// Integer floor division: the truncated quotient, one less when the
// remainder is nonzero and its sign differs from the divisor's. `y` is
// never 0 (CheckedDivisor).
Value FloorDivInt(OpBuilder& b, Location l, Value x, Value y) {
  Type t = x.getType();
  Value zero = IntConstant(b, l, t, 0);
  Value q = TruncDivInt(b, l, x, y);
  Value r = Sub(b, l, x, Mul(b, l, q, y));
  Value adjust = b.create<arith::AndIOp>(
      l, Compare(b, l, Cmp::kNe, r, zero),
      Compare(b, l, Cmp::kNe, Compare(b, l, Cmp::kLt, r, zero),
              Compare(b, l, Cmp::kLt, y, zero)));
  return Select(b, l, adjust, Sub(b, l, q, IntConstant(b, l, t, 1)), q);
}

// Rounds an f32 compute value to the half type the op computes in, or
// leaves it alone (identity) where ATen computes in float32.
using RoundFn = std::function<Value(OpBuilder&, Value)>;

// c10::div_floor_floating: floor of the exact quotient, computed from fmod so
// that it is right where floor(a / b) is off by one after rounding. `round`
// is applied after every step that ATen evaluates in the tensor's dtype
// (fmod is exact in any format, floor of a representable value too).
Value FloorDivFloat(OpBuilder& b, Location l, Value x, Value y,
                    const RoundFn& round) {
  Type f32 = b.getF32Type();
  Value zero = Constant(b, l, f32, 0), one = Constant(b, l, f32, 1);
  Value quotient = b.create<arith::DivFOp>(l, x, y);
  Value mod = b.create<arith::RemFOp>(l, x, y);
  Value div =
      round(b, b.create<arith::DivFOp>(l, round(b, Sub(b, l, x, mod)), y));
  Value mod_sign_differs = b.create<arith::AndIOp>(
      l, Compare(b, l, Cmp::kNe, mod, zero),
      b.create<arith::XOrIOp>(l, Compare(b, l, Cmp::kLt, y, zero),
                              Compare(b, l, Cmp::kLt, mod, zero)));
  div = Select(b, l, mod_sign_differs, round(b, Sub(b, l, div, one)), div);
  Value floor = b.create<math::FloorOp>(l, div);
  Value half = Constant(b, l, f32, 0.5);
  floor = Select(b, l,
                 Compare(b, l, Cmp::kGt, round(b, Sub(b, l, div, floor)), half),
                 round(b, Add(b, l, floor, one)), floor);
  Value signed_zero = b.create<math::CopySignOp>(l, zero, quotient);
  Value result =
      Select(b, l, Compare(b, l, Cmp::kNe, div, zero), floor, signed_zero);
  return Select(b, l, Compare(b, l, Cmp::kEq, y, zero), quotient, result);
}

// Whether the divisor of a div node is one value: a Python scalar or a
// one-element tensor. ATen then takes the divisor out of the loop
// (TensorIterator's is_scalar) and computes a half-precision rounding
// division entirely in float32; otherwise its Vectorized<Half> arithmetic
// rounds every step to the tensor's dtype.
bool HasScalarDivisor(const GraphImporter& im, const ir::Node& node) {
  if (ScalarOther(node) != nullptr) return true;
  int64_t n = 1;
  for (int64_t d : im.TypeOf(node.inputs(node.inputs_size() - 1)).shape()) {
    n *= d;
  }
  return n == 1;
}

// div: true division, or "rounding_mode" = "trunc" / "floor". For half
// types the rounding modes follow ATen's two CPU paths (HasScalarDivisor).
absl::Status ConvertDiv(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckBinary(node); !s.ok()) return s;
  const ir::DType out = OutDType(node);
  const std::string mode = StringAttr(node, "rounding_mode", "");
  RoundFn round = [](OpBuilder&, Value v) { return v; };
  if (IsHalf(out) && !HasScalarDivisor(im, node)) {
    round = [&im, out](OpBuilder& b, Value v) {
      return im.ToCompute(b, im.FromCompute(b, v, out), out);
    };
  }
  BinaryFn fn;
  if (mode.empty()) {
    if (!IsFloat(out)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "div without rounding_mode is true division; its output must be "
          "floating point, not %s",
          DTypeText(out)));
    }
    fn = [](OpBuilder& b, Location l, Value x, Value y) -> Value {
      return b.create<arith::DivFOp>(l, x, y);
    };
  } else if (mode == "trunc") {
    fn = [&im, &round](OpBuilder& b, Location l, Value x, Value y) -> Value {
      if (!IsFp(x)) return TruncDivInt(b, l, x, im.CheckedDivisor(b, y));
      // E.g. f16 138.95 / 1 -> 139.0 -> 139, not 138.
      Value quotient = round(b, b.create<arith::DivFOp>(l, x, y));
      return b.create<math::TruncOp>(l, quotient);
    };
  } else if (mode == "floor") {
    fn = [&im, &round](OpBuilder& b, Location l, Value x, Value y) -> Value {
      return IsFp(x) ? FloorDivFloat(b, l, x, y, round)
                     : FloorDivInt(b, l, x, im.CheckedDivisor(b, y));
    };
  } else {
    return absl::InvalidArgumentError(absl::StrFormat(
        "div expected rounding_mode to be one of None, 'trunc', or 'floor' "
        "but found '%s'",
        mode));
  }
  if (out == ir::BOOL) return NotImplementedFor(node, out);
  // A zero Python-scalar divisor is known now: fail before native code runs,
  // so nothing is written to the caller's output (an empty output divides
  // nothing, and ATen does not raise for it either).
  const ir::Attribute* other = ScalarOther(node);
  const bool empty_output =
      absl::c_linear_search(ShapeOf(node.outputs(0).type()), 0);
  if (!mode.empty() && !IsFloat(out) && other != nullptr &&
      AsDouble(*other) == 0 && !empty_output) {
    return absl::UnknownError(absl::StrFormat(
        "ZeroDivisionError: integer division by zero in div (output %%%s): "
        "the divisor is the scalar 0",
        node.outputs(0).name()));
  }
  return EmitArithmetic(im, node, fn);
}

// PyTorch's powi: square-and-multiply with wrapping products; a negative
// exponent gives 1 for base 1, +-1 for base -1 and 0 otherwise.
Value IntPow(OpBuilder& b, Location l, Value base, Value exp) {
  Type t = base.getType();
  Value zero = IntConstant(b, l, t, 0), one = IntConstant(b, l, t, 1);
  Value minus_one = IntConstant(b, l, t, -1);
  Value negative = Compare(b, l, Cmp::kLt, exp, zero);
  auto loop = b.create<mlir::scf::WhileOp>(
      l, mlir::TypeRange{t, t, t},
      ValueRange{one, base, Select(b, l, negative, zero, exp)},
      [&](OpBuilder& b, Location l, ValueRange args) {
        b.create<mlir::scf::ConditionOp>(
            l, Compare(b, l, Cmp::kNe, args[2], zero), args);
      },
      [&](OpBuilder& b, Location l, ValueRange args) {
        Value result = args[0], x = args[1], e = args[2];
        Value odd =
            Compare(b, l, Cmp::kNe, b.create<arith::AndIOp>(l, e, one), zero);
        result = Select(b, l, odd, Mul(b, l, result, x), result);
        b.create<mlir::scf::YieldOp>(
            l, ValueRange{result, Mul(b, l, x, x),
                          b.create<arith::ShRUIOp>(l, e, one)});
      });
  Value odd_exp =
      Compare(b, l, Cmp::kNe, b.create<arith::AndIOp>(l, exp, one), zero);
  Value inverse = Select(b, l, Compare(b, l, Cmp::kEq, base, one), one,
                         Select(b, l, Compare(b, l, Cmp::kEq, base, minus_one),
                                Select(b, l, odd_exp, minus_one, one), zero));
  return Select(b, l, negative, inverse, loop.getResult(0));
}

Value Reciprocal(OpBuilder& b, Location l, Value x) {
  return b.create<arith::DivFOp>(l, Constant(b, l, x.getType(), 1), x);
}

// pow(x, e) for a scalar exponent: PyTorch's float32 and bfloat16 kernels
// special-case a few exponents (which changes results at -0 and -inf); its
// float16 kernel always calls pow.
Value FloatPowScalar(OpBuilder& b, Location l, Value x, double e, ir::DType t) {
  if (t != ir::FLOAT16) {
    if (e == 0.5) return b.create<math::SqrtOp>(l, x);
    if (e == -0.5) return b.create<math::RsqrtOp>(l, x);
    if (e == -1.0) return Reciprocal(b, l, x);
    if (e == 2.0) return Mul(b, l, x, x);
    if (e == 3.0) return Mul(b, l, Mul(b, l, x, x), x);
    if (e == -2.0) return Reciprocal(b, l, Mul(b, l, x, x));
  }
  return b.create<math::PowFOp>(l, x, Constant(b, l, x.getType(), e));
}

absl::Status ConvertPow(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckBinary(node); !s.ok()) return s;
  const ir::DType out = OutDType(node);
  if (out == ir::BOOL) return NotImplementedFor(node, out);
  const ir::Attribute* other = ScalarOther(node);
  if (other != nullptr && IsFloat(out)) {
    // PyTorch casts the exponent to the tensor's dtype.
    const double e = RoundToDType(AsDouble(*other), out);
    return Emit(im, node, {out}, [&](OpBuilder& b, Location l, ValueRange x) {
      return FloatPowScalar(b, l, x[0], e, out);
    });
  }
  return EmitArithmetic(
      im, node, [](OpBuilder& b, Location l, Value x, Value y) -> Value {
        if (!IsFp(x)) return IntPow(b, l, x, y);
        return b.create<math::PowFOp>(l, x, y);
      });
}

// maximum/minimum propagate NaN; otherwise `x > y ? x : y` (for maximum),
// which returns y on ties of +0 and -0 as PyTorch's vectorized kernel does.
absl::Status ConvertMaxMin(GraphImporter& im, const ir::Node& node,
                           Cmp pick_x) {
  if (absl::Status s = CheckBinary(node); !s.ok()) return s;
  return EmitArithmetic(
      im, node, [pick_x](OpBuilder& b, Location l, Value x, Value y) {
        Value r = Select(b, l, Compare(b, l, pick_x, x, y), x, y);
        if (!IsFp(x)) return r;
        return Select(b, l, Unordered(b, l, x, y), NaN(b, l), r);
      });
}

absl::Status ConvertMaximum(GraphImporter& im, const ir::Node& node) {
  return ConvertMaxMin(im, node, Cmp::kGt);
}

absl::Status ConvertMinimum(GraphImporter& im, const ir::Node& node) {
  return ConvertMaxMin(im, node, Cmp::kLt);
}

// --- Comparisons and logic. ---

absl::Status ConvertComparison(GraphImporter& im, const ir::Node& node,
                               Cmp cmp) {
  if (absl::Status s = CheckBinary(node); !s.ok()) return s;
  const ir::DType operand = BinaryOperandDType(im, node);
  const ir::DType out = OutDType(node);
  return EmitBinary(im, node, operand, /*round_scalar=*/true,
                    [&](OpBuilder& b, Location l, Value x, Value y) {
                      return FromBool(im, b, l, Compare(b, l, cmp, x, y), out);
                    });
}

template <Cmp kCmp>
absl::Status ConvertCompare(GraphImporter& im, const ir::Node& node) {
  return ConvertComparison(im, node, kCmp);
}

// logical_and/or test each operand for nonzero in its own type.
absl::Status ConvertLogical(GraphImporter& im, const ir::Node& node,
                            bool is_and) {
  if (absl::Status s = CheckBinary(node); !s.ok()) return s;
  const ir::Attribute* self = ScalarSelf(node);
  const ir::Attribute* other = ScalarOther(node);
  const ir::DType out = OutDType(node);
  return Emit(im, node, InputDTypes(im, node),
              [&](OpBuilder& b, Location l, ValueRange x) {
                auto bit = [&](const ir::Attribute* scalar, Value v) {
                  return scalar != nullptr
                             ? IntConstant(b, l, b.getI1Type(),
                                           AsDouble(*scalar) != 0)
                             : NonZero(b, l, v);
                };
                Value lhs = bit(self, x[0]);
                Value rhs = bit(other, x[x.size() - 1]);
                Value r = is_and
                              ? b.create<arith::AndIOp>(l, lhs, rhs).getResult()
                              : b.create<arith::OrIOp>(l, lhs, rhs).getResult();
                return FromBool(im, b, l, r, out);
              });
}

absl::Status ConvertLogicalAnd(GraphImporter& im, const ir::Node& node) {
  return ConvertLogical(im, node, /*is_and=*/true);
}

absl::Status ConvertLogicalOr(GraphImporter& im, const ir::Node& node) {
  return ConvertLogical(im, node, /*is_and=*/false);
}

absl::Status ConvertLogicalNot(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckUnary(node); !s.ok()) return s;
  const ir::DType out = OutDType(node);
  return Emit(im, node, InputDTypes(im, node),
              [&](OpBuilder& b, Location l, ValueRange x) {
                Value zero = Constant(b, l, x[0].getType(), 0);
                return FromBool(im, b, l, Compare(b, l, Cmp::kEq, x[0], zero),
                                out);
              });
}

// where(cond, a, b): a and b in the output's type, cond tested as it is.
absl::Status ConvertWhere(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckArity(node, 3, 1); !s.ok()) return s;
  const ir::DType out = OutDType(node);
  const ir::DType cond = im.TypeOf(node.inputs(0)).dtype();
  return Emit(im, node, {cond, out, out},
              [](OpBuilder& b, Location l, ValueRange x) {
                return Select(b, l, NonZero(b, l, x[0]), x[1], x[2]);
              });
}

// masked_fill(x, mask) with attribute "value": value where mask is set.
absl::Status ConvertMaskedFill(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckArity(node, 2, 1); !s.ok()) return s;
  const ir::Attribute* value = FindAttr(node, "value");
  if (value == nullptr) {
    return absl::InvalidArgumentError(
        "masked_fill needs the attribute 'value'");
  }
  const ir::DType out = OutDType(node);
  const ir::DType mask = im.TypeOf(node.inputs(1)).dtype();
  return Emit(
      im, node, {out, mask}, [&](OpBuilder& b, Location l, ValueRange x) {
        // Rounded once more to the output by the generic.
        Value fill = ScalarOperand(im, b, l, *value, out, /*round=*/false);
        return Select(b, l, NonZero(b, l, x[1]), fill, x[0]);
      });
}

// --- Unary ops. ---


template <typename MathOp>
absl::Status ConvertMath(GraphImporter& im, const ir::Node& node) {
  return ConvertFloating(im, node, [](OpBuilder& b, Location l, Value x) {
    return b.create<MathOp>(l, x).getResult();
  });
}

absl::Status ConvertAbs(GraphImporter& im, const ir::Node& node) {
  return ConvertNumeric(
      im, node, [](OpBuilder& b, Location l, Value x) -> Value {
        if (IsFp(x)) return b.create<math::AbsFOp>(l, x);
        return b.create<math::AbsIOp>(l, x);  // Wraps at INT_MIN.
      });
}

absl::Status ConvertNeg(GraphImporter& im, const ir::Node& node) {
  return ConvertNumeric(im, node,
                        [](OpBuilder& b, Location l, Value x) -> Value {
                          if (IsFp(x)) return b.create<arith::NegFOp>(l, x);
                          return Sub(b, l, Constant(b, l, x.getType(), 0), x);
                        });
}

// ceil/floor of an integer is the integer.
template <typename MathOp>
absl::Status ConvertRounding(GraphImporter& im, const ir::Node& node) {
  return ConvertNumeric(im, node,
                        [](OpBuilder& b, Location l, Value x) -> Value {
                          if (IsFp(x)) return b.create<MathOp>(l, x);
                          return x;
                        });
}

// relu = clamp_min(x, 0): NaN and -0 pass through.
absl::Status ConvertRelu(GraphImporter& im, const ir::Node& node) {
  return ConvertNumeric(im, node, [](OpBuilder& b, Location l, Value x) {
    Value zero = Constant(b, l, x.getType(), 0);
    return Select(b, l, Compare(b, l, Cmp::kLt, x, zero), zero, x);
  });
}

// clamp(x) with scalar "min"/"max" (rounded to the tensor's dtype, as
// PyTorch casts them).
absl::Status ConvertScalarClamp(GraphImporter& im, const ir::Node& node,
                                const ir::Attribute* lo,
                                const ir::Attribute* hi) {
  if (lo == nullptr && hi == nullptr) {
    return absl::InvalidArgumentError(
        "torch.clamp: At least one of 'min' or 'max' must not be None");
  }
  const ir::DType out = OutDType(node);
  if (out == ir::BOOL) return NotImplementedFor(node, out);
  return EmitUnary(im, node, [&](OpBuilder& b, Location l, Value x) {
    auto bound = [&](const ir::Attribute* a) {
      return a != nullptr ? ScalarOperand(im, b, l, *a, out, /*round=*/true)
                          : Value();
    };
    return ClampValue(b, l, x, bound(lo), bound(hi));
  });
}

// Tensor bounds, all operands in the output's (promoted) dtype.
absl::Status ConvertTensorClamp(GraphImporter& im, const ir::Node& node,
                                bool has_lo, bool has_hi) {
  const ir::DType out = OutDType(node);
  return Emit(im, node, std::vector<ir::DType>(node.inputs_size(), out),
              [&](OpBuilder& b, Location l, ValueRange x) {
                Value lo = has_lo ? x[1] : Value();
                Value hi = has_hi ? x[has_lo ? 2 : 1] : Value();
                return ClampValue(b, l, x[0], lo, hi);
              });
}

absl::Status ConvertClamp(GraphImporter& im, const ir::Node& node) {
  if (node.inputs_size() == 1 && node.outputs_size() == 1) {
    return ConvertScalarClamp(im, node, FindAttr(node, "min"),
                              FindAttr(node, "max"));
  }
  if (node.inputs_size() == 2) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op clamp with one tensor bound is ambiguous (min or max?): pass it "
        "as clamp_min(x, min) or clamp_max(x, max) (node %%%s)",
        node.outputs(0).name()));
  }
  if (absl::Status s = CheckArity(node, 3, 1); !s.ok()) return s;
  // PyTorch's clamp_cpu has no bool kernel.
  if (OutDType(node) == ir::BOOL) return NotImplementedFor(node, ir::BOOL);
  return ConvertTensorClamp(im, node, /*has_lo=*/true, /*has_hi=*/true);
}

// clamp_min(x, min) / clamp_max(x, max): the bound a tensor or a scalar
// attribute.
template <bool kMin>
absl::Status ConvertOneSidedClamp(GraphImporter& im, const ir::Node& node) {
  const char* name = kMin ? "min" : "max";
  if (node.inputs_size() == 1 && node.outputs_size() == 1) {
    const ir::Attribute* bound = FindAttr(node, name);
    if (bound == nullptr) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "op %s needs the bound: a second tensor input or the attr %s",
          node.op(), name));
    }
    return ConvertScalarClamp(im, node, kMin ? bound : nullptr,
                              kMin ? nullptr : bound);
  }
  if (absl::Status s = CheckArity(node, 2, 1); !s.ok()) return s;
  return ConvertTensorClamp(im, node, kMin, !kMin);
}

Value Sigmoid(OpBuilder& b, Location l, Value x) {
  Value one = Constant(b, l, x.getType(), 1);
  Value e = b.create<math::ExpOp>(l, b.create<arith::NegFOp>(l, x));
  return b.create<arith::DivFOp>(l, one, Add(b, l, one, e));
}

// silu(x) = x / (1 + exp(-x)), PyTorch's form (not x * sigmoid(x)).
Value Silu(OpBuilder& b, Location l, Value x) {
  Value one = Constant(b, l, x.getType(), 1);
  Value e = b.create<math::ExpOp>(l, b.create<arith::NegFOp>(l, x));
  return b.create<arith::DivFOp>(l, x, Add(b, l, one, e));
}

// PyTorch's GeluKernel constants (M_SQRT1_2; M_SQRT2 * M_2_SQRTPI * 0.5).
constexpr double kSqrtHalf = 0.70710678118654752440;
constexpr double kGeluBeta =
    1.41421356237309504880 * 1.12837916709551257390 * 0.5;
constexpr double kGeluKappa = 0.044715;

// PyTorch's GeluKernel, in its order of operations.
absl::Status ConvertGelu(GraphImporter& im, const ir::Node& node) {
  const std::string approximate = StringAttr(node, "approximate", "none");
  if (approximate != "none" && approximate != "tanh") {
    return absl::InvalidArgumentError(
        "approximate argument must be either none or tanh.");
  }
  const bool tanh = approximate == "tanh";
  return ConvertFloating(im, node, [tanh](OpBuilder& b, Location l, Value x) {
    Type f32 = x.getType();
    Value half_x = Mul(b, l, x, Constant(b, l, f32, 0.5));
    Value one = Constant(b, l, f32, 1);
    Value t;
    if (tanh) {
      Value cube = Mul(b, l, Mul(b, l, x, x), x);
      Value kappa_cube = Mul(b, l, Constant(b, l, f32, kGeluKappa), cube);
      Value inner =
          Mul(b, l, Constant(b, l, f32, kGeluBeta), Add(b, l, x, kappa_cube));
      t = b.create<math::TanhOp>(l, inner);
    } else {
      t = b.create<math::ErfOp>(l,
                                Mul(b, l, x, Constant(b, l, f32, kSqrtHalf)));
    }
    return Mul(b, l, half_x, Add(b, l, one, t));
  });
}

// --- Casts and copies. ---

// to_dtype / _to_copy / copy / clone: the output type says the dtype.
// Float to integer truncates toward zero, anything to bool tests nonzero (NaN
// is true), integers wrap; half results round once from f32, so
// int -> f16 rounds through float, like c10::Half.
absl::Status ConvertCast(GraphImporter& im, const ir::Node& node) {
  if (node.op() == "copy" && node.inputs_size() == 2) {
    // copy(dst, src): only dst's shape and dtype (the output's) matter.
    ir::Node src = node;
    src.clear_inputs();
    src.add_inputs(node.inputs(1));
    return ConvertCast(im, src);
  }
  if (absl::Status s = CheckUnary(node); !s.ok()) return s;
  const ir::DType from = im.TypeOf(node.inputs(0)).dtype();
  const ir::DType to = OutDType(node);
  return Emit(im, node, {from}, [&](OpBuilder& b, Location l, ValueRange x) {
    if (to == ir::BOOL) return FromBool(im, b, l, NonZero(b, l, x[0]), to);
    return im.CastCompute(b, x[0], from, to);
  });
}

void Register(OpConverterTable& table) {
  table["add"] = &ConvertAdd;
  table["sub"] = &ConvertSub;
  table["mul"] = &ConvertMul;
  table["addcdiv"] = &ConvertAddcdiv;
  table["lerp"] = &ConvertLerp;
  table["div"] = &ConvertDiv;
  table["pow"] = &ConvertPow;
  table["maximum"] = &ConvertMaximum;
  table["minimum"] = &ConvertMinimum;
  table["eq"] = &ConvertCompare<Cmp::kEq>;
  table["ne"] = &ConvertCompare<Cmp::kNe>;
  table["lt"] = &ConvertCompare<Cmp::kLt>;
  table["le"] = &ConvertCompare<Cmp::kLe>;
  table["gt"] = &ConvertCompare<Cmp::kGt>;
  table["ge"] = &ConvertCompare<Cmp::kGe>;
  table["logical_and"] = &ConvertLogicalAnd;
  table["logical_or"] = &ConvertLogicalOr;
  table["logical_not"] = &ConvertLogicalNot;
  table["where"] = &ConvertWhere;
  table["masked_fill"] = &ConvertMaskedFill;
  table["abs"] = &ConvertAbs;
  table["neg"] = &ConvertNeg;
  table["ceil"] = &ConvertRounding<math::CeilOp>;
  table["floor"] = &ConvertRounding<math::FloorOp>;
  table["log"] = &ConvertMath<math::LogOp>;
  table["exp"] = &ConvertMath<math::ExpOp>;
  table["sqrt"] = &ConvertMath<math::SqrtOp>;
  table["rsqrt"] = &ConvertMath<math::RsqrtOp>;
  table["tanh"] = &ConvertMath<math::TanhOp>;
  table["sigmoid"] = [](GraphImporter& im, const ir::Node& node) {
    return ConvertFloating(im, node, &Sigmoid);
  };
  table["silu"] = [](GraphImporter& im, const ir::Node& node) {
    return ConvertFloating(im, node, &Silu);
  };
  table["relu"] = &ConvertRelu;
  table["gelu"] = &ConvertGelu;
  table["clamp"] = &ConvertClamp;
  table["clamp_min"] = &ConvertOneSidedClamp<true>;
  table["clamp_max"] = &ConvertOneSidedClamp<false>;
  for (const char* cast :
       {"to_dtype", "_to_copy", "copy", "clone", "convert_element_type"}) {
    table[cast] = &ConvertCast;
  }
}

}  // namespace
}  // namespace elementwise

void RegisterElementwiseOps(OpConverterTable& table) {
  elementwise::Register(table);
}

}  // namespace rbln::compiler
