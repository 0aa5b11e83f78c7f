// BlasRewrite (SPEC P5): after bufferization, replaces f32 GEMMs on memrefs
// with calls to a GEMM library: oneDNN (onednn_gemm.h, the default where it
// loads; see below) or OpenBLAS's
//   void cblas_sgemm(order, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb,
//                    beta, c, ldc)
// declared in the module as a private func.func. Rewritten: linalg.matmul,
// linalg.matmul_transpose_b (trans_b), linalg.batch_matmul (a loop of
// GEMMs) and linalg.batch_matmul_transpose_b whose operands are f32 memrefs with static shapes and strides and
// unit inner stride, and no empty dim. A matrix pointer is the memref's
// aligned pointer plus its offset; the leading dimension is its row stride;
// alpha = beta = 1 keeps linalg's C += A * B. Everything else is left for the
// loop lowering. Whoever JIT-compiles the result must make cblas_sgemm
// resolvable (LoadOpenBlas() in blas_loader.h).
//
// With library=onednn the GEMMs become calls of rbln_gemm (onednn_gemm.h):
//  - bf16 and f16 operands go to oneDNN as they are: when the generics
//    that last wrote both f32 operand buffers (whole) yield the widening of
//    bf16 (i16 bits) or of f16 values (arith.extf), both of one format, the
//    GEMM reads the narrow source of a copy (its source not written in
//    between; a transposing copy of B as B read transposed) or the narrow
//    twin of a generic that computed the values (a layer norm's or bias
//    add's rounding fused with the widening: the same generic storing the
//    narrow value); the call's operand type is kBF16 or kF16 (which the
//    library widens per block: oneDNN has no f16 matmul); an f32 B copied
//    transposed (a permute before the
//    GEMM) is read transposed from its source; writers whose f32 values
//    nothing reads any more are dropped;
//  - a linalg.fill of +0.0 of C right before the GEMM is dropped and the
//    call overwrites C (no accumulation pass over C);
//  - a bf16 GEMM whose f32 C (a buffer of its own) is only read by the
//    frontend's rounding to bf16 right after stores bf16 itself: the call
//    becomes rbln_gemm_problem with a bf16-store epilogue (its problem words
//    a constant global), writing the rounded buffer; C and the rounding pass
//    go away (oneDNN rounds to nearest even like c10::BFloat16);
//  - a GEMM large enough is cut into blocks (at most kMaxGemmBlocks of at
//    least kMinGemmBlockWork multiply-adds), called from an scf.for marked
//    kParallelIterationsAttr that the partition pass spreads over the
//    chiplet workers; every op carries its multiply-adds in kWorkAttr.

#include "rbln/compiler/transforms/library/passes.h"

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/SmallVector.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/ViewLikeInterface.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassRegistry.h"
#include "rbln/compiler/abi/gemm_problem.h"
#include "rbln/compiler/abi/kernel_abi.h"
#include "rbln/compiler/abi/library_epilogue.h"
#include "rbln/compiler/transforms/library/epilogue_matcher.h"
#include "rbln/compiler/transforms/library/gemm_lowering.h"
#include "rbln/compiler/transforms/library/gemm_operands.h"
#include "rbln/compiler/transforms/library/library_calls.h"
#include "rbln/compiler/transforms/library/narrow_operands.h"

namespace rbln::compiler {
namespace {

using ::mlir::Location;
using ::mlir::OpBuilder;
using ::mlir::Value;

class BlasRewritePass
    : public mlir::PassWrapper<BlasRewritePass,
                               mlir::OperationPass<mlir::ModuleOp>> {
 public:
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(BlasRewritePass)

  BlasRewritePass() = default;
  explicit BlasRewritePass(GemmLibrary library) {
    library_ = library == GemmLibrary::kOnednn ? kOnednnOption : kOpenBlasOption;
  }
  // Options are copied by the framework (Pass::clone), not here.
  BlasRewritePass(const BlasRewritePass& other) : PassWrapper(other) {}

  llvm::StringRef getArgument() const final { return kBlasRewritePassName; }
  llvm::StringRef getDescription() const final {
    return "Rewrite row-major f32 (and bf16/f16-widened) linalg matmuls on "
           "memrefs to OpenBLAS cblas_sgemm or oneDNN rbln_gemm calls";
  }
  void getDependentDialects(mlir::DialectRegistry& registry) const override {
    registry.insert<mlir::arith::ArithDialect, mlir::func::FuncDialect,
                    mlir::LLVM::LLVMDialect, mlir::memref::MemRefDialect,
                    mlir::scf::SCFDialect>();
  }

  void runOnOperation() override {
    mlir::ModuleOp module = getOperation();
    if (library_ != kOnednnOption && library_ != kOpenBlasOption) {
      module.emitError() << kBlasRewritePassName << ": unknown library '"
                         << library_ << "' (expected " << kOpenBlasOption
                         << " or " << kOnednnOption << ")";
      return signalPassFailure();
    }
    const bool onednn = library_ == kOnednnOption;
    llvm::SmallVector<std::pair<mlir::Operation*, Gemm>, 4> gemms;
    module.walk([&](mlir::linalg::LinalgOp op) {
      if (std::optional<Gemm> g = PlanGemm(op)) gemms.push_back({op, *g});
    });
    if (gemms.empty()) return;
    mlir::func::FuncOp callee =
        onednn ? DeclareLibraryFunction(module, kOnednnGemmSymbol, 18)
               : DeclareSgemm(module);
    if (!callee) {
      module.emitError() << "symbol "
                         << (onednn ? kOnednnGemmSymbol : kSgemmName)
                         << " exists with another type";
      return signalPassFailure();
    }
    // Where each GEMM's narrow operands come from (both of one format),
    // found before any GEMM becomes a call (the analysis reads linalg ops
    // only).
    struct NarrowOperands {
      NarrowOperand a, b;
    };
    llvm::SmallVector<std::optional<NarrowOperands>> narrow(gemms.size());
    for (size_t i = 0; onednn && i < gemms.size(); ++i) {
      mlir::Operation* op = gemms[i].first;
      std::optional<NarrowOperand> a = NarrowOperandOf(op->getOperand(0), op);
      std::optional<NarrowOperand> b =
          a ? NarrowOperandOf(op->getOperand(1), op) : std::nullopt;
      if (a && b && a->format == b->format) narrow[i] = NarrowOperands{*a, *b};
    }
    llvm::SmallVector<mlir::linalg::GenericOp> copies, writers;
    llvm::DenseMap<mlir::Operation*, Value> twins;
    mlir::func::FuncOp problem_callee;
    mlir::SymbolTable symbols(module);
    // Every GEMM's narrow operands first (twins made), so that the epilogue
    // analysis below sees a twin that rounds C as C's reader.
    llvm::DenseMap<mlir::Operation*, llvm::SmallPtrSet<mlir::Operation*, 4>>
        twin_readers;  // writer -> the GEMMs that read its twin instead
    for (size_t i = 0; onednn && i < gemms.size(); ++i) {
      if (!narrow[i]) continue;
      auto& [op, gemm] = gemms[i];
      NarrowOperand& a = narrow[i]->a;
      const NarrowOperand& nb = narrow[i]->b;
      if (a.transposed) {  // A cannot be read transposed: from a twin.
        a.source = nullptr;
        a.transposed = false;
      }
      std::optional<Matrix> ma = NarrowMatrix(a, op, twins);
      std::optional<Matrix> mb = NarrowMatrix(nb, op, twins);
      if (ma && mb) {  // (always: identity layouts, unit inner stride)
        gemm.a = *ma;
        gemm.b = *mb;
        gemm.type = OperandTypeOf(a.format);
        gemm.trans_b ^= nb.transposed;
        writers.append({a.writer, nb.writer});
        twin_readers[a.writer].insert(op);
        twin_readers[nb.writer].insert(op);
      }
    }
    llvm::SmallPtrSet<mlir::Operation*, 8> replaced =
        ReplacedWriters(writers, twin_readers);
    llvm::SmallPtrSet<mlir::Operation*, 8> erased;
    llvm::SmallVector<Value> erased_buffers;
    for (size_t i = 0; i < gemms.size(); ++i) {
      auto& [op, gemm] = gemms[i];
      OpBuilder b(op);
      if (!onednn) {
        EmitSgemm(b, op->getLoc(), gemm, callee);
        op->erase();
        continue;
      }
      if (gemm.type == GemmOperandType::kF32) UseCopySources(op, gemm, copies);
      if (mlir::linalg::FillOp fill = ZeroFillOf(gemm.c.memref, op)) {
        gemm.overwrite = true;
        fill->erase();
      }
      // C only read by an element-wise generic right after that adds a
      // per-column bias and/or rounds to bf16 (a bf16 result): the call
      // does it as its epilogue and stores into the generic's output; C
      // and the pass over it go away.
      std::optional<Bf16Store> store;
      if (gemm.overwrite &&
          (gemm.batch == 1 || gemm.c.batch_stride == gemm.m * gemm.c.ld)) {
        store = Bf16StoreOf(gemm.c, op, replaced);
        // A bf16 store for bf16 GEMMs only (oneDNN has no fast kernel for
        // the others).
        if (store && store->epilogue.store == StoreType::kBF16 &&
            gemm.type != GemmOperandType::kBF16) {
          store.reset();
        }
      }
      if (store && !problem_callee) {
        problem_callee =
            DeclareLibraryFunction(module, kOnednnGemmProblemSymbol, 7);
        if (!problem_callee) {
          module.emitError() << "symbol " << kOnednnGemmProblemSymbol
                             << " exists with another type";
          return signalPassFailure();
        }
      }
      if (store) {
        const Value c = gemm.c.memref;
        gemm.c = store->out;
        gemm.store = store->epilogue.store;
        gemm.bias = store->epilogue.bias != nullptr;
        gemm.relu = store->epilogue.relu;
        mlir::memref::GlobalOp words =
            ProblemWordsGlobal(module, symbols,
                               std::string(kOnednnGemmProblemSymbol) + "_words",
                               GemmProblemOf(gemm).Encode());
        // The bias as the f32 row `sides` the call reads (a bf16 bias
        // widened into a buffer of its own first).
        Value sides, sides_buffer;
        if (mlir::Value bias = store->epilogue.bias) {
          Location l = op->getLoc();
          auto type = bias.getType().cast<mlir::MemRefType>();
          sides_buffer = bias;
          if (type.getElementType().isInteger(16)) {
            auto f32 = mlir::MemRefType::get(type.getShape(), b.getF32Type());
            sides_buffer = b.create<mlir::memref::AllocOp>(l, f32);
            mlir::AffineMap id = b.getMultiDimIdentityMap(1);
            b.create<mlir::linalg::GenericOp>(
                l, mlir::ValueRange{bias}, mlir::ValueRange{sides_buffer},
                llvm::ArrayRef<mlir::AffineMap>{id, id},
                llvm::ArrayRef<mlir::utils::IteratorType>{
                    mlir::utils::IteratorType::parallel},
                [&](OpBuilder& nb, Location nl, mlir::ValueRange args) {
                  Value wide = nb.create<mlir::arith::ExtUIOp>(
                      nl, nb.getI32Type(), args[0]);
                  Value shifted = nb.create<mlir::arith::ShLIOp>(
                      nl, wide,
                      nb.create<mlir::arith::ConstantIntOp>(nl, 16, 32));
                  nb.create<mlir::linalg::YieldOp>(
                      nl, mlir::ValueRange{nb.create<mlir::arith::BitcastOp>(
                              nl, nb.getF32Type(), shifted)});
                });
          }
          sides = b.create<mlir::arith::IndexCastOp>(
              l, b.getI64Type(),
              b.create<mlir::memref::ExtractAlignedPointerAsIndexOp>(
                  l, sides_buffer));
        }
        EmitOnednnGemm(b, op->getLoc(), gemm, problem_callee, words, sides);
        if (sides_buffer && sides_buffer != store->epilogue.bias) {
          b.create<mlir::memref::DeallocOp>(op->getLoc(), sides_buffer);
        }
        op->erase();
        // Replaced writers that read C go first (with their views of it).
        for (mlir::Operation* user : BufferUsers(BaseBuffer(c))) {
          if (!replaced.contains(user) || !erased.insert(user).second) continue;
          erased_buffers.push_back(
              llvm::cast<mlir::linalg::GenericOp>(user)
                  .getDpsInitOperand(0)
                  ->get());
          user->erase();
        }
        EraseRoundedBuffer(store->rounding, c);
        continue;
      }
      EmitOnednnGemm(b, op->getLoc(), gemm, callee, nullptr);
      op->erase();
    }
    EraseUnread(copies);
    llvm::erase_if(writers, [&](mlir::linalg::GenericOp w) {
      return erased.contains(w.getOperation());
    });
    EraseUnreadWriters(writers);
    for (Value buffer : erased_buffers) EraseIfUnused(buffer);
  }

 private:
  static constexpr char kOpenBlasOption[] = "openblas";
  static constexpr char kOnednnOption[] = "onednn";

  // An f32 GEMM (narrow ones are NarrowOperandOf's): a transposed f32 copy of
  // B (a permute before the GEMM) goes to oneDNN as B read transposed.
  static void UseCopySources(
      mlir::Operation* op, Gemm& gemm,
      llvm::SmallVectorImpl<mlir::linalg::GenericOp>& copies) {
    std::optional<CopiedOperand> cb = CopiedOperandOf(gemm.b.memref, op);
    if (cb && !cb->copy.widens && cb->copy.transposed) {
      std::optional<Matrix> b = AsMatrix(CopySource(*cb, op));
      if (!b) return;
      gemm.b = *b;
      gemm.trans_b = !gemm.trans_b;
      copies.push_back(cb->generic);
    }
  }

  // The rounding generic whose work the call took over, and C: its buffer,
  // the reshapes through which the GEMM and the rounding used it, its
  // deallocs.
  static void EraseRoundedBuffer(mlir::linalg::GenericOp rounding, Value c) {
    Value read = rounding.getDpsInputOperand(0)->get();
    rounding->erase();
    mlir::Operation* alloc = BaseBuffer(c).getDefiningOp();
    for (Value view : {read, c}) {
      if (view.getDefiningOp() != alloc && view.use_empty()) {
        view.getDefiningOp()->erase();
      }
    }
    for (mlir::Operation* user : llvm::make_early_inc_range(alloc->getUsers())) {
      user->erase();  // deallocs only: the GEMM and the rounding are gone
    }
    alloc->erase();
  }

  // Copies whose f32 buffer nothing reads any more (views of it left
  // unused by the rewritten GEMMs are erased), with the buffer.
  static void EraseUnread(llvm::ArrayRef<mlir::linalg::GenericOp> copies) {
    llvm::SmallPtrSet<mlir::Operation*, 4> erased;
    for (mlir::linalg::GenericOp generic : copies) {
      if (erased.contains(generic)) continue;
      Value buffer = generic.getDpsInitOperand(0)->get();
      auto alloc = buffer.getDefiningOp<mlir::memref::AllocOp>();
      for (mlir::Operation* user : llvm::make_early_inc_range(alloc->getUsers())) {
        if (llvm::isa<mlir::ViewLikeOpInterface>(user) && user->use_empty()) {
          user->erase();
        }
      }
      const bool unread = llvm::all_of(alloc->getUsers(), [&](mlir::Operation* u) {
        return u == generic || llvm::isa<mlir::memref::DeallocOp>(u);
      });
      if (!unread) continue;
      erased.insert(generic);
      generic->erase();
      for (mlir::Operation* user : llvm::make_early_inc_range(alloc->getUsers())) {
        user->erase();
      }
      alloc->erase();
    }
  }

  Option<std::string> library_{
      *this, "library",
      llvm::cl::desc("GEMM library the calls go to: openblas (cblas_sgemm) "
                     "or onednn (rbln_gemm)"),
      llvm::cl::init(kOpenBlasOption)};
};

}  // namespace

std::unique_ptr<mlir::Pass> CreateBlasRewritePass(GemmLibrary library) {
  return std::make_unique<BlasRewritePass>(library);
}

void RegisterBlasRewritePass() {
  static std::once_flag once;
  std::call_once(once, [] { mlir::PassRegistration<BlasRewritePass>(); });
}

}  // namespace rbln::compiler
