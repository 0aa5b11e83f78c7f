// PagedAttentionRewrite (SPEC P5, issue 31): after bufferization, replaces
// the linalg.generic the frontend emits for paged attention
// (frontend/ops/paged_attention_ops.cc: marked kPagedAttentionAttr, one
// output element per iteration, reading the query, cache, block table,
// positions and, with sinks, the sinks it captures) with calls of rbln_paged_attention
// (kernels/paged_attention.h), which read the cache in place over each
// request's real context. The calls are cut into blocks of work items
// (request x kv head) by the problem's shape (AttentionBlocks), which the
// partition pass spreads over the chiplet workers.
//
// A marked generic the call cannot take (buffers it cannot address:
// dynamic strides, a non-unit stride along head_size, a cache, table or
// positions not contiguous; operands it does not expect) fails the pass
// with an error on the op saying why, and so does a module whose
// kPagedAttentionCountAttr counts more marked ops than reach the pass (a
// pass before it merged one into another op, dropping the marker): their
// loops would compute the same values ~100x slower, silently (SPEC P8:
// no silent path that hides a failure).
#include <algorithm>
#include <cstdint>
#include <cstring>
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
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassRegistry.h"
#include "rbln/compiler/abi/gemm_problem.h"
#include "rbln/compiler/abi/kernel_abi.h"
#include "rbln/compiler/transforms/library/attention_buffers.h"
#include "rbln/compiler/transforms/library/gemm_lowering.h"
#include "rbln/compiler/transforms/library/library_calls.h"
#include "rbln/compiler/transforms/library/passes.h"

namespace rbln::compiler {
namespace {

using ::mlir::OpBuilder;
using ::mlir::Value;

// What one paged attention generic becomes.
struct PagedAttention {
  Buffer query, cache, block_table, positions, out;
  std::optional<Buffer> sinks;  // [Hq] f32 (gpt-oss), or none
  GemmOperandType query_type = GemmOperandType::kF32, cache_type = GemmOperandType::kF32;
  bool table_i64 = false, positions_i64 = false;
  int64_t tokens = 0, heads = 0, kv_heads = 0, dim = 0, slots = 0, batch = 0, width = 0;
  int64_t block_size = 0, window = 0;
  float scale = 1.0f, soft_cap = 0.0f;
};

// The call `op` becomes, or nullopt with `why` set.
std::optional<PagedAttention> PlanPagedAttention(mlir::linalg::GenericOp op, std::string& why) {
  auto fail = [&](const char* reason) -> std::optional<PagedAttention> {
    why = reason;
    return std::nullopt;
  };
  auto attrs = op->getAttrOfType<mlir::DictionaryAttr>(kPagedAttentionAttr);
  if (!attrs) return fail("its marker is not a dictionary");
  // Its one input only gives a loop its extent (frontend); nothing reads it.
  if (op.getNumDpsInputs() != 1 || op.getNumDpsInits() != 1 || op->getNumResults() != 0) {
    return fail("it is not one input and one output buffer (not bufferized, or merged with "
                "another op)");
  }
  auto block_size = attrs.getAs<mlir::IntegerAttr>("block_size");
  auto scale = attrs.getAs<mlir::FloatAttr>("scale");
  auto window = attrs.getAs<mlir::IntegerAttr>("sliding_window");
  auto soft_cap = attrs.getAs<mlir::FloatAttr>("soft_cap");
  auto has_sinks = attrs.getAs<mlir::BoolAttr>("sinks");
  if (!block_size || !scale || !window || !soft_cap || !has_sinks) {
    return fail("its marker lacks block_size, scale, sliding_window, soft_cap or sinks");
  }
  // The buffers the body reads, told apart by rank: query 3, cache 4,
  // block table 2, positions 1 (integers); the sinks are the rank 1 floats.
  Value by_rank[5] = {};  // [0] unused
  Value sinks;
  bool ambiguous = false;
  op.getRegion().walk([&](mlir::memref::LoadOp load) {
    Value m = load.getMemRef();
    if (op->isAncestor(m.getParentRegion()->getParentOp())) return;
    auto type = m.getType().cast<mlir::MemRefType>();
    const int64_t rank = type.getRank();
    if (rank < 1 || rank > 4) {
      ambiguous = true;
      return;
    }
    Value& slot =
        rank == 1 && type.getElementType().isa<mlir::FloatType>() ? sinks : by_rank[rank];
    if (slot && slot != m) {
      ambiguous = true;
      return;
    }
    slot = m;
  });
  if (ambiguous || !by_rank[1] || !by_rank[2] || !by_rank[3] || !by_rank[4] ||
      (sinks != nullptr) != has_sinks.getValue()) {
    return fail("its body does not read one query, cache, block table and positions buffer "
                "(and sinks when its marker says so)");
  }
  std::optional<Buffer> query = AsBuffer(by_rank[3], false);
  std::optional<Buffer> cache = AsBuffer(by_rank[4], true);
  std::optional<Buffer> table = AsBuffer(by_rank[2], true);
  std::optional<Buffer> positions = AsBuffer(by_rank[1], true);
  std::optional<Buffer> out = AsBuffer(op.getDpsInitOperand(0)->get(), false);
  if (!query || !cache || !table || !positions || !out) {
    return fail("a buffer has dynamic strides, a non-unit stride along head_size, or a "
                "cache, block table or positions that is not contiguous");
  }
  auto type = [](const Buffer& b) { return b.base.memref.getType().cast<mlir::MemRefType>(); };
  std::optional<GemmOperandType> query_type = LibraryOperandType(type(*query).getElementType());
  std::optional<GemmOperandType> cache_type = LibraryOperandType(type(*cache).getElementType());
  mlir::Type table_element = type(*table).getElementType();
  mlir::Type positions_element = type(*positions).getElementType();
  if (!query_type || !cache_type || type(*out).getElementType() != type(*query).getElementType() ||
      !(table_element.isInteger(32) || table_element.isInteger(64)) ||
      !(positions_element.isInteger(32) || positions_element.isInteger(64)) ||
      type(*out).getShape() != type(*query).getShape()) {
    return fail("its element types or output shape are not the call's");
  }
  PagedAttention p{*query, *cache, *table, *positions, *out};
  p.query_type = *query_type;
  p.cache_type = *cache_type;
  if (sinks) {
    p.sinks = AsBuffer(sinks, true);
    if (!p.sinks || !type(*p.sinks).getElementType().isF32() ||
        type(*p.sinks).getDimSize(0) != type(*query).getDimSize(1)) {
      return fail("its sinks are not a contiguous f32 buffer of one logit per query head");
    }
  }
  p.table_i64 = table_element.isInteger(64);
  p.positions_i64 = positions_element.isInteger(64);
  p.tokens = type(*query).getDimSize(0);
  p.heads = type(*query).getDimSize(1);
  p.dim = type(*query).getDimSize(2);
  p.kv_heads = type(*cache).getDimSize(1);
  p.slots = type(*cache).getDimSize(2);
  p.batch = type(*table).getDimSize(0);
  p.width = type(*table).getDimSize(1);
  p.block_size = block_size.getInt();
  p.window = window.getInt();
  p.scale = static_cast<float>(scale.getValueAsDouble());
  p.soft_cap = static_cast<float>(soft_cap.getValueAsDouble());
  if (p.tokens <= 0 || p.batch <= 0 || p.tokens % p.batch != 0 || p.kv_heads <= 0 ||
      p.heads % p.kv_heads != 0 || p.block_size <= 0 || p.slots % p.block_size != 0 ||
      type(*cache).getDimSize(3) != p.dim || type(*positions).getDimSize(0) != p.tokens) {
    return fail("its buffers' shapes do not match");
  }
  return p;
}

// Whether `op`'s body loads from a rank-4 buffer from outside it in a loop:
// paged attention's key loop reading the cache.
bool ReadsCacheInLoop(mlir::linalg::GenericOp op) {
  bool reads = false;
  op.getRegion().walk([&](mlir::memref::LoadOp load) {
    Value m = load.getMemRef();
    if (m.getType().cast<mlir::MemRefType>().getRank() == 4 &&
        !op->isAncestor(m.getParentRegion()->getParentOp()) &&
        load->getParentOfType<mlir::scf::ForOp>() &&
        op->isAncestor(load->getParentOfType<mlir::scf::ForOp>())) {
      reads = true;
    }
  });
  return reads;
}

class PagedAttentionRewritePass
    : public mlir::PassWrapper<PagedAttentionRewritePass, mlir::OperationPass<mlir::ModuleOp>> {
 public:
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(PagedAttentionRewritePass)

  llvm::StringRef getArgument() const final { return kPagedAttentionRewritePassName; }
  llvm::StringRef getDescription() const final {
    return "Rewrite the frontend's paged attention generics on memrefs to "
           "rbln_paged_attention calls";
  }
  void getDependentDialects(mlir::DialectRegistry& registry) const override {
    registry.insert<mlir::arith::ArithDialect, mlir::func::FuncDialect,
                    mlir::LLVM::LLVMDialect, mlir::memref::MemRefDialect,
                    mlir::scf::SCFDialect>();
  }

  void runOnOperation() override {
    mlir::ModuleOp module = getOperation();
    llvm::SmallVector<std::pair<mlir::linalg::GenericOp, PagedAttention>, 4> ops;
    int64_t marked = 0;
    bool failed = false;
    module.walk([&](mlir::Operation* op) {
      if (!op->hasAttr(kPagedAttentionAttr)) return;
      ++marked;
      auto generic = llvm::dyn_cast<mlir::linalg::GenericOp>(op);
      std::string why = "it is not a linalg.generic";
      if (std::optional<PagedAttention> p =
              generic ? PlanPagedAttention(generic, why) : std::nullopt) {
        ops.push_back({generic, *p});
        return;
      }
      op->emitError() << "paged attention cannot become " << kPagedAttentionSymbol
                      << " calls: " << why;
      failed = true;
    });
    // Fewer marked ops than the frontend marked: an unmarked generic that
    // still reads the cache in its key loop is one that lost its marker. (A
    // dead op canonicalize erased leaves no such generic: no error.)
    auto count = module->getAttrOfType<mlir::IntegerAttr>(kPagedAttentionCountAttr);
    module->removeAttr(kPagedAttentionCountAttr);
    if (count && count.getInt() > marked) {
      module.walk([&](mlir::linalg::GenericOp op) {
        if (op->hasAttr(kPagedAttentionAttr) || !ReadsCacheInLoop(op)) return;
        op.emitError() << "paged attention lost its " << kPagedAttentionAttr
                       << " marker before the rewrite to " << kPagedAttentionSymbol
                       << " calls (" << count.getInt() << " marked, " << marked
                       << " reached it; merged into another op by fusion?)";
        failed = true;
      });
    }
    if (failed) return signalPassFailure();
    if (ops.empty()) return;
    mlir::func::FuncOp callee = DeclareLibraryFunction(module, kPagedAttentionSymbol, 27);
    if (!callee) {
      module.emitError() << "symbol " << kPagedAttentionSymbol << " exists with another type";
      return signalPassFailure();
    }
    for (auto& [op, p] : ops) {
      OpBuilder b(op);
      mlir::Location l = op.getLoc();
      auto i64 = [&](int64_t v) -> Value {
        return b.create<mlir::arith::ConstantIntOp>(l, v, 64);
      };
      auto address = [&](const Buffer& buffer) -> Value {
        return b.create<mlir::arith::IndexCastOp>(l, b.getI64Type(),
                                                  BaseAddress(b, l, buffer.base));
      };
      uint32_t scale_bits, soft_cap_bits;
      std::memcpy(&scale_bits, &p.scale, 4);
      std::memcpy(&soft_cap_bits, &p.soft_cap, 4);
      llvm::SmallVector<Value> args = {
          i64(static_cast<int64_t>(p.query_type)), i64(static_cast<int64_t>(p.cache_type)),
          i64(p.table_i64), i64(p.positions_i64), i64(p.batch), i64(p.tokens / p.batch),
          i64(p.heads), i64(p.kv_heads), i64(p.dim), i64(p.slots), i64(p.width),
          i64(p.block_size), i64(p.window), i64(scale_bits), i64(soft_cap_bits),
          i64(p.query.strides[0]),
          i64(p.query.strides[1]), i64(p.out.strides[0]), i64(p.out.strides[1]),
          address(p.query), address(p.cache), address(p.block_table), address(p.positions),
          p.sinks ? address(*p.sinks) : i64(0), address(p.out)};
      // At most the table's whole width per query row (scores and values).
      const int64_t work = 2 * p.tokens * p.heads * p.width * p.block_size * p.dim;
      EmitBlockedCalls(b, l, callee, std::move(args),
                       AttentionBlocks(work, p.batch * p.kv_heads), work);
      op->erase();
    }
  }
};

}  // namespace

std::unique_ptr<mlir::Pass> CreatePagedAttentionRewritePass() {
  return std::make_unique<PagedAttentionRewritePass>();
}

void RegisterPagedAttentionRewritePass() {
  static std::once_flag once;
  std::call_once(once, [] { mlir::PassRegistration<PagedAttentionRewritePass>(); });
}

}  // namespace rbln::compiler
