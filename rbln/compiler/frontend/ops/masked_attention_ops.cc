#include "rbln/compiler/frontend/ops/masked_attention_ops.h"

#include <cstdint>
#include <limits>

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"
#include "rbln/compiler/abi/kernel_abi.h"
#include "rbln/compiler/frontend/ops/nn_builders.h"
#include "rbln/compiler/ir/graph_util.h"

namespace rbln::compiler {
namespace {

namespace arith = ::mlir::arith;
using ::mlir::Location;
using ::mlir::OpBuilder;
using ::mlir::Value;
using ::mlir::ValueRange;
using ::mlir::utils::IteratorType;

// Attention without a mask or causality takes the kernel for decode-sized
// problems (a kv head's query rows, group x L, up to this many) ...
constexpr int64_t kMaxUnmaskedRowsPerItem = 32;
// ... and from this many keys on: below, the composition's GEMMs are
// faster (its score matrices fit the caches); from here the kernel, which
// never writes them (bf16, 64-dim heads, one Zen 4 core pair: 12 heads x
// 448 / 512 / 1024 rows and keys 6.1 vs 6.3, 10.1 vs 8.1, 65.2 vs 31.3
// ms; 32 heads x 384 / 512: 11.6 vs 12.5, 26.6 vs 21.5 ms).
constexpr int64_t kMinUnmaskedKeysForKernel = 512;

bool KernelFloat(ir::DType d) {
  return d == ir::FLOAT32 || d == ir::BFLOAT16 || d == ir::FLOAT16;
}

// Output element (b, h, i, e): the online softmax over all keys j, a key
// with score -inf (masked, or causally hidden) weighing exactly 0.
Value Element(GraphImporter& im, const MaskedAttentionOperands& ops, OpBuilder& b, Location l) {
  const Shape q = ShapeOf(im.TypeOf(ops.query)), k = ShapeOf(im.TypeOf(ops.key));
  const ir::DType q_dtype = im.TypeOf(ops.query).dtype(), kv_dtype = im.TypeOf(ops.key).dtype();
  const int64_t group = q[1] / k[1], kv_len = k[2], dim = q[3];
  Value query = im.ValueOf(ops.query), key = im.ValueOf(ops.key), value = im.ValueOf(ops.value);
  Value bi = nn::LoopIndex(b, l, 0), h = nn::LoopIndex(b, l, 1), i = nn::LoopIndex(b, l, 2),
        e = nn::LoopIndex(b, l, 3);
  Value kv = b.create<arith::DivUIOp>(l, h, nn::IndexConst(b, l, group));
  Value f32_zero = nn::F32Const(b, l, 0.0), f32_one = nn::F32Const(b, l, 1.0);
  Value neg_inf = nn::F32Const(b, l, -std::numeric_limits<double>::infinity());
  Value scale = nn::F32Const(b, l, ops.scale);
  auto keys = b.create<mlir::scf::ForOp>(
      l, nn::IndexConst(b, l, 0), nn::IndexConst(b, l, kv_len), nn::IndexConst(b, l, 1),
      ValueRange{neg_inf, f32_zero, f32_zero},
      [&](OpBuilder& kb, Location kl, Value j, ValueRange it) {
        auto dot = kb.create<mlir::scf::ForOp>(
            kl, nn::IndexConst(kb, kl, 0), nn::IndexConst(kb, kl, dim), nn::IndexConst(kb, kl, 1),
            ValueRange{f32_zero},
            [&](OpBuilder& db, Location dl, Value d, ValueRange sum) {
              Value qd = im.ToCompute(
                  db, db.create<mlir::tensor::ExtractOp>(dl, query, ValueRange{bi, h, i, d}),
                  q_dtype);
              Value kd = im.ToCompute(
                  db, db.create<mlir::tensor::ExtractOp>(dl, key, ValueRange{bi, kv, j, d}),
                  kv_dtype);
              db.create<mlir::scf::YieldOp>(
                  dl, ValueRange{db.create<arith::AddFOp>(
                          dl, sum[0], db.create<arith::MulFOp>(dl, qd, kd))});
            });
        Value score = kb.create<arith::MulFOp>(kl, dot.getResult(0), scale);
        if (!ops.mask.empty()) {
          const ir::TensorType& mt = im.TypeOf(ops.mask);
          const Shape m = ShapeOf(mt);
          const Value full[4] = {bi, h, i, j};
          llvm::SmallVector<Value> at;
          for (size_t t = 0; t < m.size(); ++t) {
            at.push_back(m[t] == 1 ? nn::IndexConst(kb, kl, 0) : full[4 - m.size() + t]);
          }
          Value x = kb.create<mlir::tensor::ExtractOp>(kl, im.ValueOf(ops.mask), at);
          if (mt.dtype() == ir::BOOL) {
            Value keep = kb.create<arith::CmpIOp>(kl, arith::CmpIPredicate::ne, x,
                                                  kb.create<arith::ConstantIntOp>(kl, 0, 8));
            score = kb.create<arith::SelectOp>(kl, keep, score, neg_inf);
          } else {
            score = kb.create<arith::AddFOp>(kl, score, im.ToCompute(kb, x, mt.dtype()));
          }
        }
        if (ops.causal) {
          Value future = kb.create<arith::CmpIOp>(kl, arith::CmpIPredicate::ugt, j, i);
          score = kb.create<arith::SelectOp>(kl, future, neg_inf, score);
        }
        Value vd = im.ToCompute(
            kb, kb.create<mlir::tensor::ExtractOp>(kl, value, ValueRange{bi, kv, j, e}),
            kv_dtype);
        // While every key so far is hidden (max -inf), nothing accumulates;
        // a NaN score becomes the max (UGT), so the row turns NaN.
        Value max = kb.create<arith::SelectOp>(
            kl, kb.create<arith::CmpFOp>(kl, arith::CmpFPredicate::UGT, score, it[0]), score,
            it[0]);
        Value none = kb.create<arith::CmpFOp>(kl, arith::CmpFPredicate::OEQ, max, neg_inf);
        Value correction = kb.create<arith::SelectOp>(
            kl, none, f32_one,
            kb.create<mlir::math::ExpOp>(kl, kb.create<arith::SubFOp>(kl, it[0], max)));
        Value weight = kb.create<arith::SelectOp>(
            kl, none, f32_zero,
            kb.create<mlir::math::ExpOp>(kl, kb.create<arith::SubFOp>(kl, score, max)));
        Value sum = kb.create<arith::AddFOp>(
            kl, kb.create<arith::MulFOp>(kl, it[1], correction), weight);
        // The weight meets the value rounded to the values' type, the sum
        // keeping it f32, as the kernel does (there relative to a 512-key
        // block's running max, here to the running max at this key: the
        // roundings differ in the last bit).
        Value rounded = kv_dtype == ir::FLOAT32
                            ? weight
                            : im.ToCompute(kb, im.FromCompute(kb, weight, kv_dtype), kv_dtype);
        Value acc = kb.create<arith::AddFOp>(kl, kb.create<arith::MulFOp>(kl, it[2], correction),
                                             kb.create<arith::MulFOp>(kl, rounded, vd));
        kb.create<mlir::scf::YieldOp>(kl, ValueRange{max, sum, acc});
      });
  keys->setAttr(kMaskedAttentionKeysAttr, b.getUnitAttr());
  Value sum = keys.getResult(1), acc = keys.getResult(2);
  // No visible key: 0 (PyTorch's safe softmax); a NaN sum (a NaN or +inf
  // score) stays NaN, as PyTorch's softmax gives.
  Value none = b.create<arith::CmpFOp>(l, arith::CmpFPredicate::OEQ, sum, f32_zero);
  Value out = b.create<arith::SelectOp>(l, none, f32_zero, b.create<arith::DivFOp>(l, acc, sum));
  return im.FromCompute(b, out, ops.out_dtype);
}

}  // namespace

bool MaskedAttentionApplies(GraphImporter& im, const MaskedAttentionOperands& ops) {
  const ir::TensorType &qt = im.TypeOf(ops.query), &kt = im.TypeOf(ops.key),
                       &vt = im.TypeOf(ops.value);
  const Shape q = ShapeOf(qt), k = ShapeOf(kt), v = ShapeOf(vt);
  if (q.size() != 4 || k.size() != 4 || v.size() != 4 || !KernelFloat(qt.dtype()) ||
      !KernelFloat(kt.dtype()) || vt.dtype() != kt.dtype() || !KernelFloat(ops.out_dtype)) {
    return false;
  }
  if (k[0] != q[0] || v[0] != q[0] || v[1] != k[1] || v[2] != k[2] || k[3] != q[3] ||
      k[1] <= 0 || q[1] % k[1] != 0 || k[2] <= 0 || q[3] <= 0 || v[3] <= 0) {
    return false;
  }
  if (ops.mask.empty()) {
    // Without a mask nothing can be skipped: many query rows against a
    // few hundred keys (an encoder's attention) run faster as the
    // composition's GEMMs.
    return ops.causal || (q[1] / k[1]) * q[2] <= kMaxUnmaskedRowsPerItem ||
           k[2] >= kMinUnmaskedKeysForKernel;
  }
  const ir::TensorType& mt = im.TypeOf(ops.mask);
  const Shape m = ShapeOf(mt);
  // A mask constant along the keys (last dim 1, or a scalar) stays with the
  // composition: the kernel reads a mask row per query.
  if (m.empty() || m.size() > 4 || m.back() != k[2] ||
      !(mt.dtype() == ir::BOOL || KernelFloat(mt.dtype()))) {
    return false;
  }
  const int64_t full[4] = {q[0], q[1], q[2], k[2]};
  for (size_t t = 0; t < m.size(); ++t) {
    if (m[t] != 1 && m[t] != full[4 - m.size() + t]) return false;
  }
  return true;
}

absl::StatusOr<Value> EmitMaskedAttention(GraphImporter& im, const MaskedAttentionOperands& ops) {
  const Shape q = ShapeOf(im.TypeOf(ops.query)), v = ShapeOf(im.TypeOf(ops.value));
  const Shape out_shape = {q[0], q[1], q[2], v[3]};
  mlir::Type out_type = im.StorageType(ops.out_dtype);
  // Loops (b, h, i, e) and a reduction loop of one iteration: element-wise
  // fusion takes only all-parallel producers, so the op is never merged
  // into a consumer, where the rewrite could no longer find it.
  mlir::MLIRContext* ctx = im.context();
  auto out_map = mlir::AffineMap::get(
      5, 0,
      {mlir::getAffineDimExpr(0, ctx), mlir::getAffineDimExpr(1, ctx),
       mlir::getAffineDimExpr(2, ctx), mlir::getAffineDimExpr(3, ctx)},
      ctx);
  Value extent = nn::Empty(im, {q[0], q[1], q[2], v[3], 1}, out_type);
  Value out = nn::Generic(im, {extent}, {nn::Empty(im, out_shape, out_type)},
                          {nn::IdentityMap(im, 5), out_map},
                          {IteratorType::parallel, IteratorType::parallel,
                           IteratorType::parallel, IteratorType::parallel,
                           IteratorType::reduction},
                          [&](OpBuilder& b, Location l, ValueRange) {
                            return llvm::SmallVector<Value>{Element(im, ops, b, l)};
                          })[0];
  OpBuilder& b = im.builder();
  out.getDefiningOp()->setAttr(
      kMaskedAttentionAttr,
      b.getDictionaryAttr({
          b.getNamedAttr("scale", b.getF32FloatAttr(static_cast<float>(ops.scale))),
          b.getNamedAttr("causal", b.getBoolAttr(ops.causal)),
          b.getNamedAttr("mask", b.getBoolAttr(!ops.mask.empty())),
      }));
  return out;
}

}  // namespace rbln::compiler
