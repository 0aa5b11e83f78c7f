#include "rbln/compiler/pipelines/mlir_compat.h"

#include "mlir/Dialect/LLVMIR/LLVMTypes.h"
#include "mlir/IR/BuiltinTypes.h"

namespace rbln::compiler::compat {

bool HasBufferSemantics(mlir::linalg::LinalgOp op) {
#if RBLN_MLIR_VERSION >= 18
  return op.hasPureBufferSemantics();
#else
  return op.hasBufferSemantics();
#endif
}

llvm::SmallVector<mlir::OpOperand*> DpsInitOperands(mlir::linalg::LinalgOp op) {
#if RBLN_MLIR_VERSION >= 18
  llvm::SmallVector<mlir::OpOperand*> inits;
  for (mlir::OpOperand& init : op.getDpsInitsMutable()) inits.push_back(&init);
  return inits;
#else
  return op.getDpsInitOperands();
#endif
}

mlir::Type MatrixPointerType(mlir::MLIRContext* context) {
#if RBLN_MLIR_VERSION >= 18
  return mlir::LLVM::LLVMPointerType::get(context);
#else
  return mlir::LLVM::LLVMPointerType::get(mlir::Float32Type::get(context));
#endif
}

}  // namespace rbln::compiler::compat
