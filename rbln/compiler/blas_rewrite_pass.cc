#include "rbln/compiler/blas_rewrite_pass.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <mutex>
#include <optional>

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
#include "mlir/Interfaces/ViewLikeInterface.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/SymbolTable.h"
#include "rbln/compiler/library_epilogue.h"
#include "rbln/compiler/mlir_compat.h"
#include "rbln/compiler/narrow_operands.h"
#include "rbln/compiler/onednn_gemm.h"
#include "rbln/compiler/partition_pass.h"
#include "rbln/compiler/problem_words.h"

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
  int64_t element_bytes = 4;
};

struct Gemm {
  Matrix a, b, c;
  bool trans_b = false;
  int64_t batch = 1, m = 0, n = 0, k = 0;
  // oneDNN only: what A and B are read as: f32, or bf16 / f16 (the i16 or
  // f16 buffers the f32 operands were widened from); and whether C is
  // overwritten (its zero fill dropped) instead of accumulated into.
  GemmOperandType type = GemmOperandType::kF32;
  bool overwrite = false;
  // oneDNN only: C stored as bf16 by the call (the rounding generic that
  // followed the GEMM folded into it; c is then the i16 buffer).
  StoreType store = StoreType::kF32;
  // oneDNN only: a per-column bias added by the call (row 0 of `sides`).
  bool bias = false;
  // oneDNN only: a ReLU applied by the call before its store.
  bool relu = false;
};

bool FitsInt32(int64_t v) { return v <= std::numeric_limits<int32_t>::max(); }

// `v` as BLAS operand, or nothing if BLAS cannot address it: an f32 (or
// `element`) memref of static shape and strides whose rows are contiguous
// and do not overlap.
std::optional<Matrix> AsMatrix(Value v, Type element = nullptr) {
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
          ? IndexConst(b, l, *m.offset * m.element_bytes)
          : b.create<mlir::arith::MulIOp>(
                 l,
                 b.create<mlir::memref::ExtractStridedMetadataOp>(l, m.memref)
                     .getOffset(),
                 IndexConst(b, l, m.element_bytes))
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

// --- oneDNN (rbln_gemm, onednn_gemm.h) ---

GemmOperandType OperandTypeOf(NarrowFloat format) {
  return format == NarrowFloat::kBF16 ? GemmOperandType::kBF16
                                      : GemmOperandType::kF16;
}

// A GEMM operand copied from another buffer: the generic that copies, what
// it does, and the collapse_shape through which the GEMM reads its buffer
// (null if direct).
struct CopiedOperand {
  mlir::linalg::GenericOp generic;
  OperandCopy copy;
  mlir::memref::CollapseShapeOp collapse;
};

// How `operand`, an f32 buffer of its own (memref.alloc) that the GEMM `op`
// reads directly or through one collapse_shape, was copied by one generic
// alone, or nothing. The copy's source must still hold the same values
// when `op` runs, and collapse the same way (identity layout, no
// transpose).
std::optional<CopiedOperand> CopiedOperandOf(Value operand, mlir::Operation* op) {
  CopiedOperand w;
  w.collapse = operand.getDefiningOp<mlir::memref::CollapseShapeOp>();
  Value buffer = w.collapse ? w.collapse.getSrc() : operand;
  auto alloc = buffer.getDefiningOp<mlir::memref::AllocOp>();
  if (!alloc) return std::nullopt;
  for (mlir::Operation* user : alloc->getUsers()) {
    if (user == op || user == w.collapse.getOperation() ||
        llvm::isa<mlir::memref::DeallocOp>(user)) {
      continue;
    }
    auto generic = llvm::dyn_cast<mlir::linalg::GenericOp>(user);
    // Any other user (a view, another reader) might see the f32 values in
    // ways the GEMM cannot replace; two writers cannot be told apart.
    std::optional<OperandCopy> copy;
    if (generic && !w.generic && generic.getDpsInitOperand(0)->get() == buffer) {
      copy = AsOperandCopy(generic);
    }
    if (!copy || generic->getBlock() != op->getBlock() ||
        !generic->isBeforeInBlock(op) ||
        !UnwrittenBetween(generic.getDpsInputOperand(0)->get(), generic, op)) {
      return std::nullopt;
    }
    w.generic = generic;
    w.copy = *copy;
  }
  if (!w.generic) return std::nullopt;
  if (w.collapse) {
    if (!w.collapse->hasOneUse() || w.copy.transposed) return std::nullopt;
    auto source = w.generic.getDpsInputOperand(0)->get().getType().cast<mlir::MemRefType>();
    if (!source.getLayout().isIdentity()) return std::nullopt;
  }
  return w;
}

// The source of `w` as the GEMM reads it, created before `op`.
Value CopySource(CopiedOperand w, mlir::Operation* op) {
  Value source = w.generic.getDpsInputOperand(0)->get();
  if (!w.collapse) return source;
  OpBuilder b(op);
  return b.create<mlir::memref::CollapseShapeOp>(
      op->getLoc(), source, w.collapse.getReassociationIndices());
}

// The narrow matrix `op` reads in place of the f32 operand `w` stands for.
std::optional<Matrix> NarrowMatrix(NarrowOperand w, mlir::Operation* op,
                                   llvm::DenseMap<mlir::Operation*, Value>& twins) {
  Value narrow = w.source ? w.source : NarrowTwin(w.writer, w.format, twins);
  if (w.collapse) {
    narrow = OpBuilder(op).create<mlir::memref::CollapseShapeOp>(
        op->getLoc(), narrow, w.collapse.getReassociationIndices());
  }
  return AsMatrix(narrow, StorageType(op->getContext(), w.format));
}

// What an element-wise generic after a GEMM does with C that the call can
// do instead (a LibraryEpilogue): out = store([relu](C [+ bias[column]])),
// the bias (its second input, 1-D, indexed by the last dim only, f32 or
// bf16) added in f32, the store rounding to bf16 into an i16 output or
// storing f32 (a relu only with a bf16 store). C is its first input
// (identity map), the output has an identity map.
struct EpilogueGeneric {
  StoreType store = StoreType::kF32;
  Value bias;  // null if none
  // A ReLU of the rounded value, rounded again (exact): oneDNN's relu
  // before its bf16 store gives the same values, since rounding is
  // monotone and keeps zero. (Only a zero's sign can differ: a negative
  // sum that rounds to -0.0, |sum| < 2^-133, stays -0.0 through the
  // generic's relu and becomes +0.0 through oneDNN's.)
  bool relu = false;
};

std::optional<EpilogueGeneric> AsEpilogueGeneric(mlir::linalg::GenericOp g) {
  const int64_t inputs = g.getNumDpsInputs();
  if ((inputs != 1 && inputs != 2) || g.getNumDpsInits() != 1 ||
      g.getNumParallelLoops() != g.getNumLoops()) {
    return std::nullopt;
  }
  llvm::SmallVector<mlir::AffineMap> maps = g.getIndexingMapsArray();
  if (!maps[0].isIdentity() || !maps.back().isIdentity()) return std::nullopt;
  auto in = g.getDpsInputOperand(0)->get().getType().dyn_cast<mlir::MemRefType>();
  auto out = g.getDpsInitOperand(0)->get().getType().dyn_cast<mlir::MemRefType>();
  if (!in || !out || !in.getElementType().isF32()) return std::nullopt;
  EpilogueGeneric e;
  if (out.getElementType().isInteger(16)) {
    e.store = StoreType::kBF16;
  } else if (!out.getElementType().isF32()) {
    return std::nullopt;
  }
  mlir::Block& body = g.getRegion().front();
  Value x = llvm::cast<mlir::linalg::YieldOp>(body.getTerminator()).getOperand(0);
  if (e.store == StoreType::kBF16) x = RoundedToBf16(x);
  if (!x) return std::nullopt;
  if (e.store == StoreType::kBF16) {
    if (Value bits = Bf16ReluInput(x)) {
      if (Value sum = RoundedToBf16(bits)) {
        x = sum;
        e.relu = true;
      }
    }
  }
  const Value c = body.getArgument(0);
  if (inputs == 1) {
    // Only a bf16 store is worth taking over (f32: a copy).
    if (x != c || e.store != StoreType::kBF16) return std::nullopt;
    return e;
  }
  // The bias: 1-D, indexed by the last loop dim, one per column.
  const int64_t rank = maps[0].getNumDims();
  auto bias_type =
      g.getDpsInputOperand(1)->get().getType().dyn_cast<mlir::MemRefType>();
  if (!bias_type || bias_type.getRank() != 1 || !bias_type.hasStaticShape() ||
      !bias_type.getLayout().isIdentity() ||
      maps[1] != mlir::AffineMap::get(
                     rank, 0, {mlir::getAffineDimExpr(rank - 1, g.getContext())},
                     g.getContext()) ||
      bias_type.getDimSize(0) != in.getDimSize(rank - 1)) {
    return std::nullopt;
  }
  const Value b = body.getArgument(1);
  auto add = llvm::dyn_cast_or_null<mlir::arith::AddFOp>(x.getDefiningOp());
  auto terms = Ordered(add, [&](Value v) { return v == c; });
  if (!terms) return std::nullopt;
  const bool bias_f32 = bias_type.getElementType().isF32() && terms->second == b;
  const bool bias_bf16 = bias_type.getElementType().isInteger(16) &&
                         IsBf16Widening(terms->second, b);
  if (!bias_f32 && !bias_bf16) return std::nullopt;
  e.bias = g.getDpsInputOperand(1)->get();
  return e;
}

// The generic after `op` that rounds the GEMM's C to bf16 into another
// buffer, and that buffer as a matrix the GEMM can store into, or nothing.
// C must be a buffer of its own (memref.alloc, identity layout) that the
// GEMM writes whole (directly or through a reshape) and that nothing but
// the rounding reads (directly or through a reshape); the rounded buffer
// has the same shape as C's view or is contiguous. Nothing between `op`
// and the rounding may touch the rounded buffer: the call will write it at
// `op`.
struct Bf16Store {
  mlir::linalg::GenericOp rounding;  // the epilogue generic
  Matrix out;
  EpilogueGeneric epilogue;
};

bool IsReshape(mlir::Operation* op) {
  return llvm::isa_and_nonnull<mlir::memref::CollapseShapeOp,
                               mlir::memref::ExpandShapeOp>(op);
}

// `replaced`: writers that will go (their f32 values are read through
// their twins only); reading C does not keep them.
std::optional<Bf16Store> Bf16StoreOf(
    const Matrix& c, mlir::Operation* op,
    const llvm::SmallPtrSetImpl<mlir::Operation*>& replaced) {
  mlir::Operation* c_view = c.memref.getDefiningOp();
  if (IsReshape(c_view)) {
    if (!c_view->hasOneUse()) return std::nullopt;
  } else {
    c_view = nullptr;
  }
  Value buffer = c_view ? c_view->getOperand(0) : c.memref;
  auto alloc = buffer.getDefiningOp<mlir::memref::AllocOp>();
  if (!alloc || !alloc.getType().getLayout().isIdentity() ||
      c.offset != 0 || c.ld != c.cols) {
    return std::nullopt;
  }
  mlir::linalg::GenericOp rounding;
  EpilogueGeneric epilogue;
  for (mlir::Operation* user : alloc->getUsers()) {
    if (user == op || user == c_view ||
        llvm::isa<mlir::memref::DeallocOp>(user)) {
      continue;
    }
    mlir::Operation* reader = user;
    if (IsReshape(user)) {
      // Read through the view by one op (besides replaced writers).
      llvm::SmallVector<mlir::Operation*, 2> through;
      for (mlir::Operation* u : user->getUsers()) {
        if (!replaced.contains(u)) through.push_back(u);
      }
      if (through.empty()) continue;
      if (through.size() != 1) return std::nullopt;
      reader = through.front();
    }
    if (replaced.contains(reader)) continue;
    auto generic = llvm::dyn_cast<mlir::linalg::GenericOp>(reader);
    std::optional<EpilogueGeneric> e;
    if (!rounding && generic) e = AsEpilogueGeneric(generic);
    if (!e || BaseBuffer(generic.getDpsInputOperand(0)->get()) != buffer ||
        generic->getBlock() != op->getBlock() ||
        !op->isBeforeInBlock(generic)) {
      return std::nullopt;
    }
    rounding = generic;
    epilogue = *e;
  }
  if (!rounding) return std::nullopt;
  // The bias is read at the call: not C, unchanged until the generic, and
  // defined before the call.
  if (epilogue.bias) {
    mlir::Operation* def = epilogue.bias.getDefiningOp();
    if (BaseBuffer(epilogue.bias) == buffer ||
        BaseBuffer(epilogue.bias) ==
            BaseBuffer(rounding.getDpsInitOperand(0)->get()) ||
        !UnwrittenBetween(epilogue.bias, op, rounding) ||
        (def && def->getBlock() == op->getBlock() &&
         !def->isBeforeInBlock(op))) {
      return std::nullopt;
    }
  }
  Value out = rounding.getDpsInitOperand(0)->get();
  const Value out_base = BaseBuffer(out);
  for (mlir::OpOperand& operand : op->getOpOperands()) {
    if (BaseBuffer(operand.get()) == out_base) return std::nullopt;
  }
  // The buffer must exist where the call is: an allocation after it (of a
  // static shape: no operands) moves up to it.
  mlir::Operation* late_alloc = nullptr;
  if (mlir::Operation* def = out.getDefiningOp();
      def && def->getBlock() == op->getBlock() && !def->isBeforeInBlock(op)) {
    if (!llvm::isa<mlir::memref::AllocOp>(def) || def->getNumOperands() != 0) {
      return std::nullopt;
    }
    late_alloc = def;
  }
  for (mlir::Operation* between = op->getNextNode(); between != rounding;
       between = between->getNextNode()) {
    if (mlir::isMemoryEffectFree(between) ||
        llvm::isa<mlir::memref::AllocOp>(between)) {
      continue;
    }
    if (!llvm::isa<mlir::linalg::LinalgOp>(between) ||
        llvm::any_of(between->getOperands(), [&](Value v) {
          return BaseBuffer(v) == out_base;
        })) {
      return std::nullopt;
    }
  }
  if (late_alloc != nullptr) late_alloc->moveBefore(op);
  OpBuilder b(op);
  auto out_type = out.getType().cast<mlir::MemRefType>();
  auto c_type = c.memref.getType().cast<mlir::MemRefType>();
  Type element = epilogue.store == StoreType::kBF16
                     ? static_cast<Type>(b.getI16Type())
                     : static_cast<Type>(b.getF32Type());
  if (out_type.getShape() == c_type.getShape()) {
    std::optional<Matrix> m = AsMatrix(out, element);
    if (m && m->rows == c.rows && m->cols == c.cols) {
      return Bf16Store{rounding, *m, epilogue};
    }
    return std::nullopt;
  }
  // Another shape of the same elements: both contiguous, C's matrices laid
  // out one after the other.
  if (!out_type.hasStaticShape() || !out_type.getLayout().isIdentity() ||
      out_type.getNumElements() != c_type.getNumElements()) {
    return std::nullopt;
  }
  Matrix m = c;
  m.memref = out;
  m.element_bytes = epilogue.store == StoreType::kBF16 ? 2 : 4;
  return Bf16Store{rounding, m, epilogue};
}

// The declaration of rbln_gemm (18 i64 arguments), added once; null if the
// module has the symbol with another type.
mlir::func::FuncOp DeclareOnednnGemm(mlir::ModuleOp module) {
  OpBuilder b(module.getContext());
  mlir::FunctionType type = b.getFunctionType(
      llvm::SmallVector<Type>(18, b.getI64Type()), {});
  if (auto existing =
          module.lookupSymbol<mlir::func::FuncOp>(kOnednnGemmSymbol)) {
    return existing.getFunctionType() == type ? existing : nullptr;
  }
  if (module.lookupSymbol(kOnednnGemmSymbol)) return nullptr;
  b.setInsertionPointToStart(module.getBody());
  auto decl =
      b.create<mlir::func::FuncOp>(module.getLoc(), kOnednnGemmSymbol, type);
  decl.setPrivate();
  return decl;
}

// The declaration of rbln_gemm_problem (7 i64 arguments), added once; null
// if the module has the symbol with another type.
mlir::func::FuncOp DeclareOnednnGemmProblem(mlir::ModuleOp module) {
  OpBuilder b(module.getContext());
  mlir::FunctionType type =
      b.getFunctionType(llvm::SmallVector<Type>(7, b.getI64Type()), {});
  if (auto existing =
          module.lookupSymbol<mlir::func::FuncOp>(kOnednnGemmProblemSymbol)) {
    return existing.getFunctionType() == type ? existing : nullptr;
  }
  if (module.lookupSymbol(kOnednnGemmProblemSymbol)) return nullptr;
  b.setInsertionPointToStart(module.getBody());
  auto decl = b.create<mlir::func::FuncOp>(module.getLoc(),
                                           kOnednnGemmProblemSymbol, type);
  decl.setPrivate();
  return decl;
}

// Blocks a GEMM is cut into (onednn_gemm.h): enough work per block to
// amortize a call (~2 M multiply-adds, well under a millisecond), at most
// kMaxGemmBlocks, and no more than the split dimension has.
int64_t BlocksFor(const Gemm& g) {
  const int64_t work = g.batch * g.m * g.n * g.k;
  const int64_t split = g.batch > 1 ? g.batch : std::max(g.m, g.n);
  return std::max<int64_t>(
      1, std::min({kMaxGemmBlocks, work / kMinGemmBlockWork, split}));
}

// The GemmProblem `g` describes (GEMM library words, onednn_gemm.h).
GemmProblem ProblemOf(const Gemm& g) {
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

// Emits the call(s) of `gemm`: rbln_gemm with the problem as arguments, or,
// with an epilogue, rbln_gemm_problem with the problem's words in the
// constant global `problem`.
void EmitOnednnGemm(OpBuilder& b, Location l, const Gemm& g,
                    mlir::func::FuncOp gemm, mlir::memref::GlobalOp problem,
                    Value sides = nullptr) {
  auto i64 = [&](int64_t v) -> Value {
    return b.create<mlir::arith::ConstantIntOp>(l, v, 64);
  };
  auto address = [&](const Matrix& m) -> Value {
    return b.create<mlir::arith::IndexCastOp>(l, b.getI64Type(),
                                              BaseAddress(b, l, m));
  };
  const GemmProblem p = ProblemOf(g);
  const int64_t blocks = BlocksFor(g);
  llvm::SmallVector<Value> args;
  if (problem) {
    Value words = b.create<mlir::memref::GetGlobalOp>(l, problem.getType(),
                                                      problem.getSymName());
    Value words_address = b.create<mlir::arith::IndexCastOp>(
        l, b.getI64Type(),
        b.create<mlir::memref::ExtractAlignedPointerAsIndexOp>(l, words));
    args = {words_address, address(g.a), address(g.b), address(g.c),
            sides ? sides : i64(0)};
  } else {
    args = {i64(static_cast<int64_t>(p.type)), i64(p.trans_b),
            i64(p.accumulate), i64(p.batch), i64(p.m), i64(p.n), i64(p.k),
            i64(p.lda), i64(p.ldb), i64(p.ldc), i64(p.stride_a),
            i64(p.stride_b), i64(p.stride_c), address(g.a), address(g.b),
            address(g.c)};
  }
  auto work = b.getI64IntegerAttr(g.batch * g.m * g.n * g.k);
  if (blocks == 1) {
    args.append({i64(0), i64(1)});
    auto call = b.create<mlir::func::CallOp>(l, gemm, args);
    call->setAttr(kWorkAttr, work);
    return;
  }
  args.push_back(nullptr);  // the block, set in the loop
  args.push_back(i64(blocks));
  auto loop = b.create<mlir::scf::ForOp>(
      l, IndexConst(b, l, 0), IndexConst(b, l, blocks), IndexConst(b, l, 1),
      std::nullopt, [&](OpBuilder& nb, Location, Value i, mlir::ValueRange) {
        args[args.size() - 2] =
            nb.create<mlir::arith::IndexCastOp>(l, nb.getI64Type(), i);
        nb.create<mlir::func::CallOp>(l, gemm, args);
        nb.create<mlir::scf::YieldOp>(l);
      });
  loop->setAttr(kParallelIterationsAttr, b.getUnitAttr());
  loop->setAttr(kWorkAttr, work);
}

// The ops that use `buffer`, directly or through views of it.
llvm::SmallVector<mlir::Operation*> BufferUsers(Value buffer) {
  llvm::SmallVector<mlir::Operation*> users;
  llvm::SmallVector<Value> values = {buffer};
  while (!values.empty()) {
    Value v = values.pop_back_val();
    for (mlir::Operation* user : v.getUsers()) {
      auto view = llvm::dyn_cast<mlir::ViewLikeOpInterface>(user);
      if (view && view.getViewSource() == v) {
        values.append(user->result_begin(), user->result_end());
      } else if (!llvm::is_contained(users, user)) {
        users.push_back(user);
      }
    }
  }
  return users;
}

// The writers among `writers` whose f32 values nothing will read: every use
// of their buffer (through views) is a deallocation, the writer itself, or
// a GEMM that reads the writer's twin instead (`twin_readers`).
llvm::SmallPtrSet<mlir::Operation*, 8> ReplacedWriters(
    llvm::ArrayRef<mlir::linalg::GenericOp> writers,
    const llvm::DenseMap<mlir::Operation*,
                         llvm::SmallPtrSet<mlir::Operation*, 4>>& twin_readers) {
  llvm::SmallPtrSet<mlir::Operation*, 8> replaced;
  for (mlir::linalg::GenericOp w : writers) {
    auto it = twin_readers.find(w.getOperation());
    const Value buffer = w.getDpsInitOperand(0)->get();
    if (it == twin_readers.end() ||
        !buffer.getDefiningOp<mlir::memref::AllocOp>()) {
      continue;
    }
    const bool unread = llvm::all_of(BufferUsers(buffer), [&](mlir::Operation* u) {
      return u == w.getOperation() || llvm::isa<mlir::memref::DeallocOp>(u) ||
             it->second.contains(u);
    });
    if (unread) replaced.insert(w.getOperation());
  }
  return replaced;
}

// Erases the views of `buffer` that nothing uses, innermost first.
void EraseUnusedViews(Value buffer) {
  for (mlir::Operation* user : llvm::make_early_inc_range(buffer.getUsers())) {
    auto view = llvm::dyn_cast<mlir::ViewLikeOpInterface>(user);
    if (!view || view.getViewSource() != buffer) continue;
    for (Value result : user->getResults()) EraseUnusedViews(result);
    if (user->use_empty()) user->erase();
  }
}

// Erases `buffer` (a memref.alloc), its unused views and its
// deallocations, if nothing else uses it.
void EraseIfUnused(Value buffer) {
  EraseUnusedViews(buffer);
  mlir::Operation* alloc = buffer.getDefiningOp();
  if (!alloc || !llvm::all_of(alloc->getUsers(), [](mlir::Operation* u) {
        return llvm::isa<mlir::memref::DeallocOp>(u);
      })) {
    return;
  }
  for (mlir::Operation* user : llvm::make_early_inc_range(alloc->getUsers())) {
    user->erase();
  }
  alloc->erase();
}

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
      if (std::optional<Gemm> g = Plan(op)) gemms.push_back({op, *g});
    });
    if (gemms.empty()) return;
    mlir::func::FuncOp callee =
        onednn ? DeclareOnednnGemm(module) : DeclareSgemm(module);
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
        problem_callee = DeclareOnednnGemmProblem(module);
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
                               ProblemOf(gemm).Encode());
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
