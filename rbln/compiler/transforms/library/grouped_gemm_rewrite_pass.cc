// GroupedGemmRewrite (SPEC P5): after bufferization, replaces the loop over
// groups that the frontend emits for a grouped GEMM's 2-D x 3-D form
// (frontend/ops/grouped_matmul_ops.cc: an scf.for marked kGroupedGemmAttr
// whose body reads group g's bounds from the offsets, multiplies the rows
// [s, e) of A with B[g] in a marked linalg.generic on subviews and writes
// them into C) with calls of rbln_grouped_gemm (kernels/grouped_gemm.h):
// one oneDNN GEMM per group on its rows only, B[g] read in place (plain or
// transposed, as the generic's map reads it) and A and B as stored (f32,
// bf16 bits or f16). The calls are cut into blocks by the problem's shape
// (library_calls.h), which the partition pass spreads over the chiplet
// workers. C's zero fill before the loop stays: rows in no group
// are zero.
//
// A loop whose operands are not what the call can address (no base buffer
// outside the loop, dynamic strides, a non-unit inner stride, a result not
// computed in place) is left as it is: it computes the same values with
// the loop lowering. A loop whose product decodes MXFP4 weights
// (kGroupedGemmMxfp4Attr: A, the blocks and the scales) calls
// rbln_grouped_gemm_mxfp4 (kernels/mxfp4_grouped_gemm.h) the same way.
#include <cstdint>
#include <mutex>
#include <optional>

#include "llvm/ADT/SmallVector.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassRegistry.h"
#include "rbln/compiler/abi/gemm_problem.h"
#include "rbln/compiler/abi/kernel_abi.h"
#include "rbln/compiler/transforms/library/gemm_lowering.h"
#include "rbln/compiler/transforms/library/library_calls.h"
#include "rbln/compiler/transforms/library/passes.h"

namespace rbln::compiler {
namespace {

using ::mlir::OpBuilder;
using ::mlir::Value;

// The buffer `v` is a view of through subviews and casts, if it is defined
// outside `loop`; a region iter arg of `loop` stands for its init.
Value BaseOutside(Value v, mlir::scf::ForOp loop) {
  while (true) {
    if (auto arg = v.dyn_cast<mlir::BlockArgument>()) {
      if (arg.getOwner() != loop.getBody()) break;  // e.g. the kernel's
      if (arg.getArgNumber() == 0) return nullptr;  // the group
      v = loop.getInitArgs()[arg.getArgNumber() - 1];
      continue;
    }
    mlir::Operation* def = v.getDefiningOp();
    if (auto sub = llvm::dyn_cast_or_null<mlir::memref::SubViewOp>(def)) {
      v = sub.getSource();
    } else if (auto cast = llvm::dyn_cast_or_null<mlir::memref::CastOp>(def)) {
      v = cast.getSource();
    } else {
      break;
    }
  }
  return loop->isAncestor(v.getParentRegion()->getParentOp()) ? nullptr : v;
}

// What one grouped GEMM loop becomes (b the blocks and `scales` set when
// the weights are MXFP4).
struct GroupedGemm {
  Matrix a, b, c;
  std::optional<Matrix> scales;
  Value offsets;
  bool offsets_i64 = false;
  bool trans_b = false;
  GemmOperandType type = GemmOperandType::kF32;
  int64_t groups = 0, m = 0, n = 0, k = 0;
};

// A contiguous [groups, rows, cols] i8 buffer (MXFP4 blocks or scales).
std::optional<Matrix> PackedBytes(Value v, int64_t groups, int64_t rows, int64_t cols) {
  auto type = v ? v.getType().dyn_cast<mlir::MemRefType>() : nullptr;
  if (!type || type.getRank() != 3 || !type.getElementType().isInteger(8)) return std::nullopt;
  std::optional<Matrix> m = AsMatrix(v, type.getElementType());
  if (!m || type.getDimSize(0) != groups || m->rows != rows || m->cols != cols ||
      m->ld != cols || m->batch_stride != rows * cols) {
    return std::nullopt;
  }
  return m;
}

// The MXFP4 form: the product reads A, the blocks and the scales.
std::optional<GroupedGemm> PlanMxfp4(mlir::scf::ForOp loop, mlir::linalg::GenericOp product,
                                     Value offsets) {
  if (product.getNumDpsInputs() != 3 || product.getNumDpsInits() != 1) return std::nullopt;
  Value a = BaseOutside(product.getDpsInputOperand(0)->get(), loop);
  Value blocks = BaseOutside(product.getDpsInputOperand(1)->get(), loop);
  Value scales = BaseOutside(product.getDpsInputOperand(2)->get(), loop);
  Value c = BaseOutside(product.getDpsInitOperand(0)->get(), loop);
  offsets = BaseOutside(offsets, loop);
  if (!a || !blocks || !scales || !c || !offsets) return std::nullopt;
  auto a_type = a.getType().dyn_cast<mlir::MemRefType>();
  auto b_type = blocks.getType().dyn_cast<mlir::MemRefType>();
  auto o_type = offsets.getType().dyn_cast<mlir::MemRefType>();
  if (!a_type || !b_type || !o_type || a_type.getRank() != 2 || b_type.getRank() != 3 ||
      o_type.getRank() != 1 || !o_type.getLayout().isIdentity()) {
    return std::nullopt;
  }
  std::optional<GemmOperandType> type = LibraryOperandType(a_type.getElementType());
  std::optional<Matrix> ma = AsMatrix(a, a_type.getElementType());
  std::optional<Matrix> mc = AsMatrix(c);
  if (!type || *type == GemmOperandType::kF16 || !ma || !mc ||
      mc->memref.getType().cast<mlir::MemRefType>().getRank() != 2) {
    return std::nullopt;
  }
  const int64_t groups = b_type.getDimSize(0), n = mc->cols, k = ma->cols;
  std::optional<Matrix> mb = PackedBytes(blocks, groups, n, k / 2);
  std::optional<Matrix> ms = PackedBytes(scales, groups, n, k / 32);
  if (!mb || !ms || k % 32 != 0 || ma->rows != mc->rows || o_type.getDimSize(0) != groups ||
      mc->rows <= 0 || n <= 0 || k <= 0) {
    return std::nullopt;
  }
  GroupedGemm g{*ma, *mb, *mc, ms, offsets};
  g.offsets_i64 = o_type.getElementType().isInteger(64);
  if (!g.offsets_i64 && !o_type.getElementType().isInteger(32)) return std::nullopt;
  g.type = *type;
  g.groups = groups;
  g.m = mc->rows;
  g.n = n;
  g.k = k;
  return g;
}

std::optional<GroupedGemm> PlanGroupedGemm(mlir::scf::ForOp loop) {
  mlir::linalg::GenericOp product;
  Value offsets;
  bool other_offsets = false;
  loop.getBody()->walk([&](mlir::Operation* op) {
    if (auto g = llvm::dyn_cast<mlir::linalg::GenericOp>(op);
        g && g->hasAttr(kGroupedGemmAttr)) {
      product = g;
    }
    if (auto load = llvm::dyn_cast<mlir::memref::LoadOp>(op)) {
      if (offsets && offsets != load.getMemRef()) other_offsets = true;
      offsets = load.getMemRef();
    }
  });
  // Loop results (memref iter_args) must be C itself, written in place.
  const bool in_place = llvm::all_of(
      loop.getBody()->getTerminator()->getOperands(),
      [&](Value v) { return v.isa<mlir::BlockArgument>(); });
  if (!product || !offsets || other_offsets || !in_place) {
    return std::nullopt;
  }
  if (product->hasAttr(kGroupedGemmMxfp4Attr)) return PlanMxfp4(loop, product, offsets);
  if (product.getNumDpsInputs() != 2 || product.getNumDpsInits() != 1) return std::nullopt;
  Value a = BaseOutside(product.getDpsInputOperand(0)->get(), loop);
  Value b = BaseOutside(product.getDpsInputOperand(1)->get(), loop);
  Value c = BaseOutside(product.getDpsInitOperand(0)->get(), loop);
  offsets = BaseOutside(offsets, loop);
  if (!a || !b || !c || !offsets) return std::nullopt;
  auto a_type = a.getType().dyn_cast<mlir::MemRefType>();
  auto b_type = b.getType().dyn_cast<mlir::MemRefType>();
  auto o_type = offsets.getType().dyn_cast<mlir::MemRefType>();
  if (!a_type || !b_type || !o_type || a_type.getRank() != 2 || b_type.getRank() != 3 ||
      o_type.getRank() != 1 || !o_type.getLayout().isIdentity() ||
      a_type.getElementType() != b_type.getElementType()) {
    return std::nullopt;
  }
  std::optional<GemmOperandType> type = LibraryOperandType(a_type.getElementType());
  std::optional<Matrix> ma = AsMatrix(a, a_type.getElementType());
  std::optional<Matrix> mb = AsMatrix(b, b_type.getElementType());
  std::optional<Matrix> mc = AsMatrix(c);
  if (!type || !ma || !mb || !mc || mc->memref.getType().cast<mlir::MemRefType>().getRank() != 2) {
    return std::nullopt;
  }
  GroupedGemm g{*ma, *mb, *mc, std::nullopt, offsets};
  g.offsets_i64 = o_type.getElementType().isInteger(64);
  if (!g.offsets_i64 && !o_type.getElementType().isInteger(32)) return std::nullopt;
  // The product's map of B: (m, n, k) -> (k, n), or (n, k) read transposed.
  mlir::AffineMap b_map = product.getIndexingMapsArray()[1];
  g.trans_b = b_map.getNumResults() == 2 && b_map.getResult(0) == mlir::getAffineDimExpr(1, loop.getContext());
  g.type = *type;
  g.groups = b_type.getDimSize(0);
  g.m = mc->rows;
  g.n = mc->cols;
  g.k = ma->cols;
  if (o_type.getDimSize(0) != g.groups || ma->rows != g.m ||
      (g.trans_b ? mb->rows != g.n || mb->cols != g.k : mb->rows != g.k || mb->cols != g.n) ||
      g.m <= 0 || g.n <= 0 || g.k <= 0) {
    return std::nullopt;
  }
  return g;
}

class GroupedGemmRewritePass
    : public mlir::PassWrapper<GroupedGemmRewritePass, mlir::OperationPass<mlir::ModuleOp>> {
 public:
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(GroupedGemmRewritePass)

  llvm::StringRef getArgument() const final { return kGroupedGemmRewritePassName; }
  llvm::StringRef getDescription() const final {
    return "Rewrite the frontend's grouped GEMM loops on memrefs to oneDNN "
           "rbln_grouped_gemm calls";
  }
  void getDependentDialects(mlir::DialectRegistry& registry) const override {
    registry.insert<mlir::arith::ArithDialect, mlir::func::FuncDialect,
                    mlir::LLVM::LLVMDialect, mlir::memref::MemRefDialect,
                    mlir::scf::SCFDialect>();
  }

  void runOnOperation() override {
    mlir::ModuleOp module = getOperation();
    llvm::SmallVector<std::pair<mlir::scf::ForOp, GroupedGemm>, 2> loops;
    module.walk([&](mlir::scf::ForOp loop) {
      if (!loop->hasAttr(kGroupedGemmAttr)) return;
      if (std::optional<GroupedGemm> g = PlanGroupedGemm(loop)) loops.push_back({loop, *g});
    });
    if (loops.empty()) return;
    for (auto& [loop, g] : loops) {
      const char* symbol = g.scales ? kGroupedGemmMxfp4Symbol : kGroupedGemmSymbol;
      mlir::func::FuncOp callee = DeclareLibraryFunction(module, symbol, g.scales ? 15 : 17);
      if (!callee) {
        module.emitError() << "symbol " << symbol << " exists with another type";
        return signalPassFailure();
      }
      OpBuilder b(loop);
      mlir::Location l = loop.getLoc();
      auto i64 = [&](int64_t v) -> Value {
        return b.create<mlir::arith::ConstantIntOp>(l, v, 64);
      };
      auto address = [&](const Matrix& m) -> Value {
        return b.create<mlir::arith::IndexCastOp>(l, b.getI64Type(), BaseAddress(b, l, m));
      };
      Value offsets = b.create<mlir::arith::IndexCastOp>(
          l, b.getI64Type(),
          b.create<mlir::memref::ExtractAlignedPointerAsIndexOp>(l, g.offsets));
      llvm::SmallVector<Value> args =
          g.scales ? llvm::SmallVector<Value>{i64(static_cast<int64_t>(g.type)),
                                              i64(g.offsets_i64), i64(g.groups), i64(g.m),
                                              i64(g.n), i64(g.k), i64(g.a.ld), i64(g.c.ld),
                                              address(g.a), address(g.b), address(*g.scales),
                                              offsets, address(g.c)}
                   : llvm::SmallVector<Value>{
                         i64(static_cast<int64_t>(g.type)), i64(g.trans_b), i64(g.offsets_i64),
                         i64(g.groups), i64(g.m), i64(g.n), i64(g.k), i64(g.a.ld), i64(g.b.ld),
                         i64(g.c.ld), i64(g.b.batch_stride), address(g.a), address(g.b),
                         offsets, address(g.c)};
      // Blocks of whole 16-float column vectors or runs of whole groups
      // (kernels/grouped_gemm.h decides which from the problem and the
      // offsets); the rows are at most m in all.
      const int64_t work = g.m * g.n * g.k;
      EmitBlockedCalls(b, l, callee, std::move(args),
                       LibraryCallBlocks(work, (g.n + 15) / 16), work);
      for (auto [result, init] : llvm::zip(loop.getResults(), loop.getInitArgs())) {
        result.replaceAllUsesWith(init);
      }
      loop->erase();
    }
  }
};

}  // namespace

std::unique_ptr<mlir::Pass> CreateGroupedGemmRewritePass() {
  return std::make_unique<GroupedGemmRewritePass>();
}

void RegisterGroupedGemmRewritePass() {
  static std::once_flag once;
  std::call_once(once, [] { mlir::PassRegistration<GroupedGemmRewritePass>(); });
}

}  // namespace rbln::compiler
