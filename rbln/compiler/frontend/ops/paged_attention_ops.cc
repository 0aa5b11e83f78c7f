// Paged attention over a vLLM-style KV cache (issue 31; torch_rbln's
// rbln::paged_attention, what vllm_rbln/paged_attention.py calls on rbln).
//
//   paged_attention(query[T, Hq, D], cache[2, Hkv, S, D],
//                   block_table[B, NB] int32/int64, positions[T] int32/int64
//                   [, sinks[Hq] float])
//       -> out[T, Hq, D] (query's dtype)
//   attrs "block_size" (int, divides S), "scale" (float), "sliding_window"
//   (int, absent: none), "soft_cap" (float, absent: none).
// T = B * Q tokens, request b's Q queries in rows b*Q .. b*Q+Q-1; the query
// of position p attends to its request's keys [first, min(p + 1, NB *
// block_size)), first = max(0, p + 1 - sliding_window) with a window; key j
// is slot block_table[b, j / block_size] * block_size + j % block_size of
// the cache (keys cache[0], values cache[1]); query head h reads kv head
// h / (Hq / Hkv). A score is q.k * scale, soft-capped to cap * tanh(score
// / cap) with a cap. With sinks (gpt-oss), head h's softmax denominator also
// sums exp(sinks[h]): a key whose value is zero. A query with no key gives
// zeros. Half inputs compute in f32 (scores, softmax, sums), rounded once.
//
// The op is one linalg.generic over the output marked
// kPagedAttentionAttr (with block_size, scale, the window, the cap and
// whether it has sinks),
// whose body computes one output element with an online softmax over the
// element's keys, reading the other operands in place (tensor.extract of
// the values it captures). Before it, a generic checks every block id
// (SPEC P8: out of range is reported and clamped) into the table both read.
// That is the lowering when the rewrite cannot take the op: the paged
// attention rewrite (transforms/library/paged_attention_rewrite_pass.cc)
// replaces the generic after bufferization with rbln_paged_attention calls
// (kernels/paged_attention.h), which compute each key's score once per
// request x kv head rather than once per output element. In the full
// pipeline an op the rewrite cannot take is a compile error (the module
// counts the marked ops, kPagedAttentionCountAttr).
#include <cstdint>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"
#include "rbln/compiler/abi/kernel_abi.h"
#include "rbln/compiler/frontend/graph_importer.h"
#include "rbln/compiler/frontend/ops/nn_builders.h"
#include "rbln/compiler/frontend/ops/op_families.h"
#include "rbln/compiler/frontend/ops/reduction_util.h"
#include "rbln/compiler/ir/graph_util.h"

namespace rbln::compiler {
namespace {

namespace arith = ::mlir::arith;
using ::mlir::Location;
using ::mlir::OpBuilder;
using ::mlir::Value;
using ::mlir::ValueRange;
using ::mlir::utils::IteratorType;

struct Problem {
  ir::DType query_dtype, cache_dtype;
  Value query, cache, block_table, positions;
  Value sinks;  // [Hq] f32, or null
  int64_t tokens = 0, heads = 0, kv_heads = 0, dim = 0, slots = 0;
  int64_t batch = 0, table_width = 0, block_size = 0, window = 0;
  double scale = 1.0, soft_cap = 0.0;
};

Value Index(OpBuilder& b, Location l, int64_t v) {
  return b.create<arith::ConstantIndexOp>(l, v);
}

Value Max(OpBuilder& b, Location l, Value x, Value y) {
  return b.create<arith::SelectOp>(
      l, b.create<arith::CmpFOp>(l, arith::CmpFPredicate::OGT, x, y), x, y);
}

// An integer element of `t` at `indices` as an index value.
Value IndexAt(OpBuilder& b, Location l, Value t, ValueRange indices) {
  Value v = b.create<mlir::tensor::ExtractOp>(l, t, indices);
  return b.create<arith::IndexCastOp>(l, b.getIndexType(), v);
}

// Output element (t, h, e): the online softmax over its keys.
Value Element(GraphImporter& im, const Problem& p, OpBuilder& b, Location l) {
  Value t = nn::LoopIndex(b, l, 0), h = nn::LoopIndex(b, l, 1), e = nn::LoopIndex(b, l, 2);
  const int64_t q_len = p.tokens / p.batch, group = p.heads / p.kv_heads;
  Value request = b.create<arith::DivUIOp>(l, t, Index(b, l, q_len));
  Value kv = b.create<arith::DivUIOp>(l, h, Index(b, l, group));
  Value zero = Index(b, l, 0);
  Value position = IndexAt(b, l, p.positions, ValueRange{t});
  Value limit = b.create<arith::MinSIOp>(
      l, b.create<arith::MaxSIOp>(l, b.create<arith::AddIOp>(l, position, Index(b, l, 1)),
                                  zero),
      Index(b, l, p.table_width * p.block_size));
  Value first = p.window > 0 ? b.create<arith::MaxSIOp>(
                                   l, b.create<arith::SubIOp>(l, limit, Index(b, l, p.window)),
                                   zero)
                             : zero;
  Value f32_zero = nn::F32Const(b, l, 0.0);
  Value neg_inf = nn::F32Const(b, l, -std::numeric_limits<double>::infinity());
  Value scale = nn::F32Const(b, l, p.scale);
  Value block_size = Index(b, l, p.block_size);
  // A sink starts the online softmax as a key of value zero: max = sink,
  // sum = exp(sink - sink) = 1, nothing accumulated.
  Value init_max = p.sinks ? b.create<mlir::tensor::ExtractOp>(l, p.sinks, ValueRange{h})
                           : neg_inf;
  Value init_sum = p.sinks ? nn::F32Const(b, l, 1.0) : f32_zero;
  auto keys = b.create<mlir::scf::ForOp>(
      l, first, limit, Index(b, l, 1), ValueRange{init_max, init_sum, f32_zero},
      [&](OpBuilder& kb, Location kl, Value j, ValueRange it) {
        Value block = IndexAt(kb, kl, p.block_table,
                              ValueRange{request, kb.create<arith::DivUIOp>(kl, j, block_size)});
        Value slot = kb.create<arith::AddIOp>(
            kl, kb.create<arith::MulIOp>(kl, block, block_size),
            kb.create<arith::RemUIOp>(kl, j, block_size));
        auto cache_at = [&](OpBuilder& cb, int64_t kv_or_v, Value d) {
          Value v = cb.create<mlir::tensor::ExtractOp>(
              kl, p.cache, ValueRange{Index(cb, kl, kv_or_v), kv, slot, d});
          return im.ToCompute(cb, v, p.cache_dtype);
        };
        auto dot = kb.create<mlir::scf::ForOp>(
            kl, Index(kb, kl, 0), Index(kb, kl, p.dim), Index(kb, kl, 1), ValueRange{f32_zero},
            [&](OpBuilder& db, Location dl, Value d, ValueRange sum) {
              Value q = im.ToCompute(
                  db, db.create<mlir::tensor::ExtractOp>(dl, p.query, ValueRange{t, h, d}),
                  p.query_dtype);
              Value prod = db.create<arith::MulFOp>(dl, q, cache_at(db, 0, d));
              db.create<mlir::scf::YieldOp>(
                  dl, ValueRange{db.create<arith::AddFOp>(dl, sum[0], prod)});
            });
        Value score = kb.create<arith::MulFOp>(kl, dot.getResult(0), scale);
        if (p.soft_cap > 0.0) {
          Value cap = nn::F32Const(kb, kl, p.soft_cap);
          score = kb.create<arith::MulFOp>(
              kl, cap,
              kb.create<mlir::math::TanhOp>(kl, kb.create<arith::DivFOp>(kl, score, cap)));
        }
        Value max = Max(kb, kl, it[0], score);
        Value correction =
            kb.create<mlir::math::ExpOp>(kl, kb.create<arith::SubFOp>(kl, it[0], max));
        Value weight = kb.create<mlir::math::ExpOp>(kl, kb.create<arith::SubFOp>(kl, score, max));
        Value sum = kb.create<arith::AddFOp>(
            kl, kb.create<arith::MulFOp>(kl, it[1], correction), weight);
        Value acc = kb.create<arith::AddFOp>(
            kl, kb.create<arith::MulFOp>(kl, it[2], correction),
            kb.create<arith::MulFOp>(kl, weight, cache_at(kb, 1, e)));
        kb.create<mlir::scf::YieldOp>(kl, ValueRange{max, sum, acc});
      });
  Value sum = keys.getResult(1), acc = keys.getResult(2);
  Value some = b.create<arith::CmpFOp>(l, arith::CmpFPredicate::OGT, sum, f32_zero);
  Value out = b.create<arith::SelectOp>(l, some, b.create<arith::DivFOp>(l, acc, sum), f32_zero);
  return im.FromCompute(b, out, p.query_dtype);
}

absl::Status Invalid(const std::string& what) {
  return absl::InvalidArgumentError("op paged_attention: " + what);
}

absl::Status ConvertPagedAttention(GraphImporter& im, const ir::Node& node) {
  const bool has_sinks = node.inputs_size() == 5;
  if (absl::Status s = CheckArity(node, has_sinks ? 5 : 4, 1); !s.ok()) return s;
  const ir::TensorType& tq = im.TypeOf(node.inputs(0));
  const ir::TensorType& tc = im.TypeOf(node.inputs(1));
  const ir::TensorType& tt = im.TypeOf(node.inputs(2));
  const ir::TensorType& tp = im.TypeOf(node.inputs(3));
  auto is_float = [](ir::DType d) {
    return d == ir::FLOAT32 || d == ir::FLOAT16 || d == ir::BFLOAT16;
  };
  auto is_index = [](ir::DType d) { return d == ir::INT32 || d == ir::INT64; };
  if (!is_float(tq.dtype()) || !is_float(tc.dtype())) {
    return Invalid(absl::StrFormat(
        "query and cache must be float32, bfloat16 or float16, got %s and %s",
        ScalarTypeName(tq.dtype()), ScalarTypeName(tc.dtype())));
  }
  if (!is_index(tt.dtype()) || !is_index(tp.dtype())) {
    return Invalid("block_table and positions must be int32 or int64");
  }
  const Shape q = ShapeOf(tq), c = ShapeOf(tc), table = ShapeOf(tt), pos = ShapeOf(tp);
  if (q.size() != 3 || c.size() != 4 || table.size() != 2 || pos.size() != 1) {
    return Invalid(
        "expected query [T, Hq, D], cache [2, Hkv, S, D], block_table [B, NB] and "
        "positions [T]");
  }
  Problem p;
  p.query_dtype = tq.dtype();
  p.cache_dtype = tc.dtype();
  p.tokens = q[0], p.heads = q[1], p.dim = q[2];
  p.kv_heads = c[1], p.slots = c[2];
  p.batch = table[0], p.table_width = table[1];
  p.block_size = IntAttr(node, "block_size", 0);
  p.scale = FloatAttr(node, "scale", 1.0);
  p.window = HasAttr(node, "sliding_window") ? IntAttr(node, "sliding_window", 0) : 0;
  p.soft_cap = HasAttr(node, "soft_cap") ? FloatAttr(node, "soft_cap", 0.0) : 0.0;
  if (c[0] != 2 || c[3] != p.dim || pos[0] != p.tokens) {
    return Invalid(absl::StrFormat(
        "cache [2, Hkv, S, %d] and positions [%d] must match query [%d, %d, %d]", p.dim,
        p.tokens, p.tokens, p.heads, p.dim));
  }
  if (p.kv_heads <= 0 || p.heads % p.kv_heads != 0) {
    return Invalid(absl::StrFormat("%d query heads are not groups of %d kv heads", p.heads,
                                   p.kv_heads));
  }
  if (p.batch <= 0 || p.tokens % p.batch != 0) {
    return Invalid(absl::StrFormat("%d tokens are not %d requests' rows", p.tokens, p.batch));
  }
  if (p.block_size <= 0 || p.slots % p.block_size != 0) {
    return Invalid(absl::StrFormat("block_size %d does not divide the cache's %d slots",
                                   p.block_size, p.slots));
  }
  if (HasAttr(node, "sliding_window") && p.window <= 0) {
    return Invalid(absl::StrFormat("sliding_window must be positive, got %d", p.window));
  }
  if (HasAttr(node, "soft_cap") && !(p.soft_cap > 0.0)) {
    return Invalid(absl::StrFormat("soft_cap must be positive, got %g", p.soft_cap));
  }
  if (has_sinks) {
    const ir::TensorType& ts = im.TypeOf(node.inputs(4));
    if (!is_float(ts.dtype()) || ShapeOf(ts) != Shape{p.heads}) {
      return Invalid(absl::StrFormat(
          "sinks must be [%d] (one per query head) float32, bfloat16 or float16", p.heads));
    }
    // In f32 for both the lowering and the kernel (which reads f32 logits).
    const ir::DType sinks_dtype = ts.dtype();
    p.sinks = nn::Parallel(im, {im.ValueOf(node.inputs(4))}, {nn::IdentityMap(im, 1)},
                           {p.heads}, im.StorageType(ir::FLOAT32),
                           [&](OpBuilder& b, Location l, ValueRange args) -> Value {
                             return im.ToCompute(b, args[0], sinks_dtype);
                           });
  }
  if (absl::Status s = CheckOutputShape(node, 0, q); !s.ok()) return s;
  p.query = im.ValueOf(node.inputs(0));
  p.cache = im.ValueOf(node.inputs(1));
  // Every block id checked once (SPEC P8: an id outside the cache is
  // reported and clamped, as index_select of the table's blocks would
  // raise); the attention reads the checked table.
  mlir::Type id_type = im.StorageType(tt.dtype());
  p.block_table = nn::Parallel(
      im, {im.ValueOf(node.inputs(2))}, {nn::IdentityMap(im, 2)}, table, id_type,
      [&](OpBuilder& b, Location l, ValueRange args) -> Value {
        Value id = im.CheckedIndex(b, args[0], p.slots / p.block_size);
        return b.create<arith::IndexCastOp>(l, id_type, id);
      });
  p.positions = im.ValueOf(node.inputs(3));
  // Loops (t, h, e) and a reduction loop of one iteration: element-wise
  // fusion takes only all-parallel producers, so the op is never merged
  // into its consumer (vLLM copies the output into its own buffer), where
  // the rewrite could no longer find it.
  mlir::MLIRContext* ctx = im.context();
  auto out_map = mlir::AffineMap::get(
      4, 0,
      {mlir::getAffineDimExpr(0, ctx), mlir::getAffineDimExpr(1, ctx),
       mlir::getAffineDimExpr(2, ctx)},
      ctx);
  // An unread [T, Hq, D, 1] operand gives the reduction loop its extent.
  Value extent = nn::Empty(im, {q[0], q[1], q[2], 1}, im.StorageType(p.query_dtype));
  Value out = nn::Generic(im, {extent}, {nn::Empty(im, q, im.StorageType(p.query_dtype))},
                          {nn::IdentityMap(im, 4), out_map},
                          {IteratorType::parallel, IteratorType::parallel,
                           IteratorType::parallel, IteratorType::reduction},
                          [&](OpBuilder& b, Location l, ValueRange) {
                            return llvm::SmallVector<Value>{Element(im, p, b, l)};
                          })[0];
  OpBuilder& b = im.builder();
  out.getDefiningOp()->setAttr(
      kPagedAttentionAttr,
      b.getDictionaryAttr({
          b.getNamedAttr("block_size", b.getI64IntegerAttr(p.block_size)),
          b.getNamedAttr("scale", b.getF32FloatAttr(static_cast<float>(p.scale))),
          b.getNamedAttr("sliding_window", b.getI64IntegerAttr(p.window)),
          b.getNamedAttr("soft_cap", b.getF32FloatAttr(static_cast<float>(p.soft_cap))),
          b.getNamedAttr("sinks", b.getBoolAttr(has_sinks)),
      }));
  // Counted on the module: the rewrite fails the compile if a marked op
  // does not reach it.
  mlir::ModuleOp module = im.module();
  auto count = module->getAttrOfType<mlir::IntegerAttr>(kPagedAttentionCountAttr);
  module->setAttr(kPagedAttentionCountAttr,
                  b.getI64IntegerAttr((count ? count.getInt() : 0) + 1));
  im.Define(node.outputs(0), out);
  return absl::OkStatus();
}

}  // namespace

void RegisterPagedAttentionOps(OpConverterTable& table) {
  table["paged_attention"] = &ConvertPagedAttention;
}

}  // namespace rbln::compiler
