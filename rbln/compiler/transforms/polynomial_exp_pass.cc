// math.exp on f32 as a polynomial in arith ops (SPEC P5, A2).
//
// Lowered as is, math.exp becomes one call of libm's expf per element: the
// loops of softmax, sigmoid and SiLU cannot be vectorized around it. glibc's
// vector variants (libmvec) would let LLVM vectorize them, but they round
// differently from expf, so the elements a vector loop body computes and
// those of its scalar remainder would get different bits, and a worker's
// slice boundaries (SPEC A2) would change results. This pass expands every
// scalar f32 math.exp into the same sequence of exactly rounded operations
// (fma, floor, integer exponent arithmetic), which LLVM vectorizes without
// changing a bit: Cephes' range reduction and degree-6 polynomial (as
// Eigen's pexp), at most 1.3 ulp from exp over all floats; exp of NaN is
// that NaN, of +inf (and above 88.73) +inf, of -inf (and below -104) +0,
// with subnormal results in between. Runs after the loops are lowered,
// before convert-math-to-llvm.

#include "rbln/compiler/transforms/passes.h"

#include <memory>

#include "llvm/ADT/SmallVector.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/Builders.h"

namespace rbln::compiler {
namespace {

using mlir::OpBuilder;
using mlir::Value;
namespace arith = mlir::arith;
namespace math = mlir::math;

// Inputs are clamped to [kLowest, kHighest] before the reduction, so that
// 2^m splits into two normal powers of two: below kLowest exp rounds to +0
// (exp(-104) is under half the smallest subnormal), and at kHighest
// 2^128 * exp(r) is +inf.
constexpr float kLowest = -104.0f;
constexpr float kHighest = 88.8f;
constexpr float kLog2e = 1.44269504088896341f;
// ln 2 = kLn2Hi - kLn2Lo; kLn2Hi has few enough bits that m * kLn2Hi is
// exact for every m in range (Cody and Waite's reduction, Cephes' values).
constexpr float kLn2Hi = 0.693359375f;
constexpr float kLn2Lo = 2.12194440e-4f;
// exp(r) ~ 1 + r + r^2 (p2 + p3 r + p4 r^2 + p5 r^3 + p6 r^4) on
// [-ln2/2, ln2/2] (Eigen's pexp<float> coefficients).
constexpr float kP2 = 0.49999988079071044921875f;
constexpr float kP3 = 0.16666518151760101318359375f;
constexpr float kP4 = 4.166965186595916748046875e-2f;
constexpr float kP5 = 8.36894474923610687255859375e-3f;
constexpr float kP6 = 1.37449637986719608306884765625e-3f;

class ExpExpander {
 public:
  explicit ExpExpander(math::ExpOp op)
      : b_(op), l_(op.getLoc()), f32_(b_.getF32Type()), i32_(b_.getI32Type()) {}

  Value Expand(Value x) {
    using P = arith::CmpFPredicate;
    // NaN takes the low clamp here (and is returned as is at the end): the
    // conversion of m to an integer must not see NaN.
    Value low = F(kLowest);
    Value clamped = Select(Cmp(P::ULT, x, low), low, x);
    clamped = Select(Cmp(P::OGT, clamped, F(kHighest)), F(kHighest), clamped);
    // x = m ln2 + r, m = floor(x log2e + 1/2), |r| <= ln2/2.
    Value m = b_.create<math::FloorOp>(l_, Fma(clamped, F(kLog2e), F(0.5f)));
    Value r = Fma(m, F(-kLn2Hi), clamped);
    r = Fma(m, F(kLn2Lo), r);
    Value r2 = b_.create<arith::MulFOp>(l_, r, r);
    Value even = Fma(Fma(r2, F(kP6), F(kP4)), r2, F(kP2));
    Value odd = Fma(r2, F(kP5), F(kP3));
    Value poly = Fma(odd, r, even);
    Value y = Fma(poly, r2, b_.create<arith::AddFOp>(l_, r, F(1.0f)));
    // y * 2^m as y * 2^h * 2^(m-h), h = m >> 1: both factors are normal
    // floats for m in [-150, 129], and only the last product rounds (to a
    // subnormal, or to +inf).
    Value mi = b_.create<arith::FPToSIOp>(l_, i32_, m);
    Value half = b_.create<arith::ShRSIOp>(l_, mi, I(1));
    Value rest = b_.create<arith::SubIOp>(l_, mi, half);
    Value scaled = b_.create<arith::MulFOp>(
        l_, b_.create<arith::MulFOp>(l_, y, PowerOfTwo(half)),
        PowerOfTwo(rest));
    Value result = Select(Cmp(P::OLT, x, low), F(0.0f), scaled);
    return Select(Cmp(P::UNO, x, x), x, result);
  }

 private:
  Value F(float v) {
    return b_.create<arith::ConstantOp>(l_, b_.getF32FloatAttr(v));
  }
  Value I(int32_t v) {
    return b_.create<arith::ConstantOp>(l_, b_.getI32IntegerAttr(v));
  }
  Value Fma(Value a, Value x, Value c) {
    return b_.create<math::FmaOp>(l_, a, x, c);
  }
  Value Cmp(arith::CmpFPredicate p, Value a, Value c) {
    return b_.create<arith::CmpFOp>(l_, p, a, c);
  }
  Value Select(Value cond, Value a, Value c) {
    return b_.create<arith::SelectOp>(l_, cond, a, c);
  }
  // 2^e for e in [-126, 127]: the biased exponent in the float's bits.
  Value PowerOfTwo(Value e) {
    Value biased = b_.create<arith::AddIOp>(l_, e, I(127));
    Value bits = b_.create<arith::ShLIOp>(l_, biased, I(23));
    return b_.create<arith::BitcastOp>(l_, f32_, bits);
  }

  OpBuilder b_;
  mlir::Location l_;
  mlir::Type f32_, i32_;
};

class PolynomialExpPass
    : public mlir::PassWrapper<PolynomialExpPass,
                               mlir::OperationPass<mlir::func::FuncOp>> {
 public:
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(PolynomialExpPass)

  llvm::StringRef getArgument() const final { return "rbln-polynomial-exp"; }
  llvm::StringRef getDescription() const final {
    return "expands scalar f32 math.exp into a polynomial of arith ops";
  }
  void getDependentDialects(mlir::DialectRegistry& registry) const override {
    registry.insert<arith::ArithDialect, math::MathDialect>();
  }

  void runOnOperation() override {
    llvm::SmallVector<math::ExpOp> exps;
    getOperation().walk([&](math::ExpOp op) {
      if (op.getType().isF32()) exps.push_back(op);
    });
    for (math::ExpOp op : exps) {
      Value result = ExpExpander(op).Expand(op.getOperand());
      op.getResult().replaceAllUsesWith(result);
      op.erase();
    }
  }
};

}  // namespace

std::unique_ptr<mlir::Pass> CreatePolynomialExpPass() {
  return std::make_unique<PolynomialExpPass>();
}

}  // namespace rbln::compiler
