#include "rbln/compiler/fill_unsharing_pass.h"

#include <memory>

#include "llvm/ADT/SmallVector.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"

namespace rbln::compiler {
namespace {

class FillUnsharingPass
    : public mlir::PassWrapper<FillUnsharingPass,
                               mlir::OperationPass<mlir::func::FuncOp>> {
 public:
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(FillUnsharingPass)

  llvm::StringRef getArgument() const final { return "rbln-unshare-fills"; }
  llvm::StringRef getDescription() const final {
    return "clones a tensor linalg.fill for each linalg destination it "
           "initializes";
  }

  void runOnOperation() override {
    llvm::SmallVector<mlir::linalg::FillOp> fills;
    // On tensors (a fill on a buffer has no result).
    getOperation().walk([&](mlir::linalg::FillOp fill) {
      if (fill->getNumResults() == 1) fills.push_back(fill);
    });
    for (mlir::linalg::FillOp fill : fills) {
      llvm::SmallVector<mlir::OpOperand*> destinations;
      for (mlir::OpOperand& use : fill->getResult(0).getUses()) {
        auto user = llvm::dyn_cast<mlir::linalg::LinalgOp>(use.getOwner());
        if (user && user.isDpsInit(&use)) destinations.push_back(&use);
      }
      // A fill that already is its only destination's producer stays.
      if (destinations.size() == 1 && fill->getResult(0).hasOneUse() &&
          fill->getNextNode() == destinations[0]->getOwner()) {
        continue;
      }
      for (mlir::OpOperand* use : destinations) {
        mlir::OpBuilder b(use->getOwner());
        mlir::Value init = fill.getOutputs()[0];
        mlir::Operation* empty = init.getDefiningOp<mlir::tensor::EmptyOp>();
        mlir::Value own_init = empty ? b.clone(*empty)->getResult(0) : init;
        mlir::Operation* clone = b.clone(*fill);
        clone->getOpOperand(1).set(own_init);
        use->set(clone->getResult(0));
      }
      if (fill->use_empty()) {
        mlir::Operation* empty = fill.getOutputs()[0].getDefiningOp();
        fill->erase();
        if (empty && llvm::isa<mlir::tensor::EmptyOp>(empty) &&
            empty->use_empty()) {
          empty->erase();
        }
      }
    }
  }
};

}  // namespace

std::unique_ptr<mlir::Pass> CreateFillUnsharingPass() {
  return std::make_unique<FillUnsharingPass>();
}

}  // namespace rbln::compiler
