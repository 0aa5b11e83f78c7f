// MaskedAttentionRewrite (SPEC P5): after bufferization, replaces the
// linalg.generic the frontend emits for scaled dot-product attention
// (frontend/ops/masked_attention_ops.h: marked kMaskedAttentionAttr, one
// output element per iteration, reading the query and keys in its inner
// product, then the mask, then the values) with calls of
// rbln_masked_attention (kernels/masked_attention.h), which visit only the
// keys each query's mask leaves visible. The problem is a constant of the
// module (MaskedAttentionProblem's words); the calls are cut into blocks of
// work items (batch x kv head) that the partition pass spreads over the
// chiplet workers.
//
// A marked generic the call cannot take (dynamic strides, a non-unit stride
// along the last dim, loads it does not expect) fails the pass with an
// error on the op saying why, and so does a key loop whose generic lost the
// marker (kMaskedAttentionKeysAttr outside a marked generic: a pass merged
// the op into another): its loops would compute the same values far
// slower, silently (SPEC P8).
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

#include "llvm/ADT/SmallVector.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassRegistry.h"
#include "rbln/compiler/abi/attention_problem.h"
#include "rbln/compiler/abi/kernel_abi.h"
#include "rbln/compiler/transforms/library/attention_buffers.h"
#include "rbln/compiler/transforms/library/gemm_lowering.h"
#include "rbln/compiler/transforms/library/library_calls.h"
#include "rbln/compiler/transforms/library/passes.h"

namespace rbln::compiler {
namespace {

using ::mlir::OpBuilder;
using ::mlir::Value;

// What one masked attention generic becomes.
struct MaskedAttention {
  Buffer query, keys, values, out;
  std::optional<Buffer> mask;
  MaskedAttentionProblem problem;
};

mlir::MemRefType TypeOf(const Buffer& b) {
  return b.base.memref.getType().cast<mlir::MemRefType>();
}

std::optional<AttentionMaskType> MaskTypeOf(mlir::Type element) {
  if (element.isInteger(8)) return AttentionMaskType::kBool;
  if (element.isF32()) return AttentionMaskType::kF32;
  if (element.isInteger(16)) return AttentionMaskType::kBF16;  // bf16 bits
  if (element.isF16()) return AttentionMaskType::kF16;
  return std::nullopt;
}

// The call `op` becomes, or nullopt with `why` set.
std::optional<MaskedAttention> Plan(mlir::linalg::GenericOp op, std::string& why) {
  auto fail = [&](const char* reason) -> std::optional<MaskedAttention> {
    why = reason;
    return std::nullopt;
  };
  auto attrs = op->getAttrOfType<mlir::DictionaryAttr>(kMaskedAttentionAttr);
  if (!attrs) return fail("its marker is not a dictionary");
  if (op.getNumDpsInputs() != 1 || op.getNumDpsInits() != 1 || op->getNumResults() != 0) {
    return fail("it is not one input and one output buffer (not bufferized, or merged with "
                "another op)");
  }
  auto scale = attrs.getAs<mlir::FloatAttr>("scale");
  auto causal = attrs.getAs<mlir::BoolAttr>("causal");
  auto has_mask = attrs.getAs<mlir::BoolAttr>("mask");
  if (!scale || !causal || !has_mask) return fail("its marker lacks scale, causal or mask");
  // The buffers from outside the op the body loads, in body order: query,
  // keys, [mask,] values.
  llvm::SmallVector<Value, 4> loads;
  op.getRegion().walk([&](mlir::memref::LoadOp load) {
    Value m = load.getMemRef();
    if (!op->isAncestor(m.getParentRegion()->getParentOp())) loads.push_back(m);
  });
  const size_t expected = has_mask.getValue() ? 4 : 3;
  if (loads.size() != expected) {
    return fail("its body does not load a query, keys, values and (when its marker says so) "
                "a mask, once each");
  }
  MaskedAttention a;
  std::optional<Buffer> query = AsBuffer(loads[0], false), keys = AsBuffer(loads[1], false),
                        values = AsBuffer(loads.back(), false),
                        out = AsBuffer(op.getDpsInitOperand(0)->get(), false);
  if (!query || !keys || !values || !out) {
    return fail("a buffer has dynamic strides or a non-unit stride along its last dim");
  }
  a.query = *query, a.keys = *keys, a.values = *values, a.out = *out;
  if (has_mask.getValue()) {
    a.mask = AsBuffer(loads[2], false);
    if (!a.mask) return fail("the mask has dynamic strides or a non-unit stride along keys");
  }
  const auto qt = TypeOf(a.query), kt = TypeOf(a.keys), vt = TypeOf(a.values),
             ot = TypeOf(a.out);
  if (qt.getRank() != 4 || kt.getRank() != 4 || vt.getRank() != 4 || ot.getRank() != 4) {
    return fail("its query, keys, values and output are not rank 4");
  }
  std::optional<GemmOperandType> q_type = LibraryOperandType(qt.getElementType());
  std::optional<GemmOperandType> kv_type = LibraryOperandType(kt.getElementType());
  std::optional<GemmOperandType> out_type = LibraryOperandType(ot.getElementType());
  if (!q_type || !kv_type || !out_type || vt.getElementType() != kt.getElementType()) {
    return fail("its element types are not the call's");
  }
  MaskedAttentionProblem& p = a.problem;
  p.query_type = *q_type, p.kv_type = *kv_type, p.out_type = *out_type;
  p.causal = causal.getValue();
  p.scale = static_cast<float>(scale.getValueAsDouble());
  p.batch = qt.getDimSize(0), p.heads = qt.getDimSize(1), p.q_len = qt.getDimSize(2);
  p.head_dim = qt.getDimSize(3);
  p.kv_heads = kt.getDimSize(1), p.kv_len = kt.getDimSize(2), p.value_dim = vt.getDimSize(3);
  if (kt.getDimSize(0) != p.batch || vt.getDimSize(0) != p.batch || kt.getDimSize(3) != p.head_dim ||
      vt.getDimSize(1) != p.kv_heads || vt.getDimSize(2) != p.kv_len || p.kv_heads <= 0 ||
      p.heads % p.kv_heads != 0 ||
      ot.getShape() != llvm::ArrayRef<int64_t>{p.batch, p.heads, p.q_len, p.value_dim}) {
    return fail("its buffers' shapes do not match");
  }
  for (int d = 0; d < 3; ++d) {
    p.query_strides[d] = a.query.strides[d];
    p.key_strides[d] = a.keys.strides[d];
    p.value_strides[d] = a.values.strides[d];
    p.out_strides[d] = a.out.strides[d];
  }
  if (a.mask) {
    const auto mt = TypeOf(*a.mask);
    std::optional<AttentionMaskType> mask_type = MaskTypeOf(mt.getElementType());
    const int64_t rank = mt.getRank();
    if (!mask_type || rank < 1 || rank > 4 || mt.getDimSize(rank - 1) != p.kv_len) {
      return fail("its mask is not bool or float over the keys");
    }
    p.mask_type = *mask_type;
    const int64_t full[4] = {p.batch, p.heads, p.q_len, p.kv_len};
    for (int f = 0; f < 4; ++f) {
      const int64_t t = f - (4 - rank);
      if (t < 0 || mt.getDimSize(t) == 1) continue;  // broadcast: stride 0
      if (mt.getDimSize(t) != full[f]) return fail("its mask does not broadcast");
      p.mask_strides[f] = a.mask->strides[t];
    }
  }
  return a;
}

class MaskedAttentionRewritePass
    : public mlir::PassWrapper<MaskedAttentionRewritePass, mlir::OperationPass<mlir::ModuleOp>> {
 public:
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(MaskedAttentionRewritePass)

  llvm::StringRef getArgument() const final { return kMaskedAttentionRewritePassName; }
  llvm::StringRef getDescription() const final {
    return "Rewrite the frontend's masked attention generics on memrefs to "
           "rbln_masked_attention calls";
  }
  void getDependentDialects(mlir::DialectRegistry& registry) const override {
    registry.insert<mlir::arith::ArithDialect, mlir::func::FuncDialect,
                    mlir::LLVM::LLVMDialect, mlir::memref::MemRefDialect,
                    mlir::scf::SCFDialect>();
  }

  void runOnOperation() override {
    mlir::ModuleOp module = getOperation();
    llvm::SmallVector<std::pair<mlir::linalg::GenericOp, MaskedAttention>, 4> ops;
    bool failed = false;
    module.walk([&](mlir::Operation* op) {
      if (op->hasAttr(kMaskedAttentionKeysAttr)) {
        auto generic = op->getParentOfType<mlir::linalg::GenericOp>();
        if (!generic || !generic->hasAttr(kMaskedAttentionAttr)) {
          op->emitError() << "masked attention lost its " << kMaskedAttentionAttr
                          << " marker before the rewrite to " << kMaskedAttentionSymbol
                          << " calls (merged into another op by fusion?)";
          failed = true;
        }
        return;
      }
      if (!op->hasAttr(kMaskedAttentionAttr)) return;
      auto generic = llvm::dyn_cast<mlir::linalg::GenericOp>(op);
      std::string why = "it is not a linalg.generic";
      if (std::optional<MaskedAttention> a = generic ? Plan(generic, why) : std::nullopt) {
        ops.push_back({generic, *a});
        return;
      }
      op->emitError() << "masked attention cannot become " << kMaskedAttentionSymbol
                      << " calls: " << why;
      failed = true;
    });
    if (failed) return signalPassFailure();
    if (ops.empty()) return;
    mlir::func::FuncOp callee = DeclareLibraryFunction(module, kMaskedAttentionSymbol, 9);
    if (!callee) {
      module.emitError() << "symbol " << kMaskedAttentionSymbol << " exists with another type";
      return signalPassFailure();
    }
    mlir::SymbolTable symbols(module);
    for (auto& [op, a] : ops) {
      OpBuilder b(op);
      mlir::Location l = op.getLoc();
      auto i64 = [&](int64_t v) -> Value {
        return b.create<mlir::arith::ConstantIntOp>(l, v, 64);
      };
      auto address = [&](const Buffer& buffer) -> Value {
        return b.create<mlir::arith::IndexCastOp>(l, b.getI64Type(),
                                                  BaseAddress(b, l, buffer.base));
      };
      mlir::memref::GlobalOp words = ProblemWordsGlobal(
          module, symbols, std::string(kMaskedAttentionSymbol) + "_words", a.problem.Encode());
      const MaskedAttentionProblem& p = a.problem;
      llvm::SmallVector<Value> args = {ProblemWordsAddress(b, l, words), address(a.query),
                                       address(a.keys), address(a.values),
                                       a.mask ? address(*a.mask) : i64(0), address(a.out),
                                       i64(0)};
      // At most every key per query row (scores and values).
      const int64_t work = p.batch * p.heads * p.q_len * p.kv_len * (p.head_dim + p.value_dim);
      EmitBlockedCalls(b, l, callee, std::move(args),
                       AttentionBlocks(work, p.batch * p.kv_heads), work);
      op->erase();
    }
  }
};

}  // namespace

std::unique_ptr<mlir::Pass> CreateMaskedAttentionRewritePass() {
  return std::make_unique<MaskedAttentionRewritePass>();
}

void RegisterMaskedAttentionRewritePass() {
  static std::once_flag once;
  std::call_once(once, [] { mlir::PassRegistration<MaskedAttentionRewritePass>(); });
}

}  // namespace rbln::compiler
