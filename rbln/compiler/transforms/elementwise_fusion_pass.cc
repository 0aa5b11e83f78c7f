// MLIR's linalg-fuse-elementwise-ops with MLIR 16's reach for reshapes, for
// the MLIR 19 pipeline table (SPEC P1, P3, P5).
//
// From MLIR 18 on, linalg-fuse-elementwise-ops also propagates
// tensor.expand_shape/collapse_shape through reductions and named ops: the
// `linear` frontend's collapse -> linalg.matmul_transpose_b -> expand
// becomes one 4-d linalg.generic contraction (and its linalg.fill a
// generic), which the BLAS rewrite cannot see as a GEMM. This pass runs the
// same patterns as MLIR's (element-wise fusion, reshape folding by
// expansion, the same canonicalizations and constant folding, top-down
// greedy driver) but folds a reshape only into an all-parallel
// linalg.generic, as MLIR 16 did; element-wise fusion is unchanged.

#include "rbln/compiler/transforms/passes.h"

#include <memory>
#include <mutex>
#include <utility>

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "rbln/compiler/pipelines/mlir_compat.h"

namespace rbln::compiler {
namespace {

// MLIR's default for every pattern of the pass: fuse a producer with a
// single use.
bool ProducerHasOneUse(mlir::OpOperand* fused) {
  mlir::Operation* producer = fused->get().getDefiningOp();
  return producer && producer->hasOneUse();
}

// A reshape folds only into an element-wise linalg.generic (MLIR 16's rule):
// reductions and named ops such as matmul and fill keep their form.
bool IsElementwiseGeneric(mlir::Operation* op) {
  auto generic = llvm::dyn_cast<mlir::linalg::GenericOp>(op);
  return generic && generic.getNumLoops() == generic.getNumParallelLoops();
}

bool FoldsReshape(mlir::OpOperand* fused) {
  if (!ProducerHasOneUse(fused)) return false;
  // Either the reshape produces an operand of the linalg op (collapse_shape
  // into its consumer) or consumes its result (expand_shape of its producer).
  for (mlir::Operation* op :
       {fused->getOwner(), fused->get().getDefiningOp()}) {
    if (llvm::isa<mlir::linalg::LinalgOp>(op) && !IsElementwiseGeneric(op)) {
      return false;
    }
  }
  return true;
}

class ElementwiseFusionPass
    : public mlir::PassWrapper<ElementwiseFusionPass, mlir::OperationPass<>> {
 public:
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(ElementwiseFusionPass)

  llvm::StringRef getArgument() const final {
    return kElementwiseFusionPassName;
  }
  llvm::StringRef getDescription() const final {
    return "linalg-fuse-elementwise-ops, folding reshapes only into "
           "element-wise linalg.generic ops";
  }
  void getDependentDialects(mlir::DialectRegistry& registry) const override {
    registry.insert<compat::AffineDialect, mlir::linalg::LinalgDialect,
                    mlir::memref::MemRefDialect>();
  }

  void runOnOperation() override {
    mlir::Operation* op = getOperation();
    mlir::MLIRContext* context = op->getContext();
    mlir::RewritePatternSet patterns(context);
    mlir::linalg::populateElementwiseOpsFusionPatterns(patterns,
                                                       ProducerHasOneUse);
    mlir::linalg::populateFoldReshapeOpsByExpansionPatterns(patterns,
                                                            FoldsReshape);
    compat::AffineApplyOp::getCanonicalizationPatterns(patterns, context);
    mlir::linalg::GenericOp::getCanonicalizationPatterns(patterns, context);
    mlir::tensor::ExpandShapeOp::getCanonicalizationPatterns(patterns, context);
    mlir::tensor::CollapseShapeOp::getCanonicalizationPatterns(patterns,
                                                               context);
    context->getLoadedDialect<mlir::linalg::LinalgDialect>()
        ->getCanonicalizationPatterns(patterns);
    mlir::linalg::populateConstantFoldLinalgOperations(patterns,
                                                       ProducerHasOneUse);
    mlir::GreedyRewriteConfig config;
    config.useTopDownTraversal = true;
    // As MLIR's pass: not converging is not an error.
    (void)mlir::applyPatternsAndFoldGreedily(op, std::move(patterns), config);
  }
};

}  // namespace

std::unique_ptr<mlir::Pass> CreateElementwiseFusionPass() {
  return std::make_unique<ElementwiseFusionPass>();
}

void RegisterElementwiseFusionPass() {
  static std::once_flag once;
  std::call_once(once, [] { mlir::PassRegistration<ElementwiseFusionPass>(); });
}

}  // namespace rbln::compiler
