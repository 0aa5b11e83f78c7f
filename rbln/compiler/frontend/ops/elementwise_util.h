// Helpers shared by the element-wise op families (ops/elementwise_ops.cc,
// unary_math_ops.cc, binary_math_ops.cc, activation_ops.cc, ...): PyTorch's
// dtype promotion, scalar operands, scalar arithmetic in a compute type and
// the emission of one linalg.generic per node.
//
// Operand conventions of binary nodes (IR contract, graph.proto): two tensor
// inputs, or one tensor input and one Python-scalar attribute named as the
// ATen schema names the scalar argument: "other" (or pow's "exponent") for a
// scalar second operand, "self" for a scalar first operand (rsub's
// sub(1, x), pow(2, x)). The scalar's kind matters for type promotion, as in
// PyTorch: `f` is a Python float, `i` a Python int, `b` a Python bool.
#ifndef RBLN_COMPILER_FRONTEND_OPS_ELEMENTWISE_UTIL_H_
#define RBLN_COMPILER_FRONTEND_OPS_ELEMENTWISE_UTIL_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Location.h"
#include "mlir/IR/Value.h"
#include "rbln/compiler/frontend/graph_importer.h"
#include "rbln/compiler/ir/graph.pb.h"

namespace rbln::compiler::elementwise {

// --- Dtypes and attributes. ---

bool IsHalf(ir::DType t);
const char* DTypeText(ir::DType t);
// bool < integer < floating point, PyTorch's promotion categories.
int Category(ir::DType t);
// PyTorch's promotion of two tensor dtypes: the higher category wins, then
// the wider type; f16 with bf16 gives f32.
ir::DType Promote(ir::DType a, ir::DType b);
// A tensor of dtype `t` with a Python scalar: the scalar only promotes to a
// higher category (to the default float32 or int64).
ir::DType PromoteWithScalar(ir::DType t, const ir::Attribute& scalar);
ir::DType OutDType(const ir::Node& node);
const ir::Attribute* FindAttr(const ir::Node& node, const std::string& name);
std::string StringAttr(const ir::Node& node, const std::string& name,
                       const std::string& dflt);
double AsDouble(const ir::Attribute& a);
// Truncation toward zero, as a C++ cast, but NaN gives 0 and out-of-range
// values saturate where the cast would be undefined.
int64_t TruncToInt64(double f);
// A scalar used with an integer tensor: ints exactly, floats truncated.
int64_t AsInt(const ir::Attribute& a);
// A scalar cast to `t` the way PyTorch casts a scalar to a tensor's dtype:
// through float, rounding to nearest even for half types.
double RoundToDType(double v, ir::DType t);

absl::Status NotImplementedFor(const ir::Node& node, ir::DType t);
absl::Status CheckUnary(const ir::Node& node);

// The scalar operands of a binary node (see the file comment), or null.
const ir::Attribute* ScalarSelf(const ir::Node& node);
const ir::Attribute* ScalarOther(const ir::Node& node);
// Two tensors, or one tensor and one scalar operand.
absl::Status CheckBinary(const ir::Node& node);
// The promoted dtype of a binary node's operands (tensors and scalar).
ir::DType BinaryOperandDType(const GraphImporter& im, const ir::Node& node);

std::vector<ir::DType> InputDTypes(const GraphImporter& im,
                                   const ir::Node& node);

// --- Scalar arithmetic in a compute type (f32, or the integer type). ---

bool IsFp(mlir::Value v);
// `v` wrapped to the width of `type`, as a C++ cast would (i8 is bool).
mlir::Value IntConstant(mlir::OpBuilder& b, mlir::Location l, mlir::Type type,
                        int64_t v);
// `v` in a compute type: f32, or an integer type (truncated toward zero).
mlir::Value Constant(mlir::OpBuilder& b, mlir::Location l, mlir::Type type,
                     double v);
mlir::Value NaN(mlir::OpBuilder& b, mlir::Location l);
mlir::Value Add(mlir::OpBuilder& b, mlir::Location l, mlir::Value x,
                mlir::Value y);
mlir::Value Sub(mlir::OpBuilder& b, mlir::Location l, mlir::Value x,
                mlir::Value y);
mlir::Value Mul(mlir::OpBuilder& b, mlir::Location l, mlir::Value x,
                mlir::Value y);
mlir::Value Select(mlir::OpBuilder& b, mlir::Location l, mlir::Value cond,
                   mlir::Value x, mlir::Value y);
mlir::Value Not(mlir::OpBuilder& b, mlir::Location l, mlir::Value bit);

enum class Cmp { kEq, kNe, kLt, kLe, kGt, kGe };
// Float compares are ordered (false when either side is NaN) except kNe,
// which is true then, as in C++ and PyTorch. Integers compare signed (bool
// is 0/1, so that works for it too). Two exact half values compare on their
// bits, which vectorizes (see elementwise_util.cc).
mlir::Value Compare(mlir::OpBuilder& b, mlir::Location l, Cmp cmp,
                    mlir::Value x, mlir::Value y);
// Whether x or y is NaN (floats only).
mlir::Value Unordered(mlir::OpBuilder& b, mlir::Location l, mlir::Value x,
                      mlir::Value y);
// Whether x is NaN (floats only).
mlir::Value IsNaN(mlir::OpBuilder& b, mlir::Location l, mlir::Value x);
// Truthiness: nonzero, and NaN counts as true.
mlir::Value NonZero(mlir::OpBuilder& b, mlir::Location l, mlir::Value x);
// An i1 as 0/1 in the compute type of `t`.
mlir::Value FromBool(GraphImporter& im, mlir::OpBuilder& b, mlir::Location l,
                     mlir::Value bit, ir::DType t);
// The Python scalar `a` in the compute type of `t`; with `round`, first cast
// to `t` (PyTorch does so for comparisons and clamp bounds; arithmetic keeps
// the scalar in f32).
mlir::Value ScalarOperand(GraphImporter& im, mlir::OpBuilder& b,
                          mlir::Location l, const ir::Attribute& a,
                          ir::DType t, bool round);

// Clamps x to [lo, hi] as min(max(x, lo), hi) with PyTorch's vectorized tie
// and NaN behavior: ties keep x (so -0 and +0 stay), a NaN input stays NaN,
// a NaN bound makes the element NaN, lo > hi gives hi. `lo`/`hi` are null
// when absent.
mlir::Value ClampValue(mlir::OpBuilder& b, mlir::Location l, mlir::Value x,
                       mlir::Value lo, mlir::Value hi);

// A call of the scalar function `name` (libm's, or special_math.h's, which
// the JIT resolves by name), declared once per module as
// `func.func private @name(<args' types>) -> result` in the importer's
// module.
mlir::Value CallFunction(GraphImporter& im, mlir::OpBuilder& b,
                         mlir::Location l, const char* name,
                         mlir::Type result, mlir::ValueRange args);

// --- Emitting nodes. ---

using BinaryFn = std::function<mlir::Value(mlir::OpBuilder&, mlir::Location,
                                           mlir::Value, mlir::Value)>;
using UnaryFn =
    std::function<mlir::Value(mlir::OpBuilder&, mlir::Location, mlir::Value)>;

// One linalg.generic for `node` (GraphImporter::Elementwise), defining its
// output.
absl::Status Emit(GraphImporter& im, const ir::Node& node,
                  const std::vector<ir::DType>& operand_dtypes,
                  const GraphImporter::ScalarBody& body);
// `fn(lhs, rhs)` with both operands in the compute type of `operand`; a
// scalar operand becomes a constant, rounded to `operand` if `round_scalar`.
absl::Status EmitBinary(GraphImporter& im, const ir::Node& node,
                        ir::DType operand, bool round_scalar,
                        const BinaryFn& fn);
// Arithmetic in the output's compute type. A bool output only comes from
// bool operands (PyTorch refuses to cast a number result to bool).
absl::Status EmitArithmetic(GraphImporter& im, const ir::Node& node,
                            const BinaryFn& fn);
absl::Status EmitUnary(GraphImporter& im, const ir::Node& node,
                       const UnaryFn& fn);

// Unary ops defined on numbers but not on bool, computed in the output's
// type.
absl::Status ConvertNumeric(GraphImporter& im, const ir::Node& node,
                            const UnaryFn& fn);
// Unary ops with a floating-point result. An integer input is converted to
// f32 directly, not rounded to a half output first: PyTorch promotes it to
// the default float32.
absl::Status ConvertFloating(GraphImporter& im, const ir::Node& node,
                             const UnaryFn& fn);

}  // namespace rbln::compiler::elementwise

#endif  // RBLN_COMPILER_FRONTEND_OPS_ELEMENTWISE_UTIL_H_
