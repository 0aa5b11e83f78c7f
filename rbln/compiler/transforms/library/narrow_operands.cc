#include "rbln/compiler/transforms/library/narrow_operands.h"

#include <functional>

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/SmallVector.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Interfaces/ViewLikeInterface.h"
#include "rbln/compiler/pipelines/mlir_compat.h"

namespace rbln::compiler {

using ::mlir::Location;
using ::mlir::OpBuilder;
using ::mlir::Type;
using ::mlir::Value;

std::optional<Widened> WidenedFrom(Value v) {
  if (auto ext = v.getDefiningOp<mlir::arith::ExtFOp>()) {
    if (ext.getType().isF32() && ext.getIn().getType().isF16()) {
      return Widened{ext.getIn(), NarrowFloat::kF16};
    }
    return std::nullopt;
  }
  auto cast = v.getDefiningOp<mlir::arith::BitcastOp>();
  if (!cast || !cast.getType().isF32()) return std::nullopt;
  auto shift = cast.getIn().getDefiningOp<mlir::arith::ShLIOp>();
  mlir::APInt amount;
  if (!shift || !mlir::matchPattern(shift.getRhs(), mlir::m_ConstantInt(&amount)) ||
      amount != 16) {
    return std::nullopt;
  }
  auto ext = shift.getLhs().getDefiningOp<mlir::arith::ExtUIOp>();
  if (!ext || !ext.getIn().getType().isInteger(16) || !ext.getType().isInteger(32)) {
    return std::nullopt;
  }
  return Widened{ext.getIn(), NarrowFloat::kBF16};
}

Type StorageType(mlir::MLIRContext* context, NarrowFloat format) {
  OpBuilder b(context);
  return format == NarrowFloat::kBF16 ? static_cast<Type>(b.getI16Type())
                                      : static_cast<Type>(b.getF16Type());
}

std::optional<OperandCopy> AsOperandCopy(mlir::linalg::GenericOp generic) {
  if (generic.getNumDpsInputs() != 1 || generic.getNumDpsInits() != 1 ||
      generic.getNumParallelLoops() != generic.getNumLoops()) {
    return std::nullopt;
  }
  llvm::SmallVector<mlir::AffineMap> maps = generic.getIndexingMapsArray();
  OperandCopy copy;
  if (!maps[1].isIdentity()) return std::nullopt;
  if (!maps[0].isIdentity()) {
    mlir::MLIRContext* context = generic.getContext();
    const mlir::AffineMap swap = mlir::AffineMap::get(
        2, 0, {mlir::getAffineDimExpr(1, context), mlir::getAffineDimExpr(0, context)},
        context);
    if (maps[0] != swap) return std::nullopt;
    copy.transposed = true;
  }
  auto in = generic.getDpsInputOperand(0)->get().getType().dyn_cast<mlir::MemRefType>();
  if (!in) return std::nullopt;
  mlir::Block& body = generic.getRegion().front();
  Value yielded = llvm::cast<mlir::linalg::YieldOp>(body.getTerminator()).getOperand(0);
  if (in.getElementType().isF32()) {
    if (yielded != body.getArgument(0)) return std::nullopt;
    return copy;
  }
  std::optional<Widened> widened = WidenedFrom(yielded);
  if (!widened || widened->narrow != body.getArgument(0)) return std::nullopt;
  copy.widens = widened->format;
  return copy;
}

Value BaseBuffer(Value v) {
  while (auto view = v.getDefiningOp<mlir::ViewLikeOpInterface>()) {
    v = view.getViewSource();
  }
  return v;
}

bool UnwrittenBetween(Value source, mlir::Operation* from,
                      mlir::Operation* to) {
  const Value base = BaseBuffer(source);
  for (mlir::Operation* op = from->getNextNode(); op != to;
       op = op->getNextNode()) {
    if (mlir::isMemoryEffectFree(op) || llvm::isa<mlir::memref::AllocOp>(op)) {
      continue;
    }
    // A freed source cannot be read later.
    if (auto dealloc = llvm::dyn_cast<mlir::memref::DeallocOp>(op)) {
      if (BaseBuffer(dealloc.getMemref()) == base) return false;
      continue;
    }
    llvm::SmallVector<Value> written;
    if (auto copy = llvm::dyn_cast<mlir::memref::CopyOp>(op)) {
      written.push_back(copy.getTarget());
    } else if (auto linalg_op = llvm::dyn_cast<mlir::linalg::LinalgOp>(op)) {
      for (mlir::OpOperand* init : compat::DpsInitOperands(linalg_op)) {
        written.push_back(init->get());
      }
    } else {
      return false;
    }
    for (Value w : written) {
      const Value buffer = BaseBuffer(w);
      if (buffer == base || !(buffer.getDefiningOp<mlir::memref::AllocOp>() ||
                              buffer.isa<mlir::BlockArgument>())) {
        return false;
      }
    }
  }
  return true;
}

bool IsAllocOrArgument(Value buffer) {
  return buffer.getDefiningOp<mlir::memref::AllocOp>() || buffer.isa<mlir::BlockArgument>();
}

bool OverwritesWhole(mlir::linalg::GenericOp generic, Value buffer) {
  if (generic.getNumDpsInits() != 1 || generic.getDpsInitOperand(0)->get() != buffer ||
      generic.getNumParallelLoops() != generic.getNumLoops() ||
      !generic.getIndexingMapsArray().back().isIdentity()) {
    return false;
  }
  mlir::Block& body = generic.getRegion().front();
  if (!body.getArgument(generic.getNumDpsInputs()).use_empty()) return false;
  for (mlir::OpOperand* input : generic.getDpsInputOperands()) {
    if (BaseBuffer(input->get()) == buffer) return false;
  }
  return true;
}

mlir::linalg::GenericOp LastWholeWriter(Value buffer, mlir::Operation* op) {
  for (mlir::Operation* p = op->getPrevNode(); p != nullptr; p = p->getPrevNode()) {
    if (mlir::isMemoryEffectFree(p) || llvm::isa<mlir::memref::AllocOp>(p)) continue;
    if (auto dealloc = llvm::dyn_cast<mlir::memref::DeallocOp>(p)) {
      if (BaseBuffer(dealloc.getMemref()) == buffer) return nullptr;
      continue;
    }
    if (auto copy = llvm::dyn_cast<mlir::memref::CopyOp>(p)) {
      const Value target = BaseBuffer(copy.getTarget());
      if (target == buffer || !IsAllocOrArgument(target)) return nullptr;
      continue;
    }
    auto linalg_op = llvm::dyn_cast<mlir::linalg::LinalgOp>(p);
    if (!linalg_op) return nullptr;
    bool writes = false;
    for (mlir::OpOperand* init : compat::DpsInitOperands(linalg_op)) {
      const Value written = BaseBuffer(init->get());
      if (written == buffer) {
        writes = true;
      } else if (!IsAllocOrArgument(written)) {
        return nullptr;
      }
    }
    if (!writes) continue;
    auto generic = llvm::dyn_cast<mlir::linalg::GenericOp>(p);
    if (!generic || !OverwritesWhole(generic, buffer)) return nullptr;
    return generic;
  }
  return nullptr;
}

std::optional<NarrowOperand> NarrowOperandOf(Value operand, mlir::Operation* op) {
  NarrowOperand r;
  r.collapse = operand.getDefiningOp<mlir::memref::CollapseShapeOp>();
  const Value buffer = r.collapse ? r.collapse.getSrc() : operand;
  if (!buffer.getDefiningOp<mlir::memref::AllocOp>()) return std::nullopt;
  r.writer = LastWholeWriter(buffer, op);
  if (!r.writer) return std::nullopt;
  Value yielded =
      llvm::cast<mlir::linalg::YieldOp>(r.writer.getRegion().front().getTerminator())
          .getOperand(0);
  std::optional<Widened> widened = WidenedFrom(yielded);
  if (!widened) return std::nullopt;
  r.format = widened->format;
  // A copy whose source still holds the same values: read the source.
  std::optional<OperandCopy> copy = AsOperandCopy(r.writer);
  if (copy && copy->widens == r.format) {
    const Value source = r.writer.getDpsInputOperand(0)->get();
    const bool identity =
        source.getType().cast<mlir::MemRefType>().getLayout().isIdentity();
    if (UnwrittenBetween(source, r.writer, op) &&
        (!r.collapse || (!copy->transposed && identity))) {
      r.source = source;
      r.transposed = copy->transposed;
    }
  }
  return r;
}

Value NarrowTwin(mlir::linalg::GenericOp writer, NarrowFloat format,
                 llvm::DenseMap<mlir::Operation*, Value>& twins) {
  if (auto it = twins.find(writer.getOperation()); it != twins.end()) {
    return it->second;
  }
  OpBuilder b(writer);
  const Location l = writer.getLoc();
  auto wide = writer.getDpsInitOperand(0)->get().getType().cast<mlir::MemRefType>();
  const Type element = StorageType(b.getContext(), format);
  Value narrow = b.create<mlir::memref::AllocOp>(
      l, mlir::MemRefType::get(wide.getShape(), element),
      b.getI64IntegerAttr(64));
  b.setInsertionPointAfter(writer);
  auto twin = llvm::cast<mlir::linalg::GenericOp>(b.clone(*writer.getOperation()));
  twin.getDpsInitOperand(0)->set(narrow);
  mlir::Block& body = twin.getRegion().front();
  body.getArgument(twin.getNumDpsInputs()).setType(element);
  mlir::Operation* yield = body.getTerminator();
  Value widened = yield->getOperand(0);
  yield->setOperand(0, WidenedFrom(widened)->narrow);
  // The widening is dead now: bitcast, shli, extui (bf16) or extf (f16).
  for (mlir::Operation* dead = widened.getDefiningOp(); dead != nullptr;) {
    if (!dead->use_empty()) break;
    mlir::Operation* next = dead->getOperand(0).getDefiningOp();
    dead->erase();
    next = next != nullptr && next->getBlock() == &body ? next : nullptr;
    dead = next;
  }
  OpBuilder(writer->getBlock()->getTerminator())
      .create<mlir::memref::DeallocOp>(l, narrow);
  twins[writer.getOperation()] = narrow;
  return narrow;
}

bool WrittenValuesRead(mlir::linalg::GenericOp writer) {
  const Value buffer = writer.getDpsInitOperand(0)->get();
  for (mlir::Operation* p = writer->getNextNode(); p != nullptr; p = p->getNextNode()) {
    bool touches = false;
    p->walk([&](mlir::Operation* inner) {
      if (llvm::isa<mlir::ViewLikeOpInterface, mlir::memref::DeallocOp>(inner)) return;
      for (Value operand : inner->getOperands()) {
        if (operand.getType().isa<mlir::MemRefType>() && BaseBuffer(operand) == buffer) {
          touches = true;
        }
      }
    });
    if (!touches) continue;
    auto generic = llvm::dyn_cast<mlir::linalg::GenericOp>(p);
    return !(generic && OverwritesWhole(generic, buffer));
  }
  return false;
}

void EraseUnreadWriters(llvm::ArrayRef<mlir::linalg::GenericOp> writers) {
  llvm::SmallPtrSet<mlir::Operation*, 8> seen;
  llvm::SmallVector<mlir::linalg::GenericOp> unique;
  for (mlir::linalg::GenericOp w : writers) {
    if (seen.insert(w.getOperation()).second) unique.push_back(w);
  }
  // Views first (the GEMMs' old collapse_shapes), innermost users first.
  std::function<void(Value)> erase_unused_views = [&](Value v) {
    for (mlir::Operation* user : llvm::make_early_inc_range(v.getUsers())) {
      if (!llvm::isa<mlir::ViewLikeOpInterface>(user) || user->getNumResults() != 1) continue;
      erase_unused_views(user->getResult(0));
      if (user->use_empty()) user->erase();
    }
  };
  for (mlir::linalg::GenericOp w : unique) {
    erase_unused_views(w.getDpsInitOperand(0)->get());
  }
  llvm::SmallVector<mlir::memref::AllocOp> buffers;
  llvm::SmallPtrSet<mlir::Operation*, 8> seen_buffers;
  for (mlir::linalg::GenericOp w : unique) {
    if (WrittenValuesRead(w)) continue;
    auto alloc = w.getDpsInitOperand(0)->get().getDefiningOp<mlir::memref::AllocOp>();
    if (alloc && seen_buffers.insert(alloc.getOperation()).second) buffers.push_back(alloc);
    w->erase();
  }
  for (mlir::memref::AllocOp alloc : buffers) {
    const bool unused = llvm::all_of(alloc->getUsers(), [](mlir::Operation* u) {
      return llvm::isa<mlir::memref::DeallocOp>(u);
    });
    if (!unused) continue;
    for (mlir::Operation* user : llvm::make_early_inc_range(alloc->getUsers())) user->erase();
    alloc->erase();
  }
}

mlir::linalg::FillOp ZeroFillOf(Value c, mlir::Operation* op) {
  for (mlir::Operation* prev = op->getPrevNode(); prev != nullptr;
       prev = prev->getPrevNode()) {
    if (mlir::isMemoryEffectFree(prev)) continue;
    auto fill = llvm::dyn_cast<mlir::linalg::FillOp>(prev);
    mlir::FloatAttr value;
    if (!fill || fill.getDpsInitOperand(0)->get() != c ||
        !mlir::matchPattern(fill.getDpsInputOperand(0)->get(),
                            mlir::m_Constant(&value)) ||
        !value.getValue().isPosZero()) {
      return nullptr;
    }
    return fill;
  }
  return nullptr;
}

bool IsConstantInt(Value v, int64_t expected) {
  mlir::APInt c;
  return mlir::matchPattern(v, mlir::m_ConstantInt(&c)) &&
         c.getSExtValue() == expected;
}

Value RoundedToBf16(Value v) {
  auto trunc = v.getDefiningOp<mlir::arith::TruncIOp>();
  auto select = trunc ? trunc.getIn().getDefiningOp<mlir::arith::SelectOp>()
                      : nullptr;
  if (!select || !IsConstantInt(select.getTrueValue(), 0x7fc0)) return nullptr;
  auto nan = select.getCondition().getDefiningOp<mlir::arith::CmpFOp>();
  if (!nan || nan.getPredicate() != mlir::arith::CmpFPredicate::UNO ||
      nan.getLhs() != nan.getRhs()) {
    return nullptr;
  }
  const Value x = nan.getLhs();
  auto rounded = select.getFalseValue().getDefiningOp<mlir::arith::ShRUIOp>();
  if (!rounded || !IsConstantInt(rounded.getRhs(), 16)) return nullptr;
  auto sum = Ordered(rounded.getLhs().getDefiningOp<mlir::arith::AddIOp>(),
                     [](Value v) {
                       return static_cast<bool>(
                           v.getDefiningOp<mlir::arith::BitcastOp>());
                     });
  if (!sum) return nullptr;
  auto bits = sum->first.getDefiningOp<mlir::arith::BitcastOp>();
  auto bias = Ordered(sum->second.getDefiningOp<mlir::arith::AddIOp>(),
                      [](Value v) { return IsConstantInt(v, 0x7fff); });
  if (bits.getIn() != x || !bias) return nullptr;
  auto lsb = Ordered(bias->second.getDefiningOp<mlir::arith::AndIOp>(),
                     [](Value v) { return IsConstantInt(v, 1); });
  if (!lsb) return nullptr;
  auto high = lsb->second.getDefiningOp<mlir::arith::ShRUIOp>();
  if (!high || high.getLhs() != bits.getResult() ||
      !IsConstantInt(high.getRhs(), 16)) {
    return nullptr;
  }
  return x;
}

bool IsBf16Widening(Value v, Value bits) {
  auto cast = v.getDefiningOp<mlir::arith::BitcastOp>();
  auto shift = cast ? cast.getIn().getDefiningOp<mlir::arith::ShLIOp>() : nullptr;
  auto ext = shift ? shift.getLhs().getDefiningOp<mlir::arith::ExtUIOp>() : nullptr;
  return ext && ext.getIn() == bits && IsConstantInt(shift.getRhs(), 16) &&
         cast.getType().isF32();
}

namespace {

// True if `v` is bits & 0x7fff.
bool IsMagnitudeOf(Value v, Value bits) {
  auto terms = Ordered(v.getDefiningOp<mlir::arith::AndIOp>(),
                       [](Value c) { return IsConstantInt(c, 0x7fff); });
  return terms && terms->second == bits;
}

// True if `v` is the ordered key of `bits`: the magnitude, negated when the
// sign is set ((magnitude ^ sign) - sign, sign = bits >> 15 arithmetic).
bool IsKeyOf(Value v, Value bits) {
  auto sub = v.getDefiningOp<mlir::arith::SubIOp>();
  auto sign =
      sub ? sub.getRhs().getDefiningOp<mlir::arith::ShRSIOp>() : nullptr;
  if (!sign || sign.getLhs() != bits || !IsConstantInt(sign.getRhs(), 15)) {
    return false;
  }
  auto flip = Ordered(sub.getLhs().getDefiningOp<mlir::arith::XOrIOp>(),
                      [&](Value x) { return x == sign.getResult(); });
  return flip && IsMagnitudeOf(flip->second, bits);
}

// True if `v` is key(bits) < 0.
bool IsBelowZero(Value v, Value bits) {
  auto cmp = v.getDefiningOp<mlir::arith::CmpIOp>();
  return cmp && cmp.getPredicate() == mlir::arith::CmpIPredicate::slt &&
         IsConstantInt(cmp.getRhs(), 0) && IsKeyOf(cmp.getLhs(), bits);
}

// True if `v` is magnitude(bits) <= 0x7f80 (not NaN), or < 0x7f81.
bool IsNotNaN(Value v, Value bits) {
  auto cmp = v.getDefiningOp<mlir::arith::CmpIOp>();
  if (!cmp || !IsMagnitudeOf(cmp.getLhs(), bits)) return false;
  return (cmp.getPredicate() == mlir::arith::CmpIPredicate::sle &&
          IsConstantInt(cmp.getRhs(), 0x7f80)) ||
         (cmp.getPredicate() == mlir::arith::CmpIPredicate::slt &&
          IsConstantInt(cmp.getRhs(), 0x7f81));
}

}  // namespace

Value Bf16ReluInput(Value v) {
  auto select = v.getDefiningOp<mlir::arith::SelectOp>();
  mlir::FloatAttr zero;
  if (!select ||
      !mlir::matchPattern(select.getTrueValue(), mlir::m_Constant(&zero)) ||
      !zero.getValue().isPosZero()) {
    return nullptr;
  }
  std::optional<Widened> widened = WidenedFrom(select.getFalseValue());
  if (!widened || widened->format != NarrowFloat::kBF16) return nullptr;
  const Value bits = widened->narrow;
  auto both = Ordered(select.getCondition().getDefiningOp<mlir::arith::AndIOp>(),
                      [&](Value c) { return IsBelowZero(c, bits); });
  if (!both || !IsNotNaN(both->second, bits)) return nullptr;
  return bits;
}

}  // namespace rbln::compiler
