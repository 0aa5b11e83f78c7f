#include "rbln/compiler/transforms/library/gemm_lowering.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <utility>

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/BuiltinTypes.h"
#include "rbln/compiler/abi/kernel_abi.h"
#include "rbln/compiler/pipelines/mlir_compat.h"
#include "rbln/compiler/transforms/library/library_calls.h"

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

bool FitsInt32(int64_t v) { return v <= std::numeric_limits<int32_t>::max(); }

mlir::FunctionType SgemmType(mlir::MLIRContext* context) {
  OpBuilder b(context);
  Type i32 = b.getI32Type(), f32 = b.getF32Type(),
       ptr = compat::MatrixPointerType(context);
  return b.getFunctionType(
      {i32, i32, i32, i32, i32, i32, f32, ptr, i32, ptr, i32, f32, ptr, i32},
      {});
}

Value IndexConst(OpBuilder& b, Location l, int64_t v) {
  return b.create<mlir::arith::ConstantIndexOp>(l, v);
}

Value ToPointer(OpBuilder& b, Location l, Value address) {
  Value i64 = b.create<mlir::arith::IndexCastOp>(l, b.getI64Type(), address);
  return b.create<mlir::LLVM::IntToPtrOp>(
      l, compat::MatrixPointerType(b.getContext()), i64);
}

}  // namespace

std::optional<Matrix> AsMatrix(Value v, Type element) {
  auto type = v.getType().dyn_cast<mlir::MemRefType>();
  if (!type || !type.hasStaticShape() || type.getRank() < 2) {
    return std::nullopt;
  }
  if (element ? type.getElementType() != element
              : !type.getElementType().isF32()) {
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
  m.element_bytes = type.getElementTypeBitWidth() / 8;
  return m;
}

std::optional<Gemm> PlanGemm(mlir::linalg::LinalgOp op) {
  const bool batched = llvm::isa<mlir::linalg::BatchMatmulOp,
                                  mlir::linalg::BatchMatmulTransposeBOp>(op);
  const bool trans_b = llvm::isa<mlir::linalg::MatmulTransposeBOp,
                                 mlir::linalg::BatchMatmulTransposeBOp>(op);
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

mlir::func::FuncOp DeclareSgemm(mlir::ModuleOp module) {
  return DeclareLibraryFunction(module, kSgemmName,
                                SgemmType(module.getContext()));
}

Value BaseAddress(OpBuilder& b, Location l, const Matrix& m) {
  Value aligned =
      b.create<mlir::memref::ExtractAlignedPointerAsIndexOp>(l, m.memref);
  if (m.offset == 0) return aligned;
  Value bytes =
      m.offset
          ? IndexConst(b, l, *m.offset * m.element_bytes)
          : b.create<mlir::arith::MulIOp>(
                 l,
                 b.create<mlir::memref::ExtractStridedMetadataOp>(l, m.memref)
                     .getOffset(),
                 IndexConst(b, l, m.element_bytes))
                .getResult();
  return b.create<mlir::arith::AddIOp>(l, aligned, bytes);
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

GemmProblem GemmProblemOf(const Gemm& g) {
  GemmProblem p;
  p.type = g.type;
  p.trans_b = g.trans_b;
  p.accumulate = !g.overwrite;
  p.batch = g.batch;
  p.m = g.m;
  p.n = g.n;
  p.k = g.k;
  p.lda = g.a.ld;
  p.ldb = g.b.ld;
  p.ldc = g.c.ld;
  p.stride_a = g.batch > 1 ? g.a.batch_stride : 0;
  p.stride_b = g.batch > 1 ? g.b.batch_stride : 0;
  p.stride_c = g.batch > 1 ? g.c.batch_stride : 0;
  p.epilogue.store = g.store;
  if (g.bias) p.epilogue.bias_row = 0;
  if (g.relu) {
    p.epilogue.ops.push_back(
        EpilogueOp{false, static_cast<int64_t>(EltwiseFn::kRelu)});
  }
  return p;
}

void EmitOnednnGemm(OpBuilder& b, Location l, const Gemm& g,
                    mlir::func::FuncOp gemm, mlir::memref::GlobalOp problem,
                    Value sides) {
  auto i64 = [&](int64_t v) -> Value {
    return b.create<mlir::arith::ConstantIntOp>(l, v, 64);
  };
  auto address = [&](const Matrix& m) -> Value {
    return b.create<mlir::arith::IndexCastOp>(l, b.getI64Type(),
                                              BaseAddress(b, l, m));
  };
  const GemmProblem p = GemmProblemOf(g);
  // Blocks along the dimension GemmBlockOf splits, by the multiply-adds and
  // the elements the GEMM moves: a batch of skinny products (decode
  // attention's 64 x [2 x 64] * [64 x 256]) does few multiply-adds per byte
  // and would otherwise run whole on one worker while the others wait.
  constexpr int64_t kMultiplyAddsPerElement = 16;
  const int64_t moved = g.batch * (g.m * g.k + g.k * g.n + g.m * g.n);
  const int64_t blocks = LibraryCallBlocks(
      g.batch * g.m * g.n * g.k + kMultiplyAddsPerElement * moved,
      g.batch > 1 ? g.batch : std::max(g.m, g.n));
  llvm::SmallVector<Value> args;
  if (problem) {
    args = {ProblemWordsAddress(b, l, problem), address(g.a), address(g.b),
            address(g.c), sides ? sides : i64(0)};
  } else {
    args = {i64(static_cast<int64_t>(p.type)), i64(p.trans_b),
            i64(p.accumulate), i64(p.batch), i64(p.m), i64(p.n), i64(p.k),
            i64(p.lda), i64(p.ldb), i64(p.ldc), i64(p.stride_a),
            i64(p.stride_b), i64(p.stride_c), address(g.a), address(g.b),
            address(g.c)};
  }
  EmitBlockedCalls(b, l, gemm, std::move(args), blocks,
                   g.batch * g.m * g.n * g.k);
}

}  // namespace rbln::compiler
