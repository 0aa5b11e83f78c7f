// Binary math: remainders, atan2, copysign, NaN-ignoring max/min, hypot,
// nextafter, ldexp/frexp, incomplete gamma and zeta functions, bitwise and
// logical-xor ops. One linalg.generic per output (elementwise_util.h); the
// operands of half types compute in f32 and the result rounds once, as
// PyTorch's CPU kernels do (checked against torch 2.13 on 200k random pairs
// per op and dtype).
//
// IR conventions: two tensor inputs, or one and a scalar operand attribute
// ("other" second, "self" first; elementwise_util.h), which is rounded to the
// operands' promoted dtype as PyTorch's TensorIterator casts a wrapped
// scalar.
// - remainder (Python's %: the sign of the divisor) and fmod (C's fmod: the
//   sign of the dividend) take floats and integers; integer division by zero
//   raises ZeroDivisionError through GraphImporter::CheckedDivisor.
// - atan2, copysign, special_zeta give a float (integers compute in f32);
//   hypot, nextafter, igamma, igammac take floats only.
// - fmax/fmin ignore a NaN operand (NaN only when both are) and return the
//   first operand on ties (so fmax(-0, +0) is -0), on every dtype.
// - ldexp(x, e) = x * pow(2, e) as ATen computes it: the power in e's dtype
//   when e is floating, else in x's floating dtype (float32 for integer x).
// - frexp(x) has two outputs, the mantissa in [0.5, 1) in x's dtype and the
//   exponent in int32; 0, inf and NaN give (x, 0).
// - bitwise_and/or/xor/not and the shifts take integers and bool (shifts:
//   integers); logical_xor any dtype, giving bool.
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

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

// Binary ops whose operands share the output's (promoted) dtype and whose
// scalar operand is rounded to it.
absl::Status EmitPromoted(GraphImporter& im, const ir::Node& node,
                          const BinaryFn& fn) {
  if (absl::Status s = CheckBinary(node); !s.ok()) return s;
  return EmitBinary(im, node, OutDType(node), /*round_scalar=*/true, fn);
}

// Binary ops on numbers only (PyTorch has no bool kernel for them).
absl::Status EmitNumeric(GraphImporter& im, const ir::Node& node,
                         const BinaryFn& fn) {
  if (OutDType(node) == ir::BOOL) return NotImplementedFor(node, ir::BOOL);
  return EmitPromoted(im, node, fn);
}

// Binary ops defined on floating dtypes only.
absl::Status EmitFloatOnly(GraphImporter& im, const ir::Node& node,
                           const BinaryFn& fn) {
  if (absl::Status s = CheckBinary(node); !s.ok()) return s;
  for (ir::DType t : InputDTypes(im, node)) {
    if (!IsFloat(t)) return NotImplementedFor(node, t);
  }
  return EmitPromoted(im, node, fn);
}

// Binary ops with a float result; integer and bool operands compute in f32.
absl::Status EmitFloating(GraphImporter& im, const ir::Node& node,
                          const BinaryFn& fn) {
  if (!IsFloat(OutDType(node))) return NotImplementedFor(node, OutDType(node));
  return EmitPromoted(im, node, fn);
}

// --- Remainders. ---

// Integer x % y with C's truncation; y == 0 raises (CheckedDivisor), and
// y == -1 gives 0 (x86's idiv would trap on INT_MIN % -1).
Value TruncRemInt(GraphImporter& im, OpBuilder& b, Location l, Value x,
                  Value y) {
  Type t = x.getType();
  Value divisor = im.CheckedDivisor(b, y);
  Value by_minus_one = Compare(b, l, Cmp::kEq, divisor, IntConstant(b, l, t, -1));
  Value safe = Select(b, l, by_minus_one, IntConstant(b, l, t, 1), divisor);
  return b.create<arith::RemSIOp>(l, x, safe);
}

// The remainder with the divisor's sign: a nonzero remainder whose sign
// differs from the divisor's moves by one divisor.
Value AdjustToDivisorSign(OpBuilder& b, Location l, Value mod, Value y) {
  Value zero = Constant(b, l, mod.getType(), 0);
  Value adjust = b.create<arith::AndIOp>(
      l, Compare(b, l, Cmp::kNe, mod, zero),
      Compare(b, l, Cmp::kNe, Compare(b, l, Cmp::kLt, y, zero),
              Compare(b, l, Cmp::kLt, mod, zero)));
  return Select(b, l, adjust, Add(b, l, mod, y), mod);
}

absl::Status ConvertRemainder(GraphImporter& im, const ir::Node& node) {
  return EmitNumeric(im, node, [&im](OpBuilder& b, Location l, Value x,
                                     Value y) {
    Value mod = IsFp(x) ? b.create<arith::RemFOp>(l, x, y).getResult()
                        : TruncRemInt(im, b, l, x, y);
    return AdjustToDivisorSign(b, l, mod, y);
  });
}

absl::Status ConvertFmod(GraphImporter& im, const ir::Node& node) {
  return EmitNumeric(im, node, [&im](OpBuilder& b, Location l, Value x,
                                     Value y) -> Value {
    if (IsFp(x)) return b.create<arith::RemFOp>(l, x, y);
    return TruncRemInt(im, b, l, x, y);
  });
}

// --- Floating functions of two arguments. ---

template <typename MathOp>
absl::Status ConvertFloatingMathOp(GraphImporter& im, const ir::Node& node) {
  return EmitFloating(im, node, [](OpBuilder& b, Location l, Value x, Value y) {
    return b.create<MathOp>(l, x, y).getResult();
  });
}

absl::Status ConvertZeta(GraphImporter& im, const ir::Node& node) {
  return EmitFloating(im, node, [&im](OpBuilder& b, Location l, Value x,
                                      Value q) {
    return CallFunction(im, b, l, "rbln_zetaf", b.getF32Type(), {x, q});
  });
}

// `name`(x, y) of libm or special_math.h, on floating operands.
absl::Status ConvertFloatOnlyCall(GraphImporter& im, const ir::Node& node,
                                  const char* name) {
  return EmitFloatOnly(im, node, [&im, name](OpBuilder& b, Location l, Value x,
                                             Value y) {
    return CallFunction(im, b, l, name, b.getF32Type(), {x, y});
  });
}

absl::Status ConvertHypot(GraphImporter& im, const ir::Node& node) {
  return ConvertFloatOnlyCall(im, node, "hypotf");
}

absl::Status ConvertIgamma(GraphImporter& im, const ir::Node& node) {
  return ConvertFloatOnlyCall(im, node, "rbln_igammaf");
}

absl::Status ConvertIgammac(GraphImporter& im, const ir::Node& node) {
  return ConvertFloatOnlyCall(im, node, "rbln_igammacf");
}

// fmax/fmin: a NaN operand yields the other one; ties keep x.
template <bool kMax>
absl::Status ConvertFmaxFmin(GraphImporter& im, const ir::Node& node) {
  return EmitPromoted(im, node, [](OpBuilder& b, Location l, Value x,
                                   Value y) {
    Value r =
        Select(b, l, Compare(b, l, kMax ? Cmp::kLt : Cmp::kGt, x, y), y, x);
    if (!IsFp(x)) return r;
    return Select(b, l, IsNaN(b, l, x), y, Select(b, l, IsNaN(b, l, y), x, r));
  });
}

// nextafter in the storage format of `t` for half types, whose neighbours
// f32's nextafterf does not see: one step of the sign-magnitude bits toward
// y; NaN if either is NaN; y if x == y; the smallest subnormal with y's sign
// from zero. x and y hold values of `t` exactly.
Value HalfNextAfter(GraphImporter& im, OpBuilder& b, Location l, Value x,
                    Value y, ir::DType t) {
  Type i16 = b.getI16Type();
  auto bits_of = [&](Value v) -> Value {
    Value stored = im.FromCompute(b, v, t);
    if (t == ir::FLOAT16) return b.create<arith::BitcastOp>(l, i16, stored);
    return stored;  // bf16 is stored as its bits
  };
  auto value_of = [&](Value bits) -> Value {
    Value stored = bits;
    if (t == ir::FLOAT16) {
      stored = b.create<arith::BitcastOp>(l, b.getF16Type(), bits);
    }
    return im.ToCompute(b, stored, t);
  };
  Value zero = Constant(b, l, x.getType(), 0);
  Value bits = bits_of(x);
  Value away_from_zero =
      Compare(b, l, Cmp::kEq, Compare(b, l, Cmp::kLt, x, y),
              Compare(b, l, Cmp::kGt, x, zero));
  Value one = IntConstant(b, l, i16, 1);
  Value step = value_of(Select(b, l, away_from_zero, Add(b, l, bits, one),
                               Sub(b, l, bits, one)));
  Value tiny = value_of(IntConstant(b, l, i16, 1));  // smallest subnormal
  Value from_zero = b.create<math::CopySignOp>(l, tiny, y);
  Value r = Select(b, l, Compare(b, l, Cmp::kEq, x, zero), from_zero, step);
  r = Select(b, l, Compare(b, l, Cmp::kEq, x, y), y, r);
  return Select(b, l, Unordered(b, l, x, y), NaN(b, l), r);
}

absl::Status ConvertNextAfter(GraphImporter& im, const ir::Node& node) {
  const ir::DType out = OutDType(node);
  return EmitFloatOnly(im, node, [&im, out](OpBuilder& b, Location l, Value x,
                                            Value y) {
    if (!IsHalf(out)) {
      return CallFunction(im, b, l, "nextafterf", b.getF32Type(), {x, y});
    }
    return HalfNextAfter(im, b, l, x, y, out);
  });
}

// Rounds an f32 compute value to `t` and back (identity for float32).
Value RoundTo(GraphImporter& im, OpBuilder& b, Value v, ir::DType t) {
  if (!IsHalf(t)) return v;
  return im.ToCompute(b, im.FromCompute(b, v, t), t);
}

// ldexp(x, e) = x * pow(two, e), two a 0-d tensor of x's floating dtype
// (float32 for integer x): the power has e's dtype when e is floating
// (a 0-d tensor does not promote within its category), else two's.
absl::Status ConvertLdexp(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckArity(node, 2, 1); !s.ok()) return s;
  const ir::DType out = OutDType(node);
  if (!IsFloat(out)) return NotImplementedFor(node, out);
  const ir::DType x_dtype = im.TypeOf(node.inputs(0)).dtype();
  const ir::DType e_dtype = im.TypeOf(node.inputs(1)).dtype();
  const ir::DType two_dtype = IsFloat(x_dtype) ? x_dtype : ir::FLOAT32;
  const ir::DType power_dtype = IsFloat(e_dtype) ? e_dtype : two_dtype;
  return Emit(im, node, {out, e_dtype},
              [&](OpBuilder& b, Location l, ValueRange v) {
                Value e = im.CastCompute(b, v[1], e_dtype, ir::FLOAT32);
                Value two = Constant(b, l, b.getF32Type(), 2);
                Value power = RoundTo(
                    im, b, b.create<math::PowFOp>(l, two, e), power_dtype);
                return Mul(b, l, v[0], power);
              });
}

// frexp(x) -> (mantissa, exponent) from the bits of x's f32 value (a widened
// half is a normal f32); f32 subnormals are scaled by 2^25 first.
absl::Status ConvertFrexp(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckArity(node, 1, 2); !s.ok()) return s;
  const ir::DType in = im.TypeOf(node.inputs(0)).dtype();
  if (!IsFloat(in)) return NotImplementedFor(node, in);
  if (node.outputs(1).type().dtype() != ir::INT32) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op frexp: the exponent output %%%s must be int32",
        node.outputs(1).name()));
  }
  // (normalized bits, exponent bias adjustment) of a nonzero finite x.
  auto normalize = [](OpBuilder& b, Location l, Value x) {
    Type i32 = b.getI32Type();
    Value scaled = Mul(b, l, x, Constant(b, l, x.getType(), 33554432.0));
    Value subnormal =
        Compare(b, l, Cmp::kLt, b.create<math::AbsFOp>(l, x),
                Constant(b, l, x.getType(), 1.1754943508222875e-38));
    Value v = Select(b, l, subnormal, scaled, x);
    Value adjust = Select(b, l, subnormal, IntConstant(b, l, i32, 25),
                          IntConstant(b, l, i32, 0));
    return std::make_pair(b.create<arith::BitcastOp>(l, i32, v).getResult(),
                          adjust);
  };
  // Zero, inf and NaN map to themselves with exponent 0.
  auto special = [](OpBuilder& b, Location l, Value x) {
    Value inf = Constant(b, l, x.getType(),
                         std::numeric_limits<double>::infinity());
    Value zero = Constant(b, l, x.getType(), 0);
    Value is_zero = Compare(b, l, Cmp::kEq, x, zero);
    Value not_finite = Not(
        b, l, Compare(b, l, Cmp::kLt, b.create<math::AbsFOp>(l, x), inf));
    return b.create<arith::OrIOp>(l, is_zero, not_finite).getResult();
  };
  auto i32c = [](OpBuilder& b, Location l, int64_t v) {
    return IntConstant(b, l, b.getI32Type(), v);
  };
  ir::Node mantissa = node;
  mantissa.mutable_outputs()->DeleteSubrange(1, 1);
  if (absl::Status s = Emit(
          im, mantissa, {in},
          [&](OpBuilder& b, Location l, ValueRange x) {
            auto [bits, adjust] = normalize(b, l, x[0]);
            Value fraction = b.create<arith::OrIOp>(
                l, b.create<arith::AndIOp>(l, bits, i32c(b, l, 0x807fffff)),
                i32c(b, l, 126 << 23));
            Value m = b.create<arith::BitcastOp>(l, b.getF32Type(), fraction);
            return Select(b, l, special(b, l, x[0]), x[0], m);
          });
      !s.ok()) {
    return s;
  }
  ir::Node exponent = node;
  exponent.mutable_outputs()->DeleteSubrange(0, 1);
  return Emit(im, exponent, {in}, [&](OpBuilder& b, Location l, ValueRange x) {
    auto [bits, adjust] = normalize(b, l, x[0]);
    Value field = b.create<arith::AndIOp>(
        l, b.create<arith::ShRUIOp>(l, bits, i32c(b, l, 23)), i32c(b, l, 0xff));
    Value e = Sub(b, l, Sub(b, l, field, i32c(b, l, 126)), adjust);
    return Select(b, l, special(b, l, x[0]), i32c(b, l, 0), e);
  });
}

// --- Bitwise and logical ops. ---

template <typename ArithOp>
absl::Status ConvertBitwise(GraphImporter& im, const ir::Node& node) {
  if (IsFloat(OutDType(node))) return NotImplementedFor(node, OutDType(node));
  return EmitPromoted(im, node, [](OpBuilder& b, Location l, Value x, Value y) {
    return b.create<ArithOp>(l, x, y).getResult();
  });
}

// ~x: all bits flipped on integers, logical not on bool (0/1 in i8).
absl::Status ConvertBitwiseNot(GraphImporter& im, const ir::Node& node) {
  if (absl::Status s = CheckUnary(node); !s.ok()) return s;
  const ir::DType out = OutDType(node);
  if (IsFloat(out)) return NotImplementedFor(node, out);
  return EmitUnary(im, node, [out](OpBuilder& b, Location l, Value x) {
    Value ones = IntConstant(b, l, x.getType(), out == ir::BOOL ? 1 : -1);
    return b.create<arith::XOrIOp>(l, x, ones).getResult();
  });
}

// ATen's shifts: a shift count outside [0, bits) gives 0 (left) or the sign
// fill (right); a left shift wraps.
template <bool kLeft>
absl::Status ConvertShift(GraphImporter& im, const ir::Node& node) {
  const ir::DType out = OutDType(node);
  if (!IsIntegral(out)) return NotImplementedFor(node, out);
  return EmitPromoted(im, node, [](OpBuilder& b, Location l, Value x,
                                   Value y) {
    Type t = x.getType();
    const int64_t bits = t.getIntOrFloatBitWidth();
    Value out_of_range = b.create<arith::OrIOp>(
        l, Compare(b, l, Cmp::kLt, y, IntConstant(b, l, t, 0)),
        Compare(b, l, Cmp::kGe, y, IntConstant(b, l, t, bits)));
    Value count = Select(b, l, out_of_range, IntConstant(b, l, t, 0), y);
    if (kLeft) {
      return Select(b, l, out_of_range, IntConstant(b, l, t, 0),
                    b.create<arith::ShLIOp>(l, x, count));
    }
    Value fill = b.create<arith::ShRSIOp>(l, x, IntConstant(b, l, t, bits - 1));
    return Select(b, l, out_of_range, fill,
                  b.create<arith::ShRSIOp>(l, x, count));
  });
}

// logical_xor tests each operand for nonzero in its own dtype.
absl::Status ConvertLogicalXor(GraphImporter& im, const ir::Node& node) {
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
                Value r = b.create<arith::XOrIOp>(l, bit(self, x[0]),
                                                  bit(other, x[x.size() - 1]));
                return FromBool(im, b, l, r, out);
              });
}

void Register(OpConverterTable& table) {
  table["remainder"] = &ConvertRemainder;
  table["fmod"] = &ConvertFmod;
  table["atan2"] = &ConvertFloatingMathOp<math::Atan2Op>;
  table["copysign"] = &ConvertFloatingMathOp<math::CopySignOp>;
  table["special_zeta"] = &ConvertZeta;
  table["hypot"] = &ConvertHypot;
  table["igamma"] = &ConvertIgamma;
  table["igammac"] = &ConvertIgammac;
  table["fmax"] = &ConvertFmaxFmin<true>;
  table["fmin"] = &ConvertFmaxFmin<false>;
  table["nextafter"] = &ConvertNextAfter;
  table["ldexp"] = &ConvertLdexp;
  table["frexp"] = &ConvertFrexp;
  table["bitwise_and"] = &ConvertBitwise<arith::AndIOp>;
  table["bitwise_or"] = &ConvertBitwise<arith::OrIOp>;
  table["bitwise_xor"] = &ConvertBitwise<arith::XOrIOp>;
  table["bitwise_not"] = &ConvertBitwiseNot;
  table["bitwise_left_shift"] = &ConvertShift<true>;
  table["bitwise_right_shift"] = &ConvertShift<false>;
  table["__lshift__"] = &ConvertShift<true>;
  table["__rshift__"] = &ConvertShift<false>;
  table["logical_xor"] = &ConvertLogicalXor;
}

}  // namespace
}  // namespace elementwise

void RegisterBinaryMathOps(OpConverterTable& table) {
  elementwise::Register(table);
}

}  // namespace rbln::compiler
