#include "rbln/compiler/transforms/library/library_calls.h"

#include <algorithm>
#include <optional>

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/BuiltinTypes.h"
#include "rbln/compiler/abi/kernel_abi.h"

namespace rbln::compiler {

int64_t LibraryCallBlocks(int64_t work, int64_t split_extent) {
  return std::max<int64_t>(
      1, std::min({kMaxGemmBlocks, work / kMinGemmBlockWork, split_extent}));
}

mlir::func::FuncOp DeclareLibraryFunction(mlir::ModuleOp module,
                                          llvm::StringRef name,
                                          mlir::FunctionType type) {
  if (auto existing = module.lookupSymbol<mlir::func::FuncOp>(name)) {
    return existing.getFunctionType() == type ? existing : nullptr;
  }
  if (module.lookupSymbol(name)) return nullptr;
  auto b = mlir::OpBuilder::atBlockBegin(module.getBody());
  auto decl = b.create<mlir::func::FuncOp>(module.getLoc(), name, type);
  decl.setPrivate();
  return decl;
}

mlir::func::FuncOp DeclareLibraryFunction(mlir::ModuleOp module,
                                          llvm::StringRef name, int num_args) {
  mlir::OpBuilder b(module.getContext());
  return DeclareLibraryFunction(
      module, name,
      b.getFunctionType(llvm::SmallVector<mlir::Type>(num_args, b.getI64Type()),
                        {}));
}

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

mlir::Value ProblemWordsAddress(mlir::OpBuilder& b, mlir::Location l,
                                mlir::memref::GlobalOp problem) {
  mlir::Value words = b.create<mlir::memref::GetGlobalOp>(
      l, problem.getType(), problem.getSymName());
  return b.create<mlir::arith::IndexCastOp>(
      l, b.getI64Type(),
      b.create<mlir::memref::ExtractAlignedPointerAsIndexOp>(l, words));
}

std::optional<GemmOperandType> LibraryOperandType(mlir::Type element) {
  if (element.isF32()) return GemmOperandType::kF32;
  if (element.isInteger(16)) return GemmOperandType::kBF16;  // bf16 bits
  if (element.isF16()) return GemmOperandType::kF16;
  return std::nullopt;
}

void EmitBlockedCalls(mlir::OpBuilder& b, mlir::Location l,
                      mlir::func::FuncOp callee,
                      llvm::SmallVector<mlir::Value> args, int64_t blocks,
                      int64_t work) {
  auto i64 = [&](int64_t v) -> mlir::Value {
    return b.create<mlir::arith::ConstantIntOp>(l, v, 64);
  };
  auto index = [&](int64_t v) -> mlir::Value {
    return b.create<mlir::arith::ConstantIndexOp>(l, v);
  };
  auto work_attr = b.getI64IntegerAttr(work);
  if (blocks == 1) {
    args.append({i64(0), i64(1)});
    auto call = b.create<mlir::func::CallOp>(l, callee, args);
    call->setAttr(kWorkAttr, work_attr);
    return;
  }
  args.push_back(nullptr);  // the block, set in the loop
  args.push_back(i64(blocks));
  auto loop = b.create<mlir::scf::ForOp>(
      l, index(0), index(blocks), index(1), std::nullopt,
      [&](mlir::OpBuilder& nb, mlir::Location, mlir::Value i,
          mlir::ValueRange) {
        args[args.size() - 2] =
            nb.create<mlir::arith::IndexCastOp>(l, nb.getI64Type(), i);
        nb.create<mlir::func::CallOp>(l, callee, args);
        nb.create<mlir::scf::YieldOp>(l);
      });
  loop->setAttr(kParallelIterationsAttr, b.getUnitAttr());
  loop->setAttr(kWorkAttr, work_attr);
}

}  // namespace rbln::compiler
