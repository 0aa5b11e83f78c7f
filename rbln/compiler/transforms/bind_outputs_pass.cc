// BindOutputs: makes each returned tensor be computed in its output argument.
//
// The kernel takes one `{bufferization.writable}` tensor argument per result.
// Fusion rewrites unused `outs` to fresh `tensor.empty`s, so after it each
// returned value's destination chain (through DPS inits) ends in a
// tensor.empty; this pass replaces that use with the output argument. Then
// one-shot bufferization writes the result in place into the caller's buffer
// and drop-equivalent-buffer-results removes the returns (SPEC P4).

#include "rbln/compiler/transforms/passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Interfaces/DestinationStyleOpInterface.h"
#include "mlir/Pass/Pass.h"

namespace rbln::compiler {
namespace {

class BindOutputsPass
    : public mlir::PassWrapper<BindOutputsPass,
                               mlir::OperationPass<mlir::func::FuncOp>> {
 public:
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(BindOutputsPass)

  llvm::StringRef getArgument() const final { return "rbln-bind-outputs"; }
  llvm::StringRef getDescription() const final {
    return "Compute returned tensors in their writable output arguments";
  }

  void runOnOperation() override {
    mlir::func::FuncOp func = getOperation();
    if (func.isExternal()) return;
    auto ret = llvm::cast<mlir::func::ReturnOp>(func.getBody().back().getTerminator());
    const unsigned num_results = ret.getNumOperands();
    const unsigned first_output = func.getNumArguments() - num_results;
    for (unsigned i = 0; i < num_results; ++i) {
      mlir::Value out_arg = func.getArgument(first_output + i);
      if (!func.getArgAttr(first_output + i, "bufferization.writable")) {
        ret.emitOpError() << "result " << i
                          << " has no writable output argument";
        return signalPassFailure();
      }
      if (ret.getOperand(i) == out_arg) continue;
      if (mlir::failed(Bind(ret.getOperand(i), out_arg))) {
        // Canonicalization can fold an identity op away (clone, x * 1.0) so
        // the result is a function argument or some other value: copy it
        // into the output argument.
        ret->setOperand(i, CopyInto(ret, ret.getOperand(i), out_arg));
      }
    }
  }

 private:
  // An identity linalg.generic from `value` into `out_arg`, before `ret`.
  static mlir::Value CopyInto(mlir::func::ReturnOp ret, mlir::Value value,
                              mlir::Value out_arg) {
    mlir::OpBuilder b(ret);
    const auto type = out_arg.getType().cast<mlir::RankedTensorType>();
    const int64_t rank = type.getRank();
    llvm::SmallVector<mlir::AffineMap> maps(2, b.getMultiDimIdentityMap(rank));
    llvm::SmallVector<mlir::utils::IteratorType> iterators(
        rank, mlir::utils::IteratorType::parallel);
    auto copy = b.create<mlir::linalg::GenericOp>(
        ret.getLoc(), mlir::TypeRange{type}, mlir::ValueRange{value},
        mlir::ValueRange{out_arg}, maps, iterators,
        [](mlir::OpBuilder& nested, mlir::Location loc, mlir::ValueRange args) {
          nested.create<mlir::linalg::YieldOp>(loc, args[0]);
        });
    return copy.getResult(0);
  }

  // Follows result -> tied init through DPS ops (and scf.for iter args) to
  // the tensor.empty at the root and binds that operand to `out_arg`.
  static mlir::LogicalResult Bind(mlir::Value result, mlir::Value out_arg) {
    while (true) {
      if (result == out_arg) return mlir::success();  // Already bound.
      auto op_result = result.dyn_cast<mlir::OpResult>();
      if (!op_result) return mlir::failure();
      // A loop that updates a tensor (index_copy's slices) computes its
      // result in the buffer of its init.
      if (auto loop = llvm::dyn_cast<mlir::scf::ForOp>(op_result.getOwner())) {
        result = loop.getInitArgs()[op_result.getResultNumber()];
        continue;
      }
      auto dps = llvm::dyn_cast<mlir::DestinationStyleOpInterface>(
          op_result.getOwner());
      if (!dps) return mlir::failure();
      mlir::OpOperand* init =
          dps.getDpsInitOperand(op_result.getResultNumber());
      if (init->get().getDefiningOp<mlir::tensor::EmptyOp>()) {
        init->set(out_arg);
        return mlir::success();
      }
      // An init other ops also start from (CSE merges equal linalg.fill
      // inits of two reductions) cannot become the output buffer: the others
      // would write it too. Copy instead.
      if (!init->get().hasOneUse()) return mlir::failure();
      result = init->get();
    }
  }
};

}  // namespace

std::unique_ptr<mlir::Pass> CreateBindOutputsPass() {
  return std::make_unique<BindOutputsPass>();
}

}  // namespace rbln::compiler
