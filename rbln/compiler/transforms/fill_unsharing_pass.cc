// One linalg.fill per destination it initializes (SPEC P4, P5).
//
// CSE merges identical fills: the q, k and v projections of an attention
// layer then all start from one zero-filled tensor. One-shot bufferization
// gives each matmul its own buffer as a copy of the filled one (each
// matmul writes its destination), so every GEMM pays a memref.copy of its
// whole C and, with the fill no longer its direct producer, the BLAS
// rewrite must accumulate into C instead of overwriting it -- no
// zero-fill elision, no bf16 store epilogue, and chiplet workers' column
// blocks of C copied in and out. The same happens, without the copy, when
// a fill sits apart from its GEMM (the rewrite drops a zero fill only if
// it directly precedes the GEMM). This pass, on tensors before
// bufferization, gives every linalg destination use of a fill its own
// clone of the fill and of the tensor.empty it fills, right before the
// destination's op, so that after bufferization each C is allocated and
// zero-filled just before the op that writes it. The same for the
// destinations of tensor.insert_slice: a tensor.pad is a fill and an
// insert_slice into it, and CSE lets pads of one shape share the fill, which
// bufferization then copies whole for each pad (a convolution's padded input
// written twice; the conv rewrite reads the unpadded input only when the
// fill and the copy are its own).

#include "rbln/compiler/transforms/passes.h"

#include <memory>

#include "llvm/ADT/SmallVector.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "rbln/compiler/pipelines/mlir_compat.h"

namespace rbln::compiler {
namespace {

// The init operand of the op that computed the value `insert` writes back
// into `fill` in place, in a slice of it at the same place (tensor.pad's
// lowering: a linalg.copy into an extract_slice of the fill), or null.
mlir::OpOperand* InteriorInit(mlir::tensor::InsertSliceOp insert,
                              mlir::Value fill) {
  auto result = insert.getSource().dyn_cast<mlir::OpResult>();
  auto producer =
      result ? llvm::dyn_cast<mlir::linalg::LinalgOp>(result.getOwner())
             : nullptr;
  if (!producer) return nullptr;
  mlir::OpOperand* init =
      compat::DpsInitOperands(producer)[result.getResultNumber()];
  auto slice = init->get().getDefiningOp<mlir::tensor::ExtractSliceOp>();
  if (!slice || slice.getSource() != fill || !slice.getOffsets().empty() ||
      !slice.getSizes().empty() || !slice.getStrides().empty() ||
      !insert.getOffsets().empty() || !insert.getSizes().empty() ||
      !insert.getStrides().empty() ||
      slice.getStaticOffsets() != insert.getStaticOffsets() ||
      slice.getStaticSizes() != insert.getStaticSizes() ||
      slice.getStaticStrides() != insert.getStaticStrides()) {
    return nullptr;
  }
  return init;
}

class FillUnsharingPass
    : public mlir::PassWrapper<FillUnsharingPass,
                               mlir::OperationPass<mlir::func::FuncOp>> {
 public:
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(FillUnsharingPass)

  llvm::StringRef getArgument() const final { return "rbln-unshare-fills"; }
  llvm::StringRef getDescription() const final {
    return "clones a tensor linalg.fill for each linalg or insert_slice "
           "destination it initializes";
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
        // A padding: tensor.pad becomes a fill and an insert_slice into it.
        auto insert =
            llvm::dyn_cast<mlir::tensor::InsertSliceOp>(use.getOwner());
        if (insert && use.get() == insert.getDest()) {
          destinations.push_back(&use);
        }
      }
      // A fill that already is its only destination's producer stays.
      if (destinations.size() == 1 && fill->getResult(0).hasOneUse() &&
          fill->getNextNode() == destinations[0]->getOwner()) {
        continue;
      }
      for (mlir::OpOperand* use : destinations) {
        // A padding's interior computed in place in a slice of the fill:
        // that slice comes from the same clone, else bufferization copies.
        // (CSE may have merged the slices of several paddings too.)
        auto insert =
            llvm::dyn_cast<mlir::tensor::InsertSliceOp>(use->getOwner());
        mlir::OpOperand* interior =
            insert ? InteriorInit(insert, fill.getResult(0)) : nullptr;
        mlir::OpBuilder b(interior ? interior->getOwner() : use->getOwner());
        mlir::Value init = fill.getOutputs()[0];
        mlir::Operation* empty = init.getDefiningOp<mlir::tensor::EmptyOp>();
        mlir::Value own_init = empty ? b.clone(*empty)->getResult(0) : init;
        mlir::Operation* clone = b.clone(*fill);
        clone->getOpOperand(1).set(own_init);
        use->set(clone->getResult(0));
        if (interior) {
          auto slice = llvm::cast<mlir::tensor::ExtractSliceOp>(
              b.clone(*interior->get().getDefiningOp()));
          slice.getSourceMutable().assign(clone->getResult(0));
          mlir::Operation* shared = interior->get().getDefiningOp();
          interior->set(slice.getResult());
          if (shared->use_empty()) shared->erase();
        }
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
