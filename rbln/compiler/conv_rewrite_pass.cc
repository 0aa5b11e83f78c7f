#include "rbln/compiler/conv_rewrite_pass.h"

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "llvm/ADT/STLExtras.h"
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
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassRegistry.h"
#include "rbln/compiler/blas_rewrite_pass.h"
#include "rbln/compiler/mlir_compat.h"
#include "rbln/compiler/onednn_conv.h"
#include "rbln/compiler/partition_pass.h"
#include "rbln/compiler/problem_words.h"

namespace rbln::compiler {
namespace {

using ::mlir::Location;
using ::mlir::OpBuilder;
using ::mlir::Value;

// A 4-D f32 memref's static strides and offset, or nothing.
struct Strided {
  int64_t strides[4];
  int64_t offset = 0;
};

std::optional<Strided> StridesOf(Value v) {
  auto type = v.getType().dyn_cast<mlir::MemRefType>();
  if (!type || type.getRank() != 4 || !type.hasStaticShape() ||
      !type.getElementType().isF32()) {
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
  return s;
}

struct Conv {
  ConvProblem problem;
  Value src, weights, dst;
  int64_t src_offset = 0, dst_offset = 0;
};

// The problem of `op`, or nothing if the call cannot take it.
std::optional<Conv> Plan(mlir::linalg::Conv2DNchwFchwOp op) {
  if (!compat::HasBufferSemantics(op)) return std::nullopt;
  Value src = op.getDpsInputOperand(0)->get();
  Value weights = op.getDpsInputOperand(1)->get();
  Value dst = compat::DpsInitOperands(op)[0]->get();
  std::optional<Strided> s = StridesOf(src), w = StridesOf(weights),
                         d = StridesOf(dst);
  if (!s || !w || !d) return std::nullopt;
  auto shape = [](Value v) {
    return v.getType().cast<mlir::MemRefType>().getShape();
  };
  llvm::ArrayRef<int64_t> ss = shape(src), ws = shape(weights),
                          ds = shape(dst);
  if (llvm::is_contained(ss, 0) || llvm::is_contained(ws, 0) ||
      llvm::is_contained(ds, 0)) {
    return std::nullopt;
  }
  // The kernel contiguous: [oc, ic, kh, kw] row-major from its start.
  if (w->offset != 0 || w->strides[3] != 1 || w->strides[2] != ws[3] ||
      w->strides[1] != ws[2] * ws[3] || w->strides[0] != ws[1] * ws[2] * ws[3]) {
    return std::nullopt;
  }
  Conv c;
  c.src = src;
  c.weights = weights;
  c.dst = dst;
  c.src_offset = s->offset;
  c.dst_offset = d->offset;
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
  llvm::SmallVector<int64_t> strides(op.getStrides().getValues<int64_t>());
  llvm::SmallVector<int64_t> dilations(op.getDilations().getValues<int64_t>());
  p.stride_h = strides[0];
  p.stride_w = strides[1];
  p.dilation_h = dilations[0];
  p.dilation_w = dilations[1];
  std::copy(s->strides, s->strides + 4, p.src_strides);
  std::copy(d->strides, d->strides + 4, p.dst_strides);
  // The verifier checks the shapes agree; oneDNN wants the output to be
  // exactly what the input and the kernel give.
  if (ws[1] != ss[1] || ds[0] != ss[0] || ds[1] != ws[0] ||
      (p.ih - p.dilation_h * (p.kh - 1) - 1) / p.stride_h + 1 != p.oh ||
      (p.iw - p.dilation_w * (p.kw - 1) - 1) / p.stride_w + 1 != p.ow) {
    return std::nullopt;
  }
  return c;
}

// A linalg.fill of +0.0 into `dst` right before `op` (nothing between them
// reads or writes it), or null.
mlir::linalg::FillOp ZeroFillOf(Value dst, mlir::Operation* op) {
  auto fill = llvm::dyn_cast_or_null<mlir::linalg::FillOp>(
      op->getPrevNode());
  mlir::FloatAttr value;
  if (!fill || compat::DpsInitOperands(fill)[0]->get() != dst ||
      !mlir::matchPattern(fill.getDpsInputOperand(0)->get(),
                          mlir::m_Constant(&value)) ||
      !value.getValue().isPosZero()) {
    return nullptr;
  }
  return fill;
}

// The declaration of rbln_conv (7 i64 arguments), added once; null if the
// module has the symbol with another type.
mlir::func::FuncOp DeclareConv(mlir::ModuleOp module) {
  OpBuilder b(module.getContext());
  mlir::FunctionType type = b.getFunctionType(
      llvm::SmallVector<mlir::Type>(7, b.getI64Type()), {});
  if (auto existing =
          module.lookupSymbol<mlir::func::FuncOp>(kOnednnConvSymbol)) {
    return existing.getFunctionType() == type ? existing : nullptr;
  }
  if (module.lookupSymbol(kOnednnConvSymbol)) return nullptr;
  b.setInsertionPointToStart(module.getBody());
  auto decl =
      b.create<mlir::func::FuncOp>(module.getLoc(), kOnednnConvSymbol, type);
  decl.setPrivate();
  return decl;
}

// Blocks a convolution is cut into: enough work per block to amortize a
// call, at most kMaxGemmBlocks, and no more than the split dimension has.
int64_t BlocksFor(const ConvProblem& p) {
  return std::max<int64_t>(1, std::min({kMaxGemmBlocks,
                                        p.Work() / kMinGemmBlockWork,
                                        ConvSplitExtent(p)}));
}

void EmitCall(OpBuilder& b, Location l, const Conv& c,
              mlir::memref::GlobalOp problem, mlir::func::FuncOp callee) {
  auto i64 = [&](int64_t v) -> Value {
    return b.create<mlir::arith::ConstantIntOp>(l, v, 64);
  };
  auto index = [&](int64_t v) -> Value {
    return b.create<mlir::arith::ConstantIndexOp>(l, v);
  };
  // The address of element `offset` of `memref`, as i64.
  auto address = [&](Value memref, int64_t offset) -> Value {
    Value a = b.create<mlir::memref::ExtractAlignedPointerAsIndexOp>(l, memref);
    if (offset != 0) {
      a = b.create<mlir::arith::AddIOp>(l, a, index(offset * 4));
    }
    return b.create<mlir::arith::IndexCastOp>(l, b.getI64Type(), a);
  };
  Value words = b.create<mlir::memref::GetGlobalOp>(l, problem.getType(),
                                                    problem.getSymName());
  llvm::SmallVector<Value> args = {address(words, 0), address(c.src, c.src_offset),
                                   address(c.weights, 0),
                                   address(c.dst, c.dst_offset), i64(0)};
  const int64_t blocks = BlocksFor(c.problem);
  auto work = b.getI64IntegerAttr(c.problem.Work());
  if (blocks == 1) {
    args.append({i64(0), i64(1)});
    auto call = b.create<mlir::func::CallOp>(l, callee, args);
    call->setAttr(kWorkAttr, work);
    return;
  }
  args.push_back(nullptr);  // the block, set in the loop
  args.push_back(i64(blocks));
  auto loop = b.create<mlir::scf::ForOp>(
      l, index(0), index(blocks), index(1), std::nullopt,
      [&](OpBuilder& nb, Location, Value i, mlir::ValueRange) {
        args[args.size() - 2] =
            nb.create<mlir::arith::IndexCastOp>(l, nb.getI64Type(), i);
        nb.create<mlir::func::CallOp>(l, callee, args);
        nb.create<mlir::scf::YieldOp>(l);
      });
  loop->setAttr(kParallelIterationsAttr, b.getUnitAttr());
  loop->setAttr(kWorkAttr, work);
}

class ConvRewritePass
    : public mlir::PassWrapper<ConvRewritePass,
                               mlir::OperationPass<mlir::ModuleOp>> {
 public:
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(ConvRewritePass)

  llvm::StringRef getArgument() const final { return kConvRewritePassName; }
  llvm::StringRef getDescription() const final {
    return "Rewrite f32 linalg.conv_2d_nchw_fchw on memrefs to oneDNN "
           "rbln_conv calls";
  }
  void getDependentDialects(mlir::DialectRegistry& registry) const override {
    registry.insert<mlir::arith::ArithDialect, mlir::func::FuncDialect,
                    mlir::memref::MemRefDialect, mlir::scf::SCFDialect>();
  }

  void runOnOperation() override {
    mlir::ModuleOp module = getOperation();
    std::vector<std::pair<mlir::Operation*, Conv>> convs;
    module.walk([&](mlir::linalg::Conv2DNchwFchwOp op) {
      if (std::optional<Conv> c = Plan(op)) convs.push_back({op, *c});
    });
    if (convs.empty()) return;
    mlir::func::FuncOp callee = DeclareConv(module);
    if (!callee) {
      module.emitError() << "symbol " << kOnednnConvSymbol
                         << " exists with another type";
      return signalPassFailure();
    }
    mlir::SymbolTable symbols(module);
    for (auto& [op, conv] : convs) {
      if (mlir::linalg::FillOp fill = ZeroFillOf(conv.dst, op)) {
        conv.problem.accumulate = false;
        fill->erase();
      }
      mlir::memref::GlobalOp problem =
          ProblemWordsGlobal(module, symbols,
                             std::string(kOnednnConvSymbol) + "_problem",
                             conv.problem.Encode());
      OpBuilder b(op);
      EmitCall(b, op->getLoc(), conv, problem, callee);
      op->erase();
    }
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
