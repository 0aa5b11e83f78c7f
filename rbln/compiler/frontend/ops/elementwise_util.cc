// Helpers of the element-wise op families; see elementwise_util.h.
#include "rbln/compiler/frontend/ops/elementwise_util.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "llvm/ADT/APFloat.h"
#include "llvm/ADT/APInt.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Matchers.h"
#include "rbln/compiler/ir/graph_util.h"
#include "rbln/core/dtype.h"

namespace rbln::compiler::elementwise {

namespace arith = ::mlir::arith;
using ::mlir::Location;
using ::mlir::OpBuilder;
using ::mlir::Type;
using ::mlir::Value;
using ::mlir::ValueRange;

bool IsHalf(ir::DType t) { return t == ir::FLOAT16 || t == ir::BFLOAT16; }

const char* DTypeText(ir::DType t) { return ir::TorchDTypeName(t); }

// bool < integer < floating point, PyTorch's promotion categories.
int Category(ir::DType t) {
  if (t == ir::BOOL) return 0;
  return IsFloat(t) ? 2 : 1;
}

// PyTorch's promotion of two tensor dtypes: the higher category wins, then
// the wider type; f16 with bf16 gives f32.
ir::DType Promote(ir::DType a, ir::DType b) {
  if (a == b) return a;
  if (Category(a) != Category(b)) return Category(a) > Category(b) ? a : b;
  if (IsFloat(a)) return ir::FLOAT32;
  // uint8 with int8 needs int16; otherwise the wider integer (a signed one
  // when uint8 meets a wider type).
  if ((a == ir::UINT8 && b == ir::INT8) || (a == ir::INT8 && b == ir::UINT8)) {
    return ir::INT16;
  }
  return rbln::DTypeSize(ir::ToRuntimeDType(a)) >=
                 rbln::DTypeSize(ir::ToRuntimeDType(b))
             ? a
             : b;
}

// A tensor of dtype `t` with a Python scalar: the scalar only promotes to a
// higher category (to the default float32 or int64).
ir::DType PromoteWithScalar(ir::DType t, const ir::Attribute& scalar) {
  switch (scalar.value_case()) {
    case ir::Attribute::kF:
      return Category(t) < 2 ? ir::FLOAT32 : t;
    case ir::Attribute::kI:
      return Category(t) < 1 ? ir::INT64 : t;
    default:
      return t;
  }
}

ir::DType OutDType(const ir::Node& node) {
  return node.outputs(0).type().dtype();
}

const ir::Attribute* FindAttr(const ir::Node& node, const std::string& name) {
  auto it = node.attrs().find(name);
  return it == node.attrs().end() ? nullptr : &it->second;
}

std::string StringAttr(const ir::Node& node, const std::string& name,
                       const std::string& dflt) {
  const ir::Attribute* a = FindAttr(node, name);
  return a != nullptr && a->value_case() == ir::Attribute::kS ? a->s() : dflt;
}

double AsDouble(const ir::Attribute& a) {
  switch (a.value_case()) {
    case ir::Attribute::kI:
      return static_cast<double>(a.i());
    case ir::Attribute::kB:
      return a.b() ? 1.0 : 0.0;
    default:
      return a.f();
  }
}

// Truncation toward zero, as a C++ cast, but NaN gives 0 and out-of-range
// values saturate where the cast would be undefined.
int64_t TruncToInt64(double f) {
  if (std::isnan(f)) return 0;
  if (f >= 9.2233720368547758e18) return std::numeric_limits<int64_t>::max();
  if (f <= -9.2233720368547758e18) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(f);
}

// A scalar used with an integer tensor: ints exactly, floats truncated.
int64_t AsInt(const ir::Attribute& a) {
  if (a.value_case() == ir::Attribute::kI) return a.i();
  return TruncToInt64(AsDouble(a));
}

absl::Status NotImplementedFor(const ir::Node& node, ir::DType t) {
  return absl::UnimplementedError(absl::StrFormat(
      "The following operators are not implemented: ['%s' on %s]", node.op(),
      DTypeText(t)));
}

absl::Status CheckUnary(const ir::Node& node) { return CheckArity(node, 1, 1); }

const ir::Attribute* ScalarSelf(const ir::Node& node) {
  return node.inputs_size() == 1 ? FindAttr(node, "self") : nullptr;
}

const ir::Attribute* ScalarOther(const ir::Node& node) {
  if (node.inputs_size() != 1) return nullptr;
  if (const ir::Attribute* other = FindAttr(node, "other")) return other;
  return FindAttr(node, "exponent");
}

absl::Status CheckBinary(const ir::Node& node) {
  if (ScalarSelf(node) != nullptr && ScalarOther(node) != nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s has a scalar first operand (attr self) and a scalar second "
        "operand (attr other/exponent); one of them must be a tensor input",
        node.op()));
  }
  const bool scalar =
      ScalarSelf(node) != nullptr || ScalarOther(node) != nullptr;
  return CheckArity(node, scalar ? 1 : 2, 1);
}

ir::DType BinaryOperandDType(const GraphImporter& im, const ir::Node& node) {
  const ir::DType tensor = im.TypeOf(node.inputs(0)).dtype();
  if (const ir::Attribute* s = ScalarSelf(node)) {
    return PromoteWithScalar(tensor, *s);
  }
  if (const ir::Attribute* s = ScalarOther(node)) {
    return PromoteWithScalar(tensor, *s);
  }
  return Promote(tensor, im.TypeOf(node.inputs(1)).dtype());
}

std::vector<ir::DType> InputDTypes(const GraphImporter& im,
                                   const ir::Node& node) {
  std::vector<ir::DType> dtypes;
  for (const std::string& name : node.inputs()) {
    dtypes.push_back(im.TypeOf(name).dtype());
  }
  return dtypes;
}
// --- Scalar arithmetic in a compute type (f32, or the integer type). ---

bool IsFp(Value v) { return v.getType().isa<mlir::FloatType>(); }

Value IntConstant(OpBuilder& b, Location l, Type type, int64_t v) {
  // Wrap to the type's width, as a C++ cast would.
  if (type.getIntOrFloatBitWidth() == 32) v = static_cast<int32_t>(v);
  if (type.getIntOrFloatBitWidth() == 8) v = v != 0;  // bool
  return b.create<arith::ConstantOp>(l, b.getIntegerAttr(type, v));
}

// `v` in a compute type: f32, or an integer type (truncated toward zero).
Value Constant(OpBuilder& b, Location l, Type type, double v) {
  if (type.isa<mlir::FloatType>()) {
    return b.create<arith::ConstantOp>(
        l, b.getFloatAttr(type, static_cast<float>(v)));
  }
  return IntConstant(b, l, type, TruncToInt64(v));
}

Value NaN(OpBuilder& b, Location l) {
  return Constant(b, l, b.getF32Type(),
                  std::numeric_limits<float>::quiet_NaN());
}

Value Add(OpBuilder& b, Location l, Value x, Value y) {
  if (IsFp(x)) return b.create<arith::AddFOp>(l, x, y);
  return b.create<arith::AddIOp>(l, x, y);
}

Value Sub(OpBuilder& b, Location l, Value x, Value y) {
  if (IsFp(x)) return b.create<arith::SubFOp>(l, x, y);
  return b.create<arith::SubIOp>(l, x, y);
}

Value Mul(OpBuilder& b, Location l, Value x, Value y) {
  if (IsFp(x)) return b.create<arith::MulFOp>(l, x, y);
  return b.create<arith::MulIOp>(l, x, y);
}

Value Select(OpBuilder& b, Location l, Value cond, Value x, Value y) {
  return b.create<arith::SelectOp>(l, cond, x, y);
}

Value Not(OpBuilder& b, Location l, Value bit) {
  Value one = b.create<arith::ConstantOp>(l, b.getBoolAttr(true));
  return b.createOrFold<arith::XOrIOp>(l, bit, one);
}

namespace {

// --- Half-precision compares on integer keys. ---
//
// Half inputs reach a body widened to f32. LLVM 16's instcombine narrows an
// fcmp of two widened f16 values (or of one and an f16-exact constant) back
// to an fcmp on half, which x86 without AVX512-FP16 only does one element at
// a time, so relu, maximum and the comparisons ran scalar. Compares of values
// that are exactly f16 or bf16 are therefore done on their 16 bits as
// integers, which vectorize 16 lanes wide: NaN is a magnitude above infinity's
// and the sign-magnitude bits map to an ordered two's-complement key (-0 and
// +0 both give 0). Selects stay on the floats: a select is a blend.

enum class HalfFormat { kF16, kBF16 };

// The bits of +infinity; any larger magnitude is NaN.
int64_t InfinityBits(HalfFormat f) {
  return f == HalfFormat::kF16 ? 0x7c00 : 0x7f80;
}

// The format of `v` if it is a half value widened the way
// GraphImporter::ToCompute widens it (f16: arith.extf; bf16: the bits
// shifted into the top of an i32 and bitcast), or a select between such
// values and constants.
std::optional<HalfFormat> WidenedFormat(Value v) {
  if (auto ext = v.getDefiningOp<arith::ExtFOp>()) {
    if (ext.getIn().getType().isF16()) return HalfFormat::kF16;
    return std::nullopt;
  }
  if (auto cast = v.getDefiningOp<arith::BitcastOp>()) {
    auto shl = cast.getIn().getDefiningOp<arith::ShLIOp>();
    if (shl == nullptr) return std::nullopt;
    auto widen = shl.getLhs().getDefiningOp<arith::ExtUIOp>();
    llvm::APInt shift;
    if (widen != nullptr && widen.getIn().getType().isInteger(16) &&
        mlir::matchPattern(shl.getRhs(), mlir::m_ConstantInt(&shift)) &&
        shift == 16) {
      return HalfFormat::kBF16;
    }
    return std::nullopt;
  }
  if (auto select = v.getDefiningOp<arith::SelectOp>()) {
    std::optional<HalfFormat> t = WidenedFormat(select.getTrueValue());
    std::optional<HalfFormat> f = WidenedFormat(select.getFalseValue());
    if (t && f && *t != *f) return std::nullopt;
    return t ? t : f;
  }
  return std::nullopt;
}

// The bits of the f32 constant `c` in format `f` if the conversion is exact
// (any NaN counts: only NaN-ness matters to a compare).
std::optional<uint16_t> ExactHalfBits(const llvm::APFloat& c, HalfFormat f) {
  llvm::APFloat h = c;
  bool loses_info = false;
  h.convert(f == HalfFormat::kF16 ? llvm::APFloat::IEEEhalf()
                                  : llvm::APFloat::BFloat(),
            llvm::APFloat::rmNearestTiesToEven, &loses_info);
  if (loses_info && !c.isNaN()) return std::nullopt;
  if (c.isNaN()) return static_cast<uint16_t>(InfinityBits(f) | 0x40);
  return static_cast<uint16_t>(h.bitcastToAPInt().getZExtValue());
}

// Whether `v` holds a value of format `f` exactly: a widened one or a select
// of such values and exact constants. HalfBits below can then extract it.
bool IsExactHalf(Value v, HalfFormat f) {
  llvm::APFloat c(0.0f);
  if (mlir::matchPattern(v, mlir::m_ConstantFloat(&c))) {
    return ExactHalfBits(c, f).has_value();
  }
  if (auto select = v.getDefiningOp<arith::SelectOp>()) {
    return IsExactHalf(select.getTrueValue(), f) &&
           IsExactHalf(select.getFalseValue(), f);
  }
  return WidenedFormat(v) == f;
}

// The 16 bits (as i16) of a value for which IsExactHalf(v, f) holds.
Value HalfBits(OpBuilder& b, Location l, Value v, HalfFormat f) {
  Type i16 = b.getI16Type();
  llvm::APFloat c(0.0f);
  if (mlir::matchPattern(v, mlir::m_ConstantFloat(&c))) {
    return b.create<arith::ConstantOp>(
        l, b.getIntegerAttr(i16, static_cast<int16_t>(*ExactHalfBits(c, f))));
  }
  if (auto select = v.getDefiningOp<arith::SelectOp>()) {
    return b.create<arith::SelectOp>(l, select.getCondition(),
                                     HalfBits(b, l, select.getTrueValue(), f),
                                     HalfBits(b, l, select.getFalseValue(), f));
  }
  if (f == HalfFormat::kF16) {
    return b.create<arith::BitcastOp>(l, i16,
                                      v.getDefiningOp<arith::ExtFOp>().getIn());
  }
  return v.getDefiningOp<arith::BitcastOp>()
      .getIn()
      .getDefiningOp<arith::ShLIOp>()
      .getLhs()
      .getDefiningOp<arith::ExtUIOp>()
      .getIn();
}

// The common format of x and y when both are exactly half values of it.
std::optional<HalfFormat> CommonHalfFormat(Value x, Value y) {
  std::optional<HalfFormat> f = WidenedFormat(x);
  if (!f) f = WidenedFormat(y);
  if (!f || !IsExactHalf(x, *f) || !IsExactHalf(y, *f)) return std::nullopt;
  return f;
}

Value I16(OpBuilder& b, Location l, int64_t v) {
  return b.create<arith::ConstantOp>(l, b.getIntegerAttr(b.getI16Type(), v));
}

// Whether the half `bits` are NaN.
Value HalfIsNaN(OpBuilder& b, Location l, Value bits, HalfFormat f) {
  Value magnitude = b.createOrFold<arith::AndIOp>(l, bits, I16(b, l, 0x7fff));
  return b.createOrFold<arith::CmpIOp>(l, arith::CmpIPredicate::sgt, magnitude,
                                       I16(b, l, InfinityBits(f)));
}

// Sign-magnitude bits as a two's-complement key ordered like the values
// (for non-NaN): the magnitude, negated when the sign is set.
Value HalfKey(OpBuilder& b, Location l, Value bits) {
  Value magnitude = b.createOrFold<arith::AndIOp>(l, bits, I16(b, l, 0x7fff));
  Value sign = b.createOrFold<arith::ShRSIOp>(l, bits, I16(b, l, 15));  // 0/-1
  return b.createOrFold<arith::SubIOp>(
      l, b.createOrFold<arith::XOrIOp>(l, magnitude, sign), sign);
}

// The IEEE compare of two half values given as bits: ordered (false on NaN)
// except kNe, which is true on NaN.
Value HalfCompare(OpBuilder& b, Location l, Cmp cmp, Value x, Value y,
                  HalfFormat f) {
  static constexpr arith::CmpIPredicate kKey[] = {
      arith::CmpIPredicate::eq,  arith::CmpIPredicate::eq,
      arith::CmpIPredicate::slt, arith::CmpIPredicate::sle,
      arith::CmpIPredicate::sgt, arith::CmpIPredicate::sge};
  Value keys = b.createOrFold<arith::CmpIOp>(
      l, kKey[static_cast<int>(cmp)], HalfKey(b, l, x), HalfKey(b, l, y));
  // Equal keys have equal magnitudes, so then y is NaN exactly when x is.
  Value nan = HalfIsNaN(b, l, x, f);
  if (cmp != Cmp::kEq && cmp != Cmp::kNe) {
    nan = b.createOrFold<arith::OrIOp>(l, nan, HalfIsNaN(b, l, y, f));
  }
  Value ordered = b.createOrFold<arith::AndIOp>(l, keys, Not(b, l, nan));
  return cmp == Cmp::kNe ? Not(b, l, ordered) : ordered;
}

}  // namespace

// Float compares are ordered (false when either side is NaN) except kNe,
// which is true then, as in C++ and PyTorch. Integers compare signed (bool
// is 0/1, so that works for it too). Two exact half values compare on their
// bits (see HalfCompare).
Value Compare(OpBuilder& b, Location l, Cmp cmp, Value x, Value y) {
  if (IsFp(x)) {
    if (std::optional<HalfFormat> f = CommonHalfFormat(x, y)) {
      return HalfCompare(b, l, cmp, HalfBits(b, l, x, *f),
                         HalfBits(b, l, y, *f), *f);
    }
    static constexpr arith::CmpFPredicate kFloat[] = {
        arith::CmpFPredicate::OEQ, arith::CmpFPredicate::UNE,
        arith::CmpFPredicate::OLT, arith::CmpFPredicate::OLE,
        arith::CmpFPredicate::OGT, arith::CmpFPredicate::OGE};
    return b.create<arith::CmpFOp>(l, kFloat[static_cast<int>(cmp)], x, y);
  }
  static constexpr arith::CmpIPredicate kInt[] = {
      arith::CmpIPredicate::eq,  arith::CmpIPredicate::ne,
      arith::CmpIPredicate::slt, arith::CmpIPredicate::sle,
      arith::CmpIPredicate::sgt, arith::CmpIPredicate::sge};
  return b.create<arith::CmpIOp>(l, kInt[static_cast<int>(cmp)], x, y);
}

// Whether x or y is NaN (floats only).
Value Unordered(OpBuilder& b, Location l, Value x, Value y) {
  if (std::optional<HalfFormat> f = CommonHalfFormat(x, y)) {
    Value x_nan = HalfIsNaN(b, l, HalfBits(b, l, x, *f), *f);
    Value y_nan = HalfIsNaN(b, l, HalfBits(b, l, y, *f), *f);
    return b.createOrFold<arith::OrIOp>(l, x_nan, y_nan);
  }
  return b.create<arith::CmpFOp>(l, arith::CmpFPredicate::UNO, x, y);
}

// Truthiness: nonzero, and NaN counts as true.
Value NonZero(OpBuilder& b, Location l, Value x) {
  return Compare(b, l, Cmp::kNe, x, Constant(b, l, x.getType(), 0));
}

// An i1 as 0/1 in the compute type of `t`.
Value FromBool(GraphImporter& im, OpBuilder& b, Location l, Value bit,
               ir::DType t) {
  Type type = im.ComputeType(t);
  if (type.isa<mlir::FloatType>())
    return b.create<arith::UIToFPOp>(l, type, bit);
  return b.create<arith::ExtUIOp>(l, type, bit);
}

// A scalar cast to a half type the way c10::Half(float(v)) and
// c10::BFloat16(float(v)) do: through float, rounding to nearest even.
double RoundToDType(double v, ir::DType t) {
  if (!IsHalf(t)) return static_cast<float>(v);
  llvm::APFloat f(static_cast<float>(v));
  bool loses_info = false;
  f.convert(
      t == ir::FLOAT16 ? llvm::APFloat::IEEEhalf() : llvm::APFloat::BFloat(),
      llvm::APFloat::rmNearestTiesToEven, &loses_info);
  f.convert(llvm::APFloat::IEEEsingle(), llvm::APFloat::rmNearestTiesToEven,
            &loses_info);
  return f.convertToFloat();
}

// An integer scalar cast to the narrow integer `t` as ATen casts it to
// scalar_t (wrapping: clamp(uint8, -5, 100) has min 251); other dtypes keep it.
int64_t WrapToDType(int64_t v, ir::DType t) {
  switch (t) {
    case ir::INT8:
      return static_cast<int8_t>(v);
    case ir::INT16:
      return static_cast<int16_t>(v);
    case ir::UINT8:
      return static_cast<uint8_t>(v);
    default:
      return v;
  }
}

// The Python scalar `a` in the compute type of `t`; with `round`, first cast
// to `t` (PyTorch does so for comparisons and clamp bounds; arithmetic keeps
// the scalar in f32).
Value ScalarOperand(GraphImporter& im, OpBuilder& b, Location l,
                    const ir::Attribute& a, ir::DType t, bool round) {
  Type type = im.ComputeType(t);
  if (t == ir::BOOL) return IntConstant(b, l, type, AsDouble(a) != 0);
  if (!IsFloat(t)) return IntConstant(b, l, type, WrapToDType(AsInt(a), t));
  return Constant(b, l, type,
                  round ? RoundToDType(AsDouble(a), t) : AsDouble(a));
}

Value ClampValue(OpBuilder& b, Location l, Value x, Value lo, Value hi) {
  if (lo) x = Select(b, l, Compare(b, l, Cmp::kLt, x, lo), lo, x);
  if (hi) x = Select(b, l, Compare(b, l, Cmp::kGt, x, hi), hi, x);
  if (!IsFp(x)) return x;
  for (Value bound : {lo, hi}) {
    if (bound) x = Select(b, l, IsNaN(b, l, bound), NaN(b, l), x);
  }
  return x;
}

Value CallFunction(GraphImporter& im, OpBuilder& b, Location l,
                   const char* name, Type result, ValueRange args) {
  mlir::ModuleOp module = im.module();
  if (!module.lookupSymbol(name)) {
    OpBuilder top = OpBuilder::atBlockBegin(module.getBody());
    auto decl = top.create<mlir::func::FuncOp>(
        l, name, top.getFunctionType(args.getTypes(), {result}));
    decl.setPrivate();
  }
  return b.create<mlir::func::CallOp>(l, name, mlir::TypeRange{result}, args)
      .getResult(0);
}

// --- Emitting nodes. ---

absl::Status Emit(GraphImporter& im, const ir::Node& node,
                  const std::vector<ir::DType>& operand_dtypes,
                  const GraphImporter::ScalarBody& body) {
  absl::StatusOr<Value> result = im.Elementwise(node, operand_dtypes, body);
  if (!result.ok()) return result.status();
  im.Define(node.outputs(0), *result);
  return absl::OkStatus();
}

absl::Status EmitBinary(GraphImporter& im, const ir::Node& node,
                        ir::DType operand, bool round_scalar,
                        const BinaryFn& fn) {
  const ir::Attribute* self = ScalarSelf(node);
  const ir::Attribute* other = ScalarOther(node);
  return Emit(im, node, std::vector<ir::DType>(node.inputs_size(), operand),
              [&](OpBuilder& b, Location l, ValueRange x) {
                auto scalar = [&](const ir::Attribute& a) {
                  return ScalarOperand(im, b, l, a, operand, round_scalar);
                };
                if (self != nullptr) return fn(b, l, scalar(*self), x[0]);
                if (other != nullptr) return fn(b, l, x[0], scalar(*other));
                return fn(b, l, x[0], x[1]);
              });
}

// Arithmetic in the output's compute type. A bool output only comes from
// bool operands (PyTorch refuses to cast a number result to bool).
absl::Status EmitArithmetic(GraphImporter& im, const ir::Node& node,
                            const BinaryFn& fn) {
  const ir::DType out = OutDType(node);
  if (out == ir::BOOL) {
    for (ir::DType t : InputDTypes(im, node)) {
      if (t != ir::BOOL) return NotImplementedFor(node, t);
    }
  }
  return EmitBinary(im, node, out, /*round_scalar=*/false, fn);
}

absl::Status EmitUnary(GraphImporter& im, const ir::Node& node,
                       const UnaryFn& fn) {
  return Emit(
      im, node, {OutDType(node)},
      [&](OpBuilder& b, Location l, ValueRange x) { return fn(b, l, x[0]); });
}

Value IsNaN(OpBuilder& b, Location l, Value x) {
  llvm::APFloat c(0.0f);
  if (mlir::matchPattern(x, mlir::m_ConstantFloat(&c))) {
    return IntConstant(b, l, b.getI1Type(), c.isNaN());
  }
  return Unordered(b, l, x, x);
}

absl::Status ConvertNumeric(GraphImporter& im, const ir::Node& node,
                            const UnaryFn& fn) {
  if (absl::Status s = CheckUnary(node); !s.ok()) return s;
  const ir::DType out = OutDType(node);
  if (out == ir::BOOL) return NotImplementedFor(node, out);
  return EmitUnary(im, node, fn);
}

absl::Status ConvertFloating(GraphImporter& im, const ir::Node& node,
                             const UnaryFn& fn) {
  if (absl::Status s = CheckUnary(node); !s.ok()) return s;
  const ir::DType out = OutDType(node);
  if (!IsFloat(out)) return NotImplementedFor(node, out);
  const ir::DType in = im.TypeOf(node.inputs(0)).dtype();
  return Emit(
      im, node, {IsFloat(in) ? out : ir::FLOAT32},
      [&](OpBuilder& b, Location l, ValueRange x) { return fn(b, l, x[0]); });
}

}  // namespace rbln::compiler::elementwise
