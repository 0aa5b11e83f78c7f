#include "rbln/compiler/problem_words.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"

namespace rbln::compiler {

mlir::memref::GlobalOp ProblemWordsGlobal(mlir::ModuleOp module,
                                          mlir::SymbolTable& symbols,
                                          llvm::StringRef name,
                                          const std::vector<int64_t>& words) {
  mlir::OpBuilder b(module.getContext());
  b.setInsertionPointToStart(module.getBody());
  auto type = mlir::MemRefType::get({static_cast<int64_t>(words.size())},
                                    b.getI64Type());
  auto value = mlir::DenseElementsAttr::get(
      mlir::RankedTensorType::get(type.getShape(), b.getI64Type()),
      llvm::ArrayRef<int64_t>(words));
  auto global = b.create<mlir::memref::GlobalOp>(
      module.getLoc(), name, b.getStringAttr("private"), type, value,
      /*constant=*/true, /*alignment=*/b.getI64IntegerAttr(8));
  symbols.insert(global);
  return global;
}

}  // namespace rbln::compiler
