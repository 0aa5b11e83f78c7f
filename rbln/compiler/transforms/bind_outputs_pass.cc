// BindOutputs: makes each returned tensor be computed in its output argument.
//
// The kernel takes one `{bufferization.writable}` tensor argument per result.
// Fusion rewrites unused `outs` to fresh `tensor.empty`s, so after it each
// returned value's destination chain (through DPS inits) ends in a
// tensor.empty; this pass replaces that use with the output argument. Then
// one-shot bufferization writes the result in place into the caller's buffer
// and drop-equivalent-buffer-results removes the returns (SPEC P4).
//
// An updated input (graph.proto's Update) is a result with no argument of
// its own: the importer returns the new value and marks the input argument
// with kUpdatedByResultAttr. When nothing reads the input's old bytes after
// the op at the root of the value's destination chain, the root is bound to
// the input, so the chain writes the input in place (an index_copy into a
// KV cache writes just its rows, and the copy of the cache it started from
// is dropped); otherwise the value is copied into the input last.

#include "rbln/compiler/transforms/passes.h"

#include <optional>

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Interfaces/DestinationStyleOpInterface.h"
#include "mlir/Pass/Pass.h"
#include "rbln/compiler/abi/kernel_abi.h"

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
    // Updated inputs: the results written into input arguments.
    llvm::SmallVector<std::pair<unsigned, mlir::Value>> updates;
    for (unsigned a = 0; a < func.getNumArguments(); ++a) {
      if (auto r = func.getArgAttrOfType<mlir::IntegerAttr>(a, kUpdatedByResultAttr)) {
        updates.emplace_back(static_cast<unsigned>(r.getInt()), func.getArgument(a));
      }
    }
    const unsigned num_results = ret.getNumOperands() - updates.size();
    const unsigned first_output = func.getNumArguments() - num_results;
    for (const auto& [result, input] : updates) BindUpdate(ret, result, input);
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

  // The root of a destination chain (see Bind): the DPS init to replace
  // (a tensor.empty; null when the chain already starts from the argument)
  // and the op that owns it.
  struct Root {
    mlir::OpOperand* init = nullptr;
    mlir::Operation* op = nullptr;
  };

  static std::optional<Root> FindRoot(mlir::Value result, mlir::Value arg) {
    mlir::Operation* owner = nullptr;  // The op whose init `result` is.
    while (true) {
      if (result == arg) {
        if (owner == nullptr) return std::nullopt;
        return Root{nullptr, owner};
      }
      auto op_result = llvm::dyn_cast<mlir::OpResult>(result);
      if (!op_result) return std::nullopt;
      if (auto loop = llvm::dyn_cast<mlir::scf::ForOp>(op_result.getOwner())) {
        owner = loop;
        result = loop.getInitArgs()[op_result.getResultNumber()];
        continue;
      }
      auto dps = llvm::dyn_cast<mlir::DestinationStyleOpInterface>(op_result.getOwner());
      if (!dps) return std::nullopt;
      mlir::OpOperand* init = dps.getDpsInitOperand(op_result.getResultNumber());
      if (init->get().getDefiningOp<mlir::tensor::EmptyOp>()) return Root{init, dps};
      // Other readers of the init must be done before `dps` writes it (the
      // extract_slice an insert_slice's source is computed from).
      if (init->get() != arg && !UsedOnlyBefore(init->get(), dps)) return std::nullopt;
      owner = dps;
      result = init->get();
    }
  }

  // True if every user of `value` but `op` comes before `op` in the block.
  static bool UsedOnlyBefore(mlir::Value value, mlir::Operation* op) {
    mlir::Block* block = op->getBlock();
    for (mlir::Operation* user : value.getUsers()) {
      if (user == op) continue;
      mlir::Operation* anchor = block->findAncestorOpInBlock(*user);
      if (anchor == nullptr || anchor == op || !anchor->isBeforeInBlock(op)) return false;
    }
    return true;
  }

  // True if every read of `arg` (directly or through a view of it) happens
  // before `root` in the function body, except `root`'s own use of it as
  // its init or as the source of a copy: then `root` may write `arg`'s
  // buffer in place without a later read seeing the new bytes.
  static bool ReadsOnlyBefore(mlir::Value arg, mlir::Operation* root) {
    mlir::Block& body = root->getParentOfType<mlir::func::FuncOp>().getBody().front();
    mlir::Operation* root_anchor = body.findAncestorOpInBlock(*root);
    llvm::SmallVector<mlir::Value> values{arg};
    while (!values.empty()) {
      mlir::Value v = values.pop_back_val();
      for (mlir::OpOperand& use : v.getUses()) {
        mlir::Operation* user = use.getOwner();
        if (user == root) {
          auto dps = llvm::dyn_cast<mlir::DestinationStyleOpInterface>(user);
          if (llvm::isa<mlir::linalg::CopyOp, mlir::scf::ForOp>(user) ||
              (dps && dps.isDpsInit(&use))) {
            continue;
          }
          return false;
        }
        if (llvm::isa<mlir::tensor::ExtractSliceOp, mlir::tensor::ExpandShapeOp,
                      mlir::tensor::CollapseShapeOp, mlir::tensor::CastOp>(user)) {
          values.push_back(user->getResult(0));
          continue;
        }
        mlir::Operation* anchor = body.findAncestorOpInBlock(*user);
        if (anchor == nullptr || !anchor->isBeforeInBlock(root_anchor)) return false;
      }
    }
    return true;
  }

  // Result `result` of `ret` becomes input `input`'s new value. When the
  // value's destination chain can start from the input (no later read of
  // its old bytes), it is computed there in place; otherwise the value is
  // copied into the input at the end (the frontend's copy form, kept as is).
  static void BindUpdate(mlir::func::ReturnOp ret, unsigned result, mlir::Value input) {
    mlir::Value value = ret.getOperand(result);
    if (value == input) return;  // Unchanged.
    if (auto copy = value.getDefiningOp<mlir::linalg::CopyOp>();
        copy && copy.getOutputs()[0] == input) {
      return;
    }
    std::optional<Root> root = FindRoot(value, input);
    if (root.has_value() && ReadsOnlyBefore(input, root->op)) {
      auto copy = llvm::dyn_cast<mlir::linalg::CopyOp>(root->op);
      if (copy && root->init != nullptr && copy.getInputs()[0] == input) {
        // A copy of the input starts the chain (index_copy's): the chain
        // starts from the input itself (bufferization keeps a copy of a
        // tensor onto itself out of place).
        copy->getResult(0).replaceAllUsesWith(input);
        copy->erase();
      } else if (root->init != nullptr) {
        root->init->set(input);
      }
      return;
    }
    mlir::OpBuilder b(ret);
    ret->setOperand(result, b.create<mlir::linalg::CopyOp>(ret.getLoc(), mlir::ValueRange{value},
                                                          mlir::ValueRange{input})
                                .getResult(0));
  }

  // Follows result -> tied init through DPS ops (and scf.for iter args) to
  // the tensor.empty at the root and binds that operand to `out_arg`.
  static mlir::LogicalResult Bind(mlir::Value result, mlir::Value out_arg) {
    while (true) {
      if (result == out_arg) return mlir::success();  // Already bound.
      auto op_result = llvm::dyn_cast<mlir::OpResult>(result);
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
