// Reductions that keep their accumulators in registers (SPEC P3, A2).
//
// convert-linalg-to-loops lowers a reduction's payload to a load of the
// output element, the payload and a store back, once per reduced element:
// the accumulator lives in memory, since LLVM cannot prove the output does
// not alias the inputs. On one worker that costs a store-to-load forwarding
// per element; on a program partitioned over the chiplet workers it is far
// worse: the workers' output elements (an argmax's 8 rows split 2 per
// worker) share a cache line, which then moves between the cores on every
// element (a decode step's argmax over 128256 logits took ~30 ms instead of
// ~1). This pass lowers a generic whose innermost loops are all reductions
// (rows not interchanged inside them) to loops of its own: per output
// element, one load, an scf.for carrying the accumulators, one store. The
// elements combine in the same order, so every result keeps its bits.
// Runs after the interchange, before the remaining linalg becomes loops.

#include "rbln/compiler/transforms/passes.h"

#include <memory>

#include "llvm/ADT/SmallVector.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Utils/StructuredOpsUtils.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "rbln/compiler/pipelines/mlir_compat.h"

namespace rbln::compiler {
namespace {

using mlir::Value;

class RegisterAccumulatorPass
    : public mlir::PassWrapper<RegisterAccumulatorPass,
                               mlir::OperationPass<mlir::func::FuncOp>> {
 public:
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(RegisterAccumulatorPass)

  llvm::StringRef getArgument() const final { return "rbln-register-accumulators"; }
  llvm::StringRef getDescription() const final {
    return "lowers innermost reductions to loops that carry their accumulators";
  }
  void getDependentDialects(mlir::DialectRegistry& registry) const override {
    registry.insert<mlir::scf::SCFDialect, mlir::arith::ArithDialect,
                    mlir::memref::MemRefDialect, compat::AffineDialect>();
  }

  void runOnOperation() override {
    llvm::SmallVector<mlir::linalg::GenericOp> ops;
    getOperation().walk([&](mlir::linalg::GenericOp op) {
      if (Applies(op)) ops.push_back(op);
    });
    mlir::IRRewriter rewriter(&getContext());
    for (mlir::linalg::GenericOp op : ops) Lower(rewriter, op);
  }

 private:
  // The first of the innermost loops that are all reductions (the loop
  // count if the innermost one is parallel).
  static int FirstTrailingReduction(mlir::linalg::GenericOp op) {
    llvm::SmallVector<mlir::utils::IteratorType> iterators = op.getIteratorTypesArray();
    int first = static_cast<int>(iterators.size());
    while (first > 0 && iterators[first - 1] == mlir::utils::IteratorType::reduction) --first;
    return first;
  }

  // Innermost reduction loops over buffers, outputs indexed by the
  // parallel loops only, none of them also read as an input, and a payload
  // without side effects (a gather's index check keeps linalg's lowering).
  static bool Applies(mlir::linalg::GenericOp op) {
    llvm::SmallVector<mlir::utils::IteratorType> iterators = op.getIteratorTypesArray();
    const int n = static_cast<int>(iterators.size());
    const int first_reduction = FirstTrailingReduction(op);
    if (first_reduction == n) return false;
    for (int d = 0; d < first_reduction; ++d) {
      if (iterators[d] != mlir::utils::IteratorType::parallel) return false;
    }
    for (int64_t extent : op.getStaticLoopRanges()) {
      if (mlir::ShapedType::isDynamic(extent)) return false;
    }
    for (Value v : op->getOperands()) {
      if (llvm::isa<mlir::ShapedType>(v.getType()) && !llvm::isa<mlir::MemRefType>(v.getType())) {
        return false;  // not bufferized
      }
    }
    for (int i = 0; i < op.getNumDpsInits(); ++i) {
      mlir::OpOperand& out = *op.getDpsInitOperand(i);
      if (!llvm::isa<mlir::MemRefType>(out.get().getType())) return false;
      mlir::AffineMap map = op.getMatchingIndexingMap(&out);
      for (int d = first_reduction; d < n; ++d) {
        if (map.isFunctionOfDim(d)) return false;
      }
      for (Value in : op.getInputs()) {
        if (in == out.get()) return false;
      }
    }
    bool unsupported = false;
    op.getRegion().walk([&](mlir::Operation* nested) {
      if (!mlir::isMemoryEffectFree(nested)) unsupported = true;
      // linalg.index is replaced at the payload's top level only.
      if (llvm::isa<mlir::linalg::IndexOp>(nested) &&
          nested->getBlock() != &op.getRegion().front()) {
        unsupported = true;
      }
    });
    return !unsupported;
  }

  // The indices of `operand`'s element at the loop indices `ivs` (one per
  // loop).
  static llvm::SmallVector<Value> Indices(mlir::OpBuilder& b, mlir::Location loc,
                                          mlir::linalg::GenericOp op, mlir::OpOperand& operand,
                                          mlir::ValueRange ivs) {
    mlir::AffineMap map = op.getMatchingIndexingMap(&operand);
    llvm::SmallVector<Value> indices;
    for (mlir::AffineExpr e : map.getResults()) {
      indices.push_back(b.create<compat::AffineApplyOp>(
          loc, mlir::AffineMap::get(map.getNumDims(), 0, e), ivs));
    }
    return indices;
  }

  // The element of `operand` at the loop indices `ivs` (a scalar operand
  // itself).
  static Value Load(mlir::OpBuilder& b, mlir::Location loc, mlir::linalg::GenericOp op,
                    mlir::OpOperand& operand, mlir::ValueRange ivs) {
    if (!llvm::isa<mlir::MemRefType>(operand.get().getType())) return operand.get();
    return b.create<mlir::memref::LoadOp>(loc, operand.get(), Indices(b, loc, op, operand, ivs));
  }

  // Nested scf.for loops over [0, extents[d]) for d in [dim, end), carrying `iter` through the
  // innermost body; returns the outermost loop's results (`iter` itself when
  // `dims` is empty).
  template <typename Body>
  static llvm::SmallVector<Value> Nest(mlir::OpBuilder& b, mlir::Location loc,
                                       llvm::ArrayRef<int64_t> extents, int dim, int end,
                                       llvm::SmallVector<Value>& ivs, mlir::ValueRange iter,
                                       const Body& body) {
    if (dim == end) return body(b, loc, iter);
    auto loop = b.create<mlir::scf::ForOp>(
        loc, b.create<mlir::arith::ConstantIndexOp>(loc, 0),
        b.create<mlir::arith::ConstantIndexOp>(loc, extents[dim]),
        b.create<mlir::arith::ConstantIndexOp>(loc, 1), iter,
        [&](mlir::OpBuilder& nb, mlir::Location nloc, Value iv, mlir::ValueRange args) {
          ivs.push_back(iv);
          llvm::SmallVector<Value> results = Nest(nb, nloc, extents, dim + 1, end, ivs, args, body);
          ivs.pop_back();
          nb.create<mlir::scf::YieldOp>(nloc, results);
        });
    return llvm::SmallVector<Value>(loop.getResults().begin(), loop.getResults().end());
  }

  static void Lower(mlir::IRRewriter& rewriter, mlir::linalg::GenericOp op) {
    const mlir::Location loc = op.getLoc();
    rewriter.setInsertionPoint(op);
    const llvm::SmallVector<int64_t> extents = op.getStaticLoopRanges();
    const int n = static_cast<int>(extents.size());
    const int first_reduction = FirstTrailingReduction(op);
    mlir::Block& payload = op.getRegion().front();
    llvm::SmallVector<Value> ivs;
    auto reduce_body = [&](mlir::OpBuilder& b, mlir::Location l, mlir::ValueRange accs) {
      mlir::IRMapping map;
      int arg = 0;
      for (mlir::OpOperand* in : op.getDpsInputOperands()) {
        map.map(payload.getArgument(arg++), Load(b, l, op, *in, ivs));
      }
      for (Value acc : accs) map.map(payload.getArgument(arg++), acc);
      for (mlir::Operation& nested : payload.without_terminator()) {
        if (auto index = llvm::dyn_cast<mlir::linalg::IndexOp>(nested)) {
          map.map(index.getResult(), ivs[index.getDim()]);
          continue;
        }
        b.clone(nested, map);
      }
      llvm::SmallVector<Value> yielded;
      for (Value v : payload.getTerminator()->getOperands()) {
        yielded.push_back(map.lookupOrDefault(v));
      }
      return yielded;
    };
    auto row_body = [&](mlir::OpBuilder& b, mlir::Location l, mlir::ValueRange) {
      // The outputs do not use the reduction dims: any index stands for them.
      llvm::SmallVector<Value> row_ivs = ivs;
      row_ivs.resize(n, b.create<mlir::arith::ConstantIndexOp>(l, 0));
      llvm::SmallVector<Value> inits;
      for (int i = 0; i < op.getNumDpsInits(); ++i) {
        inits.push_back(Load(b, l, op, *op.getDpsInitOperand(i), row_ivs));
      }
      llvm::SmallVector<Value> results =
          Nest(b, l, extents, first_reduction, n, ivs, inits, reduce_body);
      for (int i = 0; i < op.getNumDpsInits(); ++i) {
        mlir::OpOperand& out = *op.getDpsInitOperand(i);
        b.create<mlir::memref::StoreOp>(l, results[i], out.get(),
                                        Indices(b, l, op, out, row_ivs));
      }
      return llvm::SmallVector<Value>{};
    };
    Nest(rewriter, loc, extents, 0, first_reduction, ivs, {}, row_body);
    rewriter.eraseOp(op);
  }
};

}  // namespace

std::unique_ptr<mlir::Pass> CreateRegisterAccumulatorPass() {
  return std::make_unique<RegisterAccumulatorPass>();
}

}  // namespace rbln::compiler
