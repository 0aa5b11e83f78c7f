// Row reductions with the rows innermost (SPEC P3, P5, A2).
//
// A linalg reduction over its innermost dimension (a softmax's row max and
// row sum, a norm's mean and variance) lowers to loops that run one row at
// a time: for each row, a chain of dependent float operations in index
// order (~4 cycles per element), which LLVM may not vectorize without
// reassociating the sum -- and P3 rules reassociation out. This pass moves
// the innermost parallel dimension inside the reduction dimensions: for
// each k, every row takes its k-th element. Each row still combines its
// elements in the same order, so every result keeps its bits, but the
// innermost loop now runs over independent rows, which LLVM vectorizes (one
// row per lane). Runs after partitioning (on the workers' slices), before
// the loops are lowered.

#include "rbln/compiler/transforms/passes.h"

#include <memory>

#include "llvm/ADT/SmallVector.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Utils/StructuredOpsUtils.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace rbln::compiler {
namespace {

// Fewer rows than this fill less than a vector of float32 lanes: the loop
// order stays.
constexpr int64_t kMinRows = 8;

class ReductionInterchangePass
    : public mlir::PassWrapper<ReductionInterchangePass,
                               mlir::OperationPass<mlir::func::FuncOp>> {
 public:
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(ReductionInterchangePass)

  llvm::StringRef getArgument() const final { return "rbln-interchange-reductions"; }
  llvm::StringRef getDescription() const final {
    return "moves the innermost parallel loop of an innermost-dim reduction inside it";
  }

  void runOnOperation() override {
    llvm::SmallVector<mlir::linalg::GenericOp> ops;
    getOperation().walk([&](mlir::linalg::GenericOp op) { ops.push_back(op); });
    mlir::IRRewriter rewriter(&getContext());
    for (mlir::linalg::GenericOp op : ops) {
      llvm::SmallVector<unsigned> order = Interchange(op);
      if (order.empty()) continue;
      rewriter.setInsertionPoint(op);
      (void)mlir::linalg::interchangeGenericOp(rewriter, op, order);
    }
  }

 private:
  // The new loop order (old dims, outermost first), or empty to keep it:
  // the last parallel dim moves behind the trailing reduction dims.
  static llvm::SmallVector<unsigned> Interchange(mlir::linalg::GenericOp op) {
    // A payload with side effects (a gather's index check that reports the
    // first bad index) keeps its order of elements.
    bool side_effects = false;
    op.getRegion().walk([&](mlir::Operation* nested) {
      if (!mlir::isMemoryEffectFree(nested) &&
          !llvm::isa<mlir::memref::LoadOp>(nested)) {
        side_effects = true;
      }
    });
    if (side_effects) return {};
    llvm::SmallVector<mlir::utils::IteratorType> iterators = op.getIteratorTypesArray();
    const int n = static_cast<int>(iterators.size());
    if (n < 2 || iterators.back() != mlir::utils::IteratorType::reduction) return {};
    int row = n - 1;
    while (row >= 0 && iterators[row] == mlir::utils::IteratorType::reduction) --row;
    if (row < 0) return {};  // a full reduction: nothing to vectorize across
    llvm::SmallVector<int64_t> ranges = op.getStaticLoopRanges();
    if (mlir::ShapedType::isDynamic(ranges[row]) || ranges[row] < kMinRows) return {};
    llvm::SmallVector<unsigned> order;
    for (int d = 0; d < n; ++d) {
      if (d != row) order.push_back(d);
    }
    order.push_back(row);
    return order;
  }
};

}  // namespace

std::unique_ptr<mlir::Pass> CreateReductionInterchangePass() {
  return std::make_unique<ReductionInterchangePass>();
}

}  // namespace rbln::compiler
