#include "rbln/compiler/transforms/library/epilogue_matcher.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/AffineMap.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "rbln/compiler/transforms/library/narrow_operands.h"

namespace rbln::compiler {
namespace {

using ::mlir::OpBuilder;
using ::mlir::Type;
using ::mlir::Value;

bool IsReshape(mlir::Operation* op) {
  return llvm::isa_and_nonnull<mlir::memref::CollapseShapeOp,
                               mlir::memref::ExpandShapeOp>(op);
}

}  // namespace

std::optional<EpilogueGeneric> AsEpilogueGeneric(mlir::linalg::GenericOp g) {
  const int64_t inputs = g.getNumDpsInputs();
  if ((inputs != 1 && inputs != 2) || g.getNumDpsInits() != 1 ||
      g.getNumParallelLoops() != g.getNumLoops()) {
    return std::nullopt;
  }
  llvm::SmallVector<mlir::AffineMap> maps = g.getIndexingMapsArray();
  if (!maps[0].isIdentity() || !maps.back().isIdentity()) return std::nullopt;
  auto in = g.getDpsInputOperand(0)->get().getType().dyn_cast<mlir::MemRefType>();
  auto out = g.getDpsInitOperand(0)->get().getType().dyn_cast<mlir::MemRefType>();
  if (!in || !out || !in.getElementType().isF32()) return std::nullopt;
  EpilogueGeneric e;
  if (out.getElementType().isInteger(16)) {
    e.store = StoreType::kBF16;
  } else if (!out.getElementType().isF32()) {
    return std::nullopt;
  }
  mlir::Block& body = g.getRegion().front();
  Value x = llvm::cast<mlir::linalg::YieldOp>(body.getTerminator()).getOperand(0);
  if (e.store == StoreType::kBF16) x = RoundedToBf16(x);
  if (!x) return std::nullopt;
  if (e.store == StoreType::kBF16) {
    if (Value bits = Bf16ReluInput(x)) {
      if (Value sum = RoundedToBf16(bits)) {
        x = sum;
        e.relu = true;
      }
    }
  }
  const Value c = body.getArgument(0);
  if (inputs == 1) {
    // Only a bf16 store is worth taking over (f32: a copy).
    if (x != c || e.store != StoreType::kBF16) return std::nullopt;
    return e;
  }
  // The bias: 1-D, indexed by the last loop dim, one per column.
  const int64_t rank = maps[0].getNumDims();
  auto bias_type =
      g.getDpsInputOperand(1)->get().getType().dyn_cast<mlir::MemRefType>();
  if (!bias_type || bias_type.getRank() != 1 || !bias_type.hasStaticShape() ||
      !bias_type.getLayout().isIdentity() ||
      maps[1] != mlir::AffineMap::get(
                     rank, 0, {mlir::getAffineDimExpr(rank - 1, g.getContext())},
                     g.getContext()) ||
      bias_type.getDimSize(0) != in.getDimSize(rank - 1)) {
    return std::nullopt;
  }
  const Value b = body.getArgument(1);
  auto add = llvm::dyn_cast_or_null<mlir::arith::AddFOp>(x.getDefiningOp());
  auto terms = Ordered(add, [&](Value v) { return v == c; });
  if (!terms) return std::nullopt;
  const bool bias_f32 = bias_type.getElementType().isF32() && terms->second == b;
  const bool bias_bf16 = bias_type.getElementType().isInteger(16) &&
                         IsBf16Widening(terms->second, b);
  if (!bias_f32 && !bias_bf16) return std::nullopt;
  e.bias = g.getDpsInputOperand(1)->get();
  return e;
}

std::optional<Bf16Store> Bf16StoreOf(
    const Matrix& c, mlir::Operation* op,
    const llvm::SmallPtrSetImpl<mlir::Operation*>& replaced) {
  mlir::Operation* c_view = c.memref.getDefiningOp();
  if (IsReshape(c_view)) {
    if (!c_view->hasOneUse()) return std::nullopt;
  } else {
    c_view = nullptr;
  }
  Value buffer = c_view ? c_view->getOperand(0) : c.memref;
  auto alloc = buffer.getDefiningOp<mlir::memref::AllocOp>();
  if (!alloc || !alloc.getType().getLayout().isIdentity() ||
      c.offset != 0 || c.ld != c.cols) {
    return std::nullopt;
  }
  mlir::linalg::GenericOp rounding;
  EpilogueGeneric epilogue;
  for (mlir::Operation* user : alloc->getUsers()) {
    if (user == op || user == c_view ||
        llvm::isa<mlir::memref::DeallocOp>(user)) {
      continue;
    }
    mlir::Operation* reader = user;
    if (IsReshape(user)) {
      // Read through the view by one op (besides replaced writers).
      llvm::SmallVector<mlir::Operation*, 2> through;
      for (mlir::Operation* u : user->getUsers()) {
        if (!replaced.contains(u)) through.push_back(u);
      }
      if (through.empty()) continue;
      if (through.size() != 1) return std::nullopt;
      reader = through.front();
    }
    if (replaced.contains(reader)) continue;
    auto generic = llvm::dyn_cast<mlir::linalg::GenericOp>(reader);
    std::optional<EpilogueGeneric> e;
    if (!rounding && generic) e = AsEpilogueGeneric(generic);
    if (!e || BaseBuffer(generic.getDpsInputOperand(0)->get()) != buffer ||
        generic->getBlock() != op->getBlock() ||
        !op->isBeforeInBlock(generic)) {
      return std::nullopt;
    }
    rounding = generic;
    epilogue = *e;
  }
  if (!rounding) return std::nullopt;
  // The bias is read at the call: not C, unchanged until the generic, and
  // defined before the call.
  if (epilogue.bias) {
    mlir::Operation* def = epilogue.bias.getDefiningOp();
    if (BaseBuffer(epilogue.bias) == buffer ||
        BaseBuffer(epilogue.bias) ==
            BaseBuffer(rounding.getDpsInitOperand(0)->get()) ||
        !UnwrittenBetween(epilogue.bias, op, rounding) ||
        (def && def->getBlock() == op->getBlock() &&
         !def->isBeforeInBlock(op))) {
      return std::nullopt;
    }
  }
  Value out = rounding.getDpsInitOperand(0)->get();
  const Value out_base = BaseBuffer(out);
  for (mlir::OpOperand& operand : op->getOpOperands()) {
    if (BaseBuffer(operand.get()) == out_base) return std::nullopt;
  }
  // The buffer must exist where the call is: an allocation after it (of a
  // static shape: no operands) moves up to it.
  mlir::Operation* late_alloc = nullptr;
  if (mlir::Operation* def = out.getDefiningOp();
      def && def->getBlock() == op->getBlock() && !def->isBeforeInBlock(op)) {
    if (!llvm::isa<mlir::memref::AllocOp>(def) || def->getNumOperands() != 0) {
      return std::nullopt;
    }
    late_alloc = def;
  }
  for (mlir::Operation* between = op->getNextNode(); between != rounding;
       between = between->getNextNode()) {
    if (mlir::isMemoryEffectFree(between) ||
        llvm::isa<mlir::memref::AllocOp>(between)) {
      continue;
    }
    if (!llvm::isa<mlir::linalg::LinalgOp>(between) ||
        llvm::any_of(between->getOperands(), [&](Value v) {
          return BaseBuffer(v) == out_base;
        })) {
      return std::nullopt;
    }
  }
  if (late_alloc != nullptr) late_alloc->moveBefore(op);
  OpBuilder b(op);
  auto out_type = out.getType().cast<mlir::MemRefType>();
  auto c_type = c.memref.getType().cast<mlir::MemRefType>();
  Type element = epilogue.store == StoreType::kBF16
                     ? static_cast<Type>(b.getI16Type())
                     : static_cast<Type>(b.getF32Type());
  if (out_type.getShape() == c_type.getShape()) {
    std::optional<Matrix> m = AsMatrix(out, element);
    if (m && m->rows == c.rows && m->cols == c.cols) {
      return Bf16Store{rounding, *m, epilogue};
    }
    return std::nullopt;
  }
  // Another shape of the same elements: both contiguous, C's matrices laid
  // out one after the other.
  if (!out_type.hasStaticShape() || !out_type.getLayout().isIdentity() ||
      out_type.getNumElements() != c_type.getNumElements()) {
    return std::nullopt;
  }
  Matrix m = c;
  m.memref = out;
  m.element_bytes = epilogue.store == StoreType::kBF16 ? 2 : 4;
  return Bf16Store{rounding, m, epilogue};
}

}  // namespace rbln::compiler
