// ConvRewrite (issue 17): after bufferization, replaces f32 2-D convolutions
// on memrefs with calls of oneDNN's rbln_conv (onednn_conv.h), as the BLAS
// rewrite does for GEMMs (blas_rewrite_pass.cc).
//
// Rewritten: linalg.conv_2d_nchw_fchw whose operands are f32 memrefs with
// static shapes and strides and a static offset, and whose kernel is
// contiguous (identity layout), with no empty dim. The problem goes to the
// call as a constant i64 array (ConvProblem::Encode, a private memref.global).
// An input that is a zero-padded copy of another buffer (tensor.pad:
// a fill of +0.0 and a copy into its interior, read by the convolution
// alone) is read unpadded, with the padding in the problem; the fill and
// the copy go. A linalg.fill of +0.0 of the output right before the
// convolution is dropped and the call overwrites the output instead of
// accumulating.
//
// bf16 programs (narrow_operands.h): when the input and the kernel are both
// widenings of bf16 values, the call reads those as they are stored (a
// copy's source, or the narrow twin of the generic that computed them) --
// products of bf16 values are exact in f32, so only the f32 summation
// order differs -- and, when every reader of the f32 result after the
// convolution first rounds it to bf16 (the frontend's rounding), the call
// stores bf16 into a buffer those readers read instead. f16 convolutions
// stay f32 (oneDNN 2.6 has no f16 convolution), but read the f16 kernel as
// stored: the call widens it (ConvProblem::f16_kernel), once per content
// version for a weight, instead of a pass over it per run.
//
// A convolution large enough is cut into blocks (at most kMaxGemmBlocks of
// at least kMinGemmBlockWork multiply-adds, ConvBlockOf) called from an
// scf.for marked kParallelIterationsAttr that the partition pass spreads
// over the chiplet workers; every call or loop carries its multiply-adds in
// kWorkAttr. Everything else is left to the loop lowering.

#include "rbln/compiler/transforms/library/passes.h"

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/SmallVector.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassRegistry.h"
#include "rbln/compiler/abi/conv_problem.h"
#include "rbln/compiler/abi/kernel_abi.h"
#include "rbln/compiler/pipelines/mlir_compat.h"
#include "rbln/compiler/transforms/library/library_calls.h"
#include "rbln/compiler/transforms/library/narrow_operands.h"

namespace rbln::compiler {
namespace {

using ::mlir::Location;
using ::mlir::OpBuilder;
using ::mlir::Value;

// A 4-D memref's static strides and offset (f32, or `element`), or
// nothing.
struct Strided {
  int64_t strides[4];
  int64_t offset = 0;
  int64_t element_bytes = 4;
};

std::optional<Strided> StridesOf(Value v, mlir::Type element = nullptr) {
  auto type = v.getType().dyn_cast<mlir::MemRefType>();
  if (!type || type.getRank() != 4 || !type.hasStaticShape() ||
      (element ? type.getElementType() != element
               : !type.getElementType().isF32())) {
    return std::nullopt;
  }
  llvm::SmallVector<int64_t> strides;
  int64_t offset;
  if (mlir::failed(mlir::getStridesAndOffset(type, strides, offset)) ||
      llvm::any_of(strides, mlir::ShapedType::isDynamic) ||
      mlir::ShapedType::isDynamic(offset)) {
    return std::nullopt;
  }
  Strided s;
  std::copy(strides.begin(), strides.end(), s.strides);
  s.offset = offset;
  s.element_bytes = type.getElementTypeBitWidth() / 8;
  return s;
}

llvm::ArrayRef<int64_t> ShapeOf(Value v) {
  return v.getType().cast<mlir::MemRefType>().getShape();
}

// A convolution input that is a zero-padded copy (tensor.pad after
// bufferization): a buffer of its own, filled with +0.0, `inner` copied
// into its interior, read by the convolution alone. The call reads
// `inner` with the padding instead (oneDNN pads with zeros).
struct Padding {
  Value inner;
  mlir::Operation* copy = nullptr;  // linalg.copy or memref.copy
  mlir::linalg::FillOp fill;
  mlir::memref::SubViewOp interior;
  mlir::memref::AllocOp buffer;
  int64_t top = 0, left = 0, bottom = 0, right = 0;
};

std::optional<Padding> PaddingOf(Value src, mlir::Operation* conv) {
  Padding p;
  p.buffer = src.getDefiningOp<mlir::memref::AllocOp>();
  if (!p.buffer || !p.buffer.getType().getLayout().isIdentity() ||
      !p.buffer.getType().hasStaticShape() ||
      p.buffer.getType().getRank() != 4) {
    return std::nullopt;
  }
  for (mlir::Operation* user : p.buffer->getUsers()) {
    if (user == conv || llvm::isa<mlir::memref::DeallocOp>(user)) continue;
    if (auto fill = llvm::dyn_cast<mlir::linalg::FillOp>(user)) {
      mlir::FloatAttr value;
      if (p.fill || compat::DpsInitOperands(fill)[0]->get() != src ||
          !mlir::matchPattern(fill.getDpsInputOperand(0)->get(),
                              mlir::m_Constant(&value)) ||
          !value.getValue().isPosZero()) {
        return std::nullopt;
      }
      p.fill = fill;
      continue;
    }
    auto view = llvm::dyn_cast<mlir::memref::SubViewOp>(user);
    if (!view || p.interior || !view->hasOneUse()) return std::nullopt;
    p.interior = view;
  }
  if (!p.fill || !p.interior) return std::nullopt;
  mlir::Operation* copy = *p.interior->getUsers().begin();
  if (auto c = llvm::dyn_cast<mlir::linalg::CopyOp>(copy)) {
    if (compat::DpsInitOperands(c)[0]->get() != p.interior.getResult()) {
      return std::nullopt;
    }
    p.inner = c.getDpsInputOperand(0)->get();
  } else if (auto c = llvm::dyn_cast<mlir::memref::CopyOp>(copy)) {
    if (c.getTarget() != p.interior.getResult()) return std::nullopt;
    p.inner = c.getSource();
  } else {
    return std::nullopt;
  }
  p.copy = copy;
  // Fill, copy, convolution in this order in one block; the inner values
  // unchanged until the convolution reads them.
  mlir::Block* block = conv->getBlock();
  if (p.fill->getBlock() != block || copy->getBlock() != block ||
      !p.fill->isBeforeInBlock(copy) || !copy->isBeforeInBlock(conv) ||
      !UnwrittenBetween(p.inner, copy, conv)) {
    return std::nullopt;
  }
  // The interior: all images and channels, unit strides.
  llvm::ArrayRef<int64_t> offsets = p.interior.getStaticOffsets();
  llvm::ArrayRef<int64_t> sizes = p.interior.getStaticSizes();
  llvm::ArrayRef<int64_t> steps = p.interior.getStaticStrides();
  llvm::ArrayRef<int64_t> outer = ShapeOf(src);
  if (offsets.size() != 4 ||
      llvm::any_of(offsets, mlir::ShapedType::isDynamic) ||
      llvm::any_of(sizes, mlir::ShapedType::isDynamic) ||
      llvm::any_of(steps, [](int64_t s) { return s != 1; }) ||
      offsets[0] != 0 || offsets[1] != 0 || sizes[0] != outer[0] ||
      sizes[1] != outer[1]) {
    return std::nullopt;
  }
  p.top = offsets[2];
  p.left = offsets[3];
  p.bottom = outer[2] - offsets[2] - sizes[2];
  p.right = outer[3] - offsets[3] - sizes[3];
  return p;
}

// The bf16 values behind the f32 input `operand` that `reader` reads (the
// convolution `conv`, or the copy into its padded input), or nothing. (An
// f16 input stays f32: oneDNN 2.6 has no f16 convolution.)
std::optional<NarrowOperand> Bf16OperandOf(Value operand,
                                           mlir::Operation* reader,
                                           mlir::Operation* conv) {
  std::optional<NarrowOperand> n = NarrowOperandOf(operand, reader);
  if (!n || n->format != NarrowFloat::kBF16 || n->collapse || n->transposed) {
    return std::nullopt;
  }
  // A copy's source must also hold its values at the convolution (else
  // the twin, which nothing else writes, is read).
  if (n->source && reader != conv &&
      !UnwrittenBetween(n->source, reader, conv)) {
    n->source = nullptr;
  }
  return n;
}

// A generic that reads a convolution's f32 result only to round it to bf16
// first (the frontend's rounding of a bf16 op's result): the call can store
// the bf16 bits for it to read instead.
struct RoundingReader {
  mlir::linalg::GenericOp generic;
  unsigned input = 0;  // the operand that reads the result
  llvm::SmallVector<mlir::arith::TruncIOp> roundings;
};

// The roundings of block argument `x` in `body`, if they are all `x` is
// used for; else empty.
llvm::SmallVector<mlir::arith::TruncIOp> RoundingsOnly(mlir::Block& body,
                                                       Value x) {
  llvm::SmallVector<mlir::arith::TruncIOp> roundings;
  for (mlir::Operation& op : body) {
    auto trunc = llvm::dyn_cast<mlir::arith::TruncIOp>(op);
    if (trunc && RoundedToBf16(trunc.getResult()) == x) {
      roundings.push_back(trunc);
    }
  }
  if (roundings.empty()) return {};
  // The ops the roundings compute from, within the body (constants aside).
  llvm::SmallPtrSet<mlir::Operation*, 16> chain;
  llvm::SmallVector<mlir::Operation*> work(roundings.begin(), roundings.end());
  while (!work.empty()) {
    mlir::Operation* op = work.pop_back_val();
    if (!chain.insert(op).second) continue;
    for (Value operand : op->getOperands()) {
      mlir::Operation* def = operand.getDefiningOp();
      if (def && def->getBlock() == &body &&
          !def->hasTrait<mlir::OpTrait::ConstantLike>()) {
        work.push_back(def);
      }
    }
  }
  auto in_chain = [&](mlir::Operation* user) { return chain.contains(user); };
  if (!llvm::all_of(x.getUsers(), in_chain)) return {};
  for (mlir::Operation* op : chain) {
    auto trunc = llvm::dyn_cast<mlir::arith::TruncIOp>(op);
    if (trunc && llvm::is_contained(roundings, trunc)) continue;
    if (!llvm::all_of(op->getUsers(), in_chain)) return {};
  }
  return roundings;
}

// The rounding readers of `dst`, which the convolution overwrites whole:
// a buffer of its own (identity layout) that after the convolution is only
// read by generics in its block that round it first and freed, until the
// last of them overwrites it whole in place (its init's value unread) or
// the block ends. (Values the buffer held before the convolution, or after
// such an overwrite, are not the convolution's.)
std::optional<llvm::SmallVector<RoundingReader>> RoundingReadersOf(
    Value dst, mlir::Operation* conv) {
  auto alloc = dst.getDefiningOp<mlir::memref::AllocOp>();
  if (!alloc || !alloc.getType().getLayout().isIdentity()) return std::nullopt;
  // The uses after the convolution, in order.
  llvm::SmallVector<std::pair<mlir::Operation*, mlir::OpOperand*>> after;
  for (mlir::OpOperand& use : alloc->getUses()) {
    if (use.getOwner() == conv) continue;
    mlir::Operation* at =
        conv->getBlock()->findAncestorOpInBlock(*use.getOwner());
    if (at == nullptr) return std::nullopt;
    if (conv->isBeforeInBlock(at)) after.push_back({at, &use});
  }
  llvm::stable_sort(after, [](const auto& x, const auto& y) {
    return x.first->isBeforeInBlock(y.first);
  });
  llvm::SmallVector<RoundingReader> readers;
  mlir::Operation* overwrite = nullptr;
  for (auto [at, use] : after) {
    if (overwrite != nullptr && at != overwrite) break;
    mlir::Operation* user = use->getOwner();
    if (llvm::isa<mlir::memref::DeallocOp>(user)) continue;
    auto generic = llvm::dyn_cast<mlir::linalg::GenericOp>(user);
    if (!generic || at != user) return std::nullopt;
    mlir::Block& body = generic.getRegion().front();
    if (generic.isDpsInit(use)) {
      if (!body.getArgument(use->getOperandNumber()).use_empty()) {
        return std::nullopt;
      }
      overwrite = generic;
      continue;
    }
    RoundingReader r{generic, use->getOperandNumber()};
    r.roundings = RoundingsOnly(body, body.getArgument(r.input));
    if (r.roundings.empty()) return std::nullopt;
    readers.push_back(std::move(r));
  }
  // An overwrite that does not also read the result writes values of its
  // own before anything reads the convolution's.
  if (readers.empty()) return std::nullopt;
  return readers;
}

// Makes `r` read the bf16 bits `bits` (i16, the result's shape) instead of
// rounding the f32 result itself.
void ReadBits(RoundingReader r, Value bits) {
  mlir::Block& body = r.generic.getRegion().front();
  mlir::BlockArgument x = body.getArgument(r.input);
  r.generic->setOperand(r.input, bits);
  x.setType(bits.getType().cast<mlir::MemRefType>().getElementType());
  for (mlir::arith::TruncIOp t : r.roundings) {
    t.getResult().replaceAllUsesWith(x);
  }
  // The rounding chains are dead now (RoundingsOnly).
  for (mlir::Operation& op :
       llvm::make_early_inc_range(llvm::reverse(body.getOperations()))) {
    if (&op != body.getTerminator() && op.use_empty() &&
        mlir::isMemoryEffectFree(&op)) {
      op.erase();
    }
  }
}

struct Conv {
  ConvProblem problem;
  Value src, weights, dst;
  Strided src_layout, dst_layout;
  std::optional<Padding> padding;
  // Both, or neither: a bf16 convolution.
  std::optional<NarrowOperand> narrow_src, narrow_weights;
  // Else, in f16 programs: the f16 kernel the f32 one was widened from.
  std::optional<NarrowOperand> f16_kernel;
};

// True if `kernel` (4-D, of `element`) is contiguous from its start.
bool IsContiguousKernel(Value kernel, mlir::Type element) {
  std::optional<Strided> w = StridesOf(kernel, element);
  if (!w) return false;
  llvm::ArrayRef<int64_t> ws = ShapeOf(kernel);
  return w->offset == 0 && w->strides[3] == 1 && w->strides[2] == ws[3] &&
         w->strides[1] == ws[2] * ws[3] &&
         w->strides[0] == ws[1] * ws[2] * ws[3];
}

// The `format` kernel behind the f32 kernel `weights` of `op`, read from a
// contiguous buffer as the call wants it: the copy's source if that one
// is contiguous, else the twin (a buffer of its own); or nothing.
std::optional<NarrowOperand> NarrowKernelOf(Value weights, mlir::Operation* op,
                                            NarrowFloat format) {
  std::optional<NarrowOperand> k = NarrowOperandOf(weights, op);
  if (!k || k->format != format || k->collapse || k->transposed) {
    return std::nullopt;
  }
  if (k->source &&
      !IsContiguousKernel(k->source, StorageType(op->getContext(), format))) {
    k->source = nullptr;
  }
  return k;
}

// The problem of `op`, or nothing if the call cannot take it.
std::optional<Conv> Plan(mlir::linalg::Conv2DNchwFchwOp op) {
  if (!compat::HasBufferSemantics(op)) return std::nullopt;
  Conv c;
  c.src = op.getDpsInputOperand(0)->get();
  c.weights = op.getDpsInputOperand(1)->get();
  c.dst = compat::DpsInitOperands(op)[0]->get();
  c.padding = PaddingOf(c.src, op);
  if (c.padding) c.src = c.padding->inner;
  std::optional<Strided> s = StridesOf(c.src), d = StridesOf(c.dst);
  // The kernel contiguous: [oc, ic, kh, kw] row-major from its start.
  if (!s || !d ||
      !IsContiguousKernel(c.weights,
                          mlir::Float32Type::get(op.getContext()))) {
    return std::nullopt;
  }
  llvm::ArrayRef<int64_t> ss = ShapeOf(c.src), ws = ShapeOf(c.weights),
                          ds = ShapeOf(c.dst);
  if (llvm::is_contained(ss, 0) || llvm::is_contained(ws, 0) ||
      llvm::is_contained(ds, 0)) {
    return std::nullopt;
  }
  c.src_layout = *s;
  c.dst_layout = *d;
  ConvProblem& p = c.problem;
  p.type = ConvOperandType::kF32;
  p.n = ss[0];
  p.ic = ss[1];
  p.ih = ss[2];
  p.iw = ss[3];
  p.oc = ws[0];
  p.kh = ws[2];
  p.kw = ws[3];
  p.oh = ds[2];
  p.ow = ds[3];
  if (c.padding) {
    p.pad_top = c.padding->top;
    p.pad_left = c.padding->left;
    p.pad_bottom = c.padding->bottom;
    p.pad_right = c.padding->right;
  }
  llvm::SmallVector<int64_t> strides(op.getStrides().getValues<int64_t>());
  llvm::SmallVector<int64_t> dilations(op.getDilations().getValues<int64_t>());
  p.stride_h = strides[0];
  p.stride_w = strides[1];
  p.dilation_h = dilations[0];
  p.dilation_w = dilations[1];
  std::copy(s->strides, s->strides + 4, p.src_strides);
  std::copy(d->strides, d->strides + 4, p.dst_strides);
  // The verifier checks the shapes agree; oneDNN wants the output to be
  // exactly what the (padded) input and the kernel give.
  const int64_t ih = p.ih + p.pad_top + p.pad_bottom;
  const int64_t iw = p.iw + p.pad_left + p.pad_right;
  if (ws[1] != ss[1] || ds[0] != ss[0] || ds[1] != ws[0] ||
      (ih - p.dilation_h * (p.kh - 1) - 1) / p.stride_h + 1 != p.oh ||
      (iw - p.dilation_w * (p.kw - 1) - 1) / p.stride_w + 1 != p.ow) {
    return std::nullopt;
  }
  // bf16 operands: both widened from bf16 (the kernel as stored, the input
  // unpadded).
  c.narrow_src = Bf16OperandOf(c.src, c.padding ? c.padding->copy : op, op);
  if (c.narrow_src) {
    c.narrow_weights = NarrowKernelOf(c.weights, op, NarrowFloat::kBF16);
  }
  if (!c.narrow_weights) c.narrow_src.reset();
  // f16 programs: the kernel read as stored, widened by the call (once per
  // content version for a weight), not by a pass over it per run.
  if (!c.narrow_src) {
    c.f16_kernel = NarrowKernelOf(c.weights, op, NarrowFloat::kF16);
  }
  return c;
}

void EmitCall(OpBuilder& b, Location l, const Conv& c,
              mlir::memref::GlobalOp problem, mlir::func::FuncOp callee) {
  auto i64 = [&](int64_t v) -> Value {
    return b.create<mlir::arith::ConstantIntOp>(l, v, 64);
  };
  auto index = [&](int64_t v) -> Value {
    return b.create<mlir::arith::ConstantIndexOp>(l, v);
  };
  // The address of `memref`'s first element (`layout`: its offset), as i64.
  auto address = [&](Value memref, const Strided& layout) -> Value {
    Value a = b.create<mlir::memref::ExtractAlignedPointerAsIndexOp>(l, memref);
    if (layout.offset != 0) {
      a = b.create<mlir::arith::AddIOp>(
          l, a, index(layout.offset * layout.element_bytes));
    }
    return b.create<mlir::arith::IndexCastOp>(l, b.getI64Type(), a);
  };
  llvm::SmallVector<Value> args = {
      ProblemWordsAddress(b, l, problem), address(c.src, c.src_layout),
      address(c.weights, Strided{}), address(c.dst, c.dst_layout), i64(0)};
  // Blocks along the dimension ConvBlockOf splits.
  EmitBlockedCalls(
      b, l, callee, std::move(args),
      LibraryCallBlocks(c.problem.Work(), ConvSplitExtent(c.problem)),
      c.problem.Work());
}

class ConvRewritePass
    : public mlir::PassWrapper<ConvRewritePass,
                               mlir::OperationPass<mlir::ModuleOp>> {
 public:
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(ConvRewritePass)

  llvm::StringRef getArgument() const final { return kConvRewritePassName; }
  llvm::StringRef getDescription() const final {
    return "Rewrite f32 (and bf16-widened) linalg.conv_2d_nchw_fchw on "
           "memrefs to oneDNN rbln_conv calls";
  }
  void getDependentDialects(mlir::DialectRegistry& registry) const override {
    registry.insert<mlir::arith::ArithDialect, mlir::func::FuncDialect,
                    mlir::memref::MemRefDialect, mlir::scf::SCFDialect>();
  }

  void runOnOperation() override {
    mlir::ModuleOp module = getOperation();
    llvm::SmallVector<mlir::linalg::Conv2DNchwFchwOp> convs;
    bool any = false;
    module.walk([&](mlir::linalg::Conv2DNchwFchwOp op) {
      convs.push_back(op);
      any |= Plan(op).has_value();
    });
    if (!any) return;
    mlir::func::FuncOp callee =
        DeclareLibraryFunction(module, kOnednnConvSymbol, 7);
    if (!callee) {
      module.emitError() << "symbol " << kOnednnConvSymbol
                         << " exists with another type";
      return signalPassFailure();
    }
    mlir::SymbolTable symbols(module);
    llvm::SmallVector<mlir::linalg::GenericOp> writers;
    llvm::DenseMap<mlir::Operation*, Value> twins;
    // Planned in program order, each after the rewrite of those before it:
    // a rounding reader that the rewrite of one convolution makes read
    // bf16 bits may then write the next one's input whole.
    for (mlir::linalg::Conv2DNchwFchwOp conv_op : convs) {
      std::optional<Conv> planned = Plan(conv_op);
      if (!planned) continue;
      Conv& conv = *planned;
      mlir::Operation* op = conv_op;
      OpBuilder b(op);
      const Location l = op->getLoc();
      if (conv.narrow_src) UseBf16Operands(conv, twins, writers);
      if (conv.f16_kernel) {
        const NarrowOperand& k = *conv.f16_kernel;
        conv.weights =
            k.source ? k.source : NarrowTwin(k.writer, k.format, twins);
        conv.problem.f16_kernel = true;
        writers.push_back(k.writer);
      }
      if (mlir::linalg::FillOp fill = ZeroFillOf(conv.dst, op)) {
        conv.problem.accumulate = false;
        fill->erase();
      }
      // A bf16 result that its readers only round: stored as bf16 by the
      // call into a buffer they read instead.
      std::optional<llvm::SmallVector<RoundingReader>> readers;
      if (conv.problem.type == ConvOperandType::kBF16 &&
          !conv.problem.accumulate) {
        readers = RoundingReadersOf(conv.dst, op);
      }
      const Value f32_result = conv.dst;
      if (readers) {
        auto type = f32_result.getType().cast<mlir::MemRefType>();
        conv.dst = b.create<mlir::memref::AllocOp>(
            l, mlir::MemRefType::get(type.getShape(), b.getI16Type()),
            b.getI64IntegerAttr(64));
        conv.dst_layout = *StridesOf(conv.dst, b.getI16Type());
        std::copy(conv.dst_layout.strides, conv.dst_layout.strides + 4,
                  conv.problem.dst_strides);
        conv.problem.epilogue.store = StoreType::kBF16;
      }
      mlir::memref::GlobalOp problem =
          ProblemWordsGlobal(module, symbols,
                             std::string(kOnednnConvSymbol) + "_problem",
                             conv.problem.Encode());
      EmitCall(b, l, conv, problem, callee);
      mlir::Block* block = op->getBlock();
      op->erase();
      if (readers) {
        for (const RoundingReader& r : *readers) ReadBits(r, conv.dst);
        // The f32 buffer goes if only its deallocations are left.
        mlir::Operation* alloc = f32_result.getDefiningOp();
        if (llvm::all_of(alloc->getUsers(), [](mlir::Operation* u) {
              return llvm::isa<mlir::memref::DeallocOp>(u);
            })) {
          for (mlir::Operation* user :
               llvm::make_early_inc_range(alloc->getUsers())) {
            user->setOperand(0, conv.dst);
          }
          alloc->erase();
        } else {
          OpBuilder(block->getTerminator())
              .create<mlir::memref::DeallocOp>(l, conv.dst);
        }
      }
      if (conv.padding) ErasePadding(*conv.padding);
    }
    EraseUnreadWriters(writers);
  }

 private:
  // Makes `conv` read the bf16 values its f32 operands were widened from.
  static void UseBf16Operands(
      Conv& conv, llvm::DenseMap<mlir::Operation*, Value>& twins,
      llvm::SmallVectorImpl<mlir::linalg::GenericOp>& writers) {
    auto narrow = [&](const NarrowOperand& n) {
      return n.source ? n.source : NarrowTwin(n.writer, n.format, twins);
    };
    const mlir::Type bits =
        mlir::IntegerType::get(conv.src.getContext(), 16);
    conv.src = narrow(*conv.narrow_src);
    conv.weights = narrow(*conv.narrow_weights);
    // (Always: a twin has an identity layout, a copy's source the strides
    // its f32 copy was read with.)
    std::optional<Strided> s = StridesOf(conv.src, bits);
    conv.src_layout = *s;
    std::copy(s->strides, s->strides + 4, conv.problem.src_strides);
    conv.problem.type = ConvOperandType::kBF16;
    writers.append({conv.narrow_src->writer, conv.narrow_weights->writer});
  }

  // The padded copy the call no longer reads.
  static void ErasePadding(Padding& p) {
    p.copy->erase();
    p.interior->erase();
    p.fill->erase();
    for (mlir::Operation* user :
         llvm::make_early_inc_range(p.buffer->getUsers())) {
      user->erase();  // deallocations only
    }
    p.buffer->erase();
  }
};

}  // namespace

std::unique_ptr<mlir::Pass> CreateConvRewritePass() {
  return std::make_unique<ConvRewritePass>();
}

void RegisterConvRewritePass() {
  static std::once_flag once;
  std::call_once(once, [] { mlir::PassRegistration<ConvRewritePass>(); });
}

}  // namespace rbln::compiler
