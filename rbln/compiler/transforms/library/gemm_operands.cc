#include "rbln/compiler/transforms/library/gemm_operands.h"

#include "llvm/ADT/STLExtras.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/Interfaces/ViewLikeInterface.h"

namespace rbln::compiler {
namespace {

using ::mlir::OpBuilder;
using ::mlir::Value;

// Erases the views of `buffer` that nothing uses, innermost first.
void EraseUnusedViews(Value buffer) {
  for (mlir::Operation* user : llvm::make_early_inc_range(buffer.getUsers())) {
    auto view = llvm::dyn_cast<mlir::ViewLikeOpInterface>(user);
    if (!view || view.getViewSource() != buffer) continue;
    for (Value result : user->getResults()) EraseUnusedViews(result);
    if (user->use_empty()) user->erase();
  }
}

}  // namespace

GemmOperandType OperandTypeOf(NarrowFloat format) {
  return format == NarrowFloat::kBF16 ? GemmOperandType::kBF16
                                      : GemmOperandType::kF16;
}

std::optional<CopiedOperand> CopiedOperandOf(Value operand, mlir::Operation* op) {
  CopiedOperand w;
  w.collapse = operand.getDefiningOp<mlir::memref::CollapseShapeOp>();
  Value buffer = w.collapse ? w.collapse.getSrc() : operand;
  auto alloc = buffer.getDefiningOp<mlir::memref::AllocOp>();
  if (!alloc) return std::nullopt;
  for (mlir::Operation* user : alloc->getUsers()) {
    if (user == op || user == w.collapse.getOperation() ||
        llvm::isa<mlir::memref::DeallocOp>(user)) {
      continue;
    }
    auto generic = llvm::dyn_cast<mlir::linalg::GenericOp>(user);
    // Any other user (a view, another reader) might see the f32 values in
    // ways the GEMM cannot replace; two writers cannot be told apart.
    std::optional<OperandCopy> copy;
    if (generic && !w.generic && generic.getDpsInitOperand(0)->get() == buffer) {
      copy = AsOperandCopy(generic);
    }
    if (!copy || generic->getBlock() != op->getBlock() ||
        !generic->isBeforeInBlock(op) ||
        !UnwrittenBetween(generic.getDpsInputOperand(0)->get(), generic, op)) {
      return std::nullopt;
    }
    w.generic = generic;
    w.copy = *copy;
  }
  if (!w.generic) return std::nullopt;
  if (w.collapse) {
    if (!w.collapse->hasOneUse() || w.copy.transposed) return std::nullopt;
    auto source = w.generic.getDpsInputOperand(0)->get().getType().cast<mlir::MemRefType>();
    if (!source.getLayout().isIdentity()) return std::nullopt;
  }
  return w;
}

Value CopySource(CopiedOperand w, mlir::Operation* op) {
  Value source = w.generic.getDpsInputOperand(0)->get();
  if (!w.collapse) return source;
  OpBuilder b(op);
  return b.create<mlir::memref::CollapseShapeOp>(
      op->getLoc(), source, w.collapse.getReassociationIndices());
}

std::optional<Matrix> NarrowMatrix(NarrowOperand w, mlir::Operation* op,
                                   llvm::DenseMap<mlir::Operation*, Value>& twins) {
  Value narrow = w.source ? w.source : NarrowTwin(w.writer, w.format, twins);
  if (w.collapse) {
    narrow = OpBuilder(op).create<mlir::memref::CollapseShapeOp>(
        op->getLoc(), narrow, w.collapse.getReassociationIndices());
  }
  return AsMatrix(narrow, StorageType(op->getContext(), w.format));
}

llvm::SmallVector<mlir::Operation*> BufferUsers(Value buffer) {
  llvm::SmallVector<mlir::Operation*> users;
  llvm::SmallVector<Value> values = {buffer};
  while (!values.empty()) {
    Value v = values.pop_back_val();
    for (mlir::Operation* user : v.getUsers()) {
      auto view = llvm::dyn_cast<mlir::ViewLikeOpInterface>(user);
      if (view && view.getViewSource() == v) {
        values.append(user->result_begin(), user->result_end());
      } else if (!llvm::is_contained(users, user)) {
        users.push_back(user);
      }
    }
  }
  return users;
}

llvm::SmallPtrSet<mlir::Operation*, 8> ReplacedWriters(
    llvm::ArrayRef<mlir::linalg::GenericOp> writers,
    const llvm::DenseMap<mlir::Operation*,
                         llvm::SmallPtrSet<mlir::Operation*, 4>>& twin_readers) {
  llvm::SmallPtrSet<mlir::Operation*, 8> replaced;
  for (mlir::linalg::GenericOp w : writers) {
    auto it = twin_readers.find(w.getOperation());
    const Value buffer = w.getDpsInitOperand(0)->get();
    if (it == twin_readers.end() ||
        !buffer.getDefiningOp<mlir::memref::AllocOp>()) {
      continue;
    }
    const bool unread = llvm::all_of(BufferUsers(buffer), [&](mlir::Operation* u) {
      return u == w.getOperation() || llvm::isa<mlir::memref::DeallocOp>(u) ||
             it->second.contains(u);
    });
    if (unread) replaced.insert(w.getOperation());
  }
  return replaced;
}

void EraseIfUnused(Value buffer) {
  EraseUnusedViews(buffer);
  mlir::Operation* alloc = buffer.getDefiningOp();
  if (!alloc || !llvm::all_of(alloc->getUsers(), [](mlir::Operation* u) {
        return llvm::isa<mlir::memref::DeallocOp>(u);
      })) {
    return;
  }
  for (mlir::Operation* user : llvm::make_early_inc_range(alloc->getUsers())) {
    user->erase();
  }
  alloc->erase();
}

}  // namespace rbln::compiler
