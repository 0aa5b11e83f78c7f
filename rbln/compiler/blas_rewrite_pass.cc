#include "rbln/compiler/blas_rewrite_pass.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <mutex>
#include <optional>

#include "llvm/ADT/STLExtras.h"
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
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassRegistry.h"
#include "rbln/compiler/mlir_compat.h"

namespace rbln::compiler {
namespace {

using ::mlir::Location;
using ::mlir::OpBuilder;
using ::mlir::Type;
using ::mlir::Value;

// CBLAS enum values (cblas.h).
constexpr int kCblasRowMajor = 101;
constexpr int kCblasNoTrans = 111;
constexpr int kCblasTrans = 112;

// One operand as BLAS sees it: a stack of row-major matrices.
struct Matrix {
  Value memref;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t ld = 0;                 // leading dimension: the row stride
  int64_t batch_stride = 0;       // elements between matrices of a batch
  std::optional<int64_t> offset;  // static offset, if known
};

struct Gemm {
  Matrix a, b, c;
  bool trans_b = false;
  int64_t batch = 1, m = 0, n = 0, k = 0;
};

bool FitsInt32(int64_t v) { return v <= std::numeric_limits<int32_t>::max(); }

// `v` as BLAS operand, or nothing if BLAS cannot address it: an f32 memref
// of static shape and strides whose rows are contiguous and do not overlap.
std::optional<Matrix> AsMatrix(Value v) {
  auto type = v.getType().dyn_cast<mlir::MemRefType>();
  if (!type || !type.getElementType().isF32() || !type.hasStaticShape() ||
      type.getRank() < 2) {
    return std::nullopt;
  }
  llvm::SmallVector<int64_t> strides;
  int64_t offset;
  if (mlir::failed(mlir::getStridesAndOffset(type, strides, offset)) ||
      llvm::any_of(strides, mlir::ShapedType::isDynamic)) {
    return std::nullopt;
  }
  const int rank = type.getRank();
  Matrix m;
  m.memref = v;
  m.rows = type.getDimSize(rank - 2);
  m.cols = type.getDimSize(rank - 1);
  if (m.cols > 1 && strides[rank - 1] != 1) return std::nullopt;
  // A single row's stride is never stepped over; BLAS still wants
  // ld >= max(1, cols).
  const int64_t min_ld = std::max<int64_t>(1, m.cols);
  m.ld = m.rows > 1 ? strides[rank - 2] : min_ld;
  if (m.ld < min_ld || !FitsInt32(m.ld)) return std::nullopt;
  m.batch_stride = rank == 3 ? strides[0] : 0;
  if (!mlir::ShapedType::isDynamic(offset)) m.offset = offset;
  return m;
}

std::optional<Gemm> Plan(mlir::linalg::LinalgOp op) {
  const bool batched = llvm::isa<mlir::linalg::BatchMatmulOp>(op);
  const bool trans_b = llvm::isa<mlir::linalg::MatmulTransposeBOp>(op);
  if (!(batched || trans_b || llvm::isa<mlir::linalg::MatmulOp>(op)) ||
      !compat::HasBufferSemantics(op)) {
    return std::nullopt;
  }
  std::optional<Matrix> a = AsMatrix(op.getDpsInputOperand(0)->get());
  std::optional<Matrix> b = AsMatrix(op.getDpsInputOperand(1)->get());
  std::optional<Matrix> c = AsMatrix(op.getDpsInitOperand(0)->get());
  if (!a || !b || !c) return std::nullopt;
  Gemm g{*a, *b, *c, trans_b};
  g.m = c->rows;
  g.n = c->cols;
  g.k = a->cols;
  if (batched) {
    g.batch = c->memref.getType().cast<mlir::MemRefType>().getDimSize(0);
  }
  // Empty problems are left to the loops: BLAS rejects ld = 0 for k = 0.
  if (g.batch <= 0 || g.m <= 0 || g.n <= 0 || g.k <= 0 || !FitsInt32(g.m) ||
      !FitsInt32(g.n) || !FitsInt32(g.k)) {
    return std::nullopt;
  }
  return g;
}

mlir::FunctionType SgemmType(mlir::MLIRContext* context) {
  OpBuilder b(context);
  Type i32 = b.getI32Type(), f32 = b.getF32Type(),
       ptr = compat::MatrixPointerType(context);
  return b.getFunctionType(
      {i32, i32, i32, i32, i32, i32, f32, ptr, i32, ptr, i32, f32, ptr, i32},
      {});
}

// The private declaration of cblas_sgemm, added once; null if the module
// already has the symbol with another type.
mlir::func::FuncOp DeclareSgemm(mlir::ModuleOp module) {
  mlir::FunctionType type = SgemmType(module.getContext());
  if (auto existing = module.lookupSymbol<mlir::func::FuncOp>(kSgemmName)) {
    return existing.getFunctionType() == type ? existing : nullptr;
  }
  if (module.lookupSymbol(kSgemmName)) return nullptr;
  OpBuilder b = OpBuilder::atBlockBegin(module.getBody());
  auto decl = b.create<mlir::func::FuncOp>(module.getLoc(), kSgemmName, type);
  decl.setPrivate();
  return decl;
}

Value IndexConst(OpBuilder& b, Location l, int64_t v) {
  return b.create<mlir::arith::ConstantIndexOp>(l, v);
}

// The address of the first element, in bytes, as an index.
Value BaseAddress(OpBuilder& b, Location l, const Matrix& m) {
  Value aligned =
      b.create<mlir::memref::ExtractAlignedPointerAsIndexOp>(l, m.memref);
  if (m.offset == 0) return aligned;
  Value bytes =
      m.offset
          ? IndexConst(b, l, *m.offset * sizeof(float))
          : b.create<mlir::arith::MulIOp>(
                 l,
                 b.create<mlir::memref::ExtractStridedMetadataOp>(l, m.memref)
                     .getOffset(),
                 IndexConst(b, l, sizeof(float)))
                .getResult();
  return b.create<mlir::arith::AddIOp>(l, aligned, bytes);
}

Value ToPointer(OpBuilder& b, Location l, Value address) {
  Value i64 = b.create<mlir::arith::IndexCastOp>(l, b.getI64Type(), address);
  return b.create<mlir::LLVM::IntToPtrOp>(
      l, compat::MatrixPointerType(b.getContext()), i64);
}

void EmitSgemm(OpBuilder& b, Location l, const Gemm& g,
               mlir::func::FuncOp sgemm) {
  auto i32 = [&](int64_t v) -> Value {
    return b.create<mlir::arith::ConstantIntOp>(l, v, 32);
  };
  Value one = b.create<mlir::arith::ConstantOp>(l, b.getF32FloatAttr(1.0f));
  // Arguments other than the pointers, in order.
  const Value order = i32(kCblasRowMajor), trans_a = i32(kCblasNoTrans),
              trans_b = i32(g.trans_b ? kCblasTrans : kCblasNoTrans),
              m = i32(g.m), n = i32(g.n), k = i32(g.k), lda = i32(g.a.ld),
              ldb = i32(g.b.ld), ldc = i32(g.c.ld);
  Value a = BaseAddress(b, l, g.a), bb = BaseAddress(b, l, g.b),
        c = BaseAddress(b, l, g.c);
  auto call = [&](OpBuilder& nb, Value pa, Value pb, Value pc) {
    nb.create<mlir::func::CallOp>(
        l, sgemm,
        mlir::ValueRange{order, trans_a, trans_b, m, n, k, one,
                         ToPointer(nb, l, pa), lda, ToPointer(nb, l, pb), ldb,
                         one, ToPointer(nb, l, pc), ldc});
  };
  if (g.batch == 1) {
    call(b, a, bb, c);
    return;
  }
  // One GEMM per matrix of the batch.
  auto step = [&](const Matrix& mat) {
    return IndexConst(b, l, mat.batch_stride * sizeof(float));
  };
  Value a_step = step(g.a), b_step = step(g.b), c_step = step(g.c);
  b.create<mlir::scf::ForOp>(
      l, IndexConst(b, l, 0), IndexConst(b, l, g.batch), IndexConst(b, l, 1),
      std::nullopt, [&](OpBuilder& nb, Location, Value i, mlir::ValueRange) {
        auto at = [&](Value base, Value bytes) -> Value {
          return nb.create<mlir::arith::AddIOp>(
              l, base, nb.create<mlir::arith::MulIOp>(l, i, bytes));
        };
        call(nb, at(a, a_step), at(bb, b_step), at(c, c_step));
        nb.create<mlir::scf::YieldOp>(l);
      });
}

class BlasRewritePass
    : public mlir::PassWrapper<BlasRewritePass,
                               mlir::OperationPass<mlir::ModuleOp>> {
 public:
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(BlasRewritePass)

  llvm::StringRef getArgument() const final { return kBlasRewritePassName; }
  llvm::StringRef getDescription() const final {
    return "Rewrite row-major f32 linalg matmuls on memrefs to cblas_sgemm "
           "calls";
  }
  void getDependentDialects(mlir::DialectRegistry& registry) const override {
    registry.insert<mlir::arith::ArithDialect, mlir::func::FuncDialect,
                    mlir::LLVM::LLVMDialect, mlir::memref::MemRefDialect,
                    mlir::scf::SCFDialect>();
  }

  void runOnOperation() override {
    mlir::ModuleOp module = getOperation();
    llvm::SmallVector<std::pair<mlir::Operation*, Gemm>> gemms;
    module.walk([&](mlir::linalg::LinalgOp op) {
      if (std::optional<Gemm> g = Plan(op)) gemms.push_back({op, *g});
    });
    if (gemms.empty()) return;
    mlir::func::FuncOp sgemm = DeclareSgemm(module);
    if (!sgemm) {
      module.emitError() << "symbol " << kSgemmName
                         << " exists with another type";
      return signalPassFailure();
    }
    for (auto& [op, gemm] : gemms) {
      OpBuilder b(op);
      EmitSgemm(b, op->getLoc(), gemm, sgemm);
      op->erase();
    }
  }
};

}  // namespace

std::unique_ptr<mlir::Pass> CreateBlasRewritePass() {
  return std::make_unique<BlasRewritePass>();
}

void RegisterBlasRewritePass() {
  static std::once_flag once;
  std::call_once(once, [] { mlir::PassRegistration<BlasRewritePass>(); });
}

}  // namespace rbln::compiler
