// Scaled dot-product attention, composed from the other converters:
//   s = (q @ k^T) * scale, masked (causal and/or attn_mask),
//   p = softmax(s, -1), out = p @ v.
// Scores and softmax are f32 (half q and k are widened exactly, products
// accumulate in f32); for half inputs p is rounded to the input dtype before
// p @ v, which accumulates in f32 and rounds once -- as PyTorch's CPU flash
// attention kernel and CUDA's flash attention do for half types. So both
// products have half operands, which the GEMM library reads as stored (k
// not transposed or widened into a copy; transforms/library/
// narrow_operands.h). The steps are internal nodes named "<output>/<step>",
// so fusion sees ordinary ops.
//
// IR conventions:
//   scaled_dot_product_attention(q[..., L, E], k[..., S, E], v[..., S, Ev]
//       [, attn_mask])  -> out[..., L, Ev]
//     "is_causal" bool (top-left aligned: query i sees keys j <= i),
//     "scale" float (default 1/sqrt(E)); "dropout_p" must be 0.
//     attn_mask broadcasts to [..., L, S]: bool keeps true positions, a
//     float mask is added to the scores.
//     "enable_gqa" bool: k and v may have Hkv heads (dim -3) where q has
//     H = G * Hkv; query head h reads key/value head h / G, as PyTorch's
//     enable_gqa. The products then run per key/value head with the G
//     query heads' rows stacked (q viewed as [..., Hkv, G * L, E]), so the
//     keys and values are read once each, never repeated into a copy.
//   _scaled_dot_product_flash_attention_for_cpu(q[B,H,L,E], k, v
//       [, attn_mask]) -> (out[B,H,L,Ev], logsumexp[B,H,L] f32), the same
//     attributes.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "rbln/compiler/frontend/graph_importer.h"
#include "rbln/compiler/frontend/ops/masked_attention_ops.h"
#include "rbln/compiler/frontend/ops/op_families.h"
#include "rbln/compiler/ir/graph_util.h"

namespace rbln::compiler {
namespace {

namespace arith = ::mlir::arith;
using ::mlir::Location;
using ::mlir::OpBuilder;
using ::mlir::Value;
using ::mlir::ValueRange;

// Builds and converts the internal nodes of one attention node.
class Steps {
 public:
  Steps(GraphImporter& im, const ir::Node& node) : im_(im), node_(node) {}

  // Converts one step; returns the name of its (first) output.
  absl::StatusOr<std::string> Emit(const std::string& op,
                                   const std::vector<std::string>& inputs,
                                   const std::string& step, ir::DType dtype,
                                   const Shape& shape,
                                   std::vector<std::pair<std::string, ir::Attribute>> attrs = {}) {
    ir::Node n = Make(op, inputs, step, dtype, shape, std::move(attrs));
    if (absl::Status s = im_.EmitNode(n); !s.ok()) return s;
    return n.outputs(0).name();
  }

  // A product (matmul or matmul_transpose_b) of a [..., M, K] and b whose
  // batch dims equal a's, as one rank-3 batch GEMM: the batch dims are
  // collapsed here (free views), since a product of rank > 3 copies its
  // result out of the matmul converter's reshape (a pass over the scores).
  // Operands whose batches broadcast go to the converter as they are.
  absl::StatusOr<std::string> Product(const std::string& op, const std::string& a,
                                      const std::string& b, const std::string& step,
                                      ir::DType dtype, const Shape& out_shape) {
    const Shape as = ShapeOf(im_.TypeOf(a)), bs = ShapeOf(im_.TypeOf(b));
    const Shape batch(as.begin(), as.end() - 2);
    if (batch.size() < 2 || Shape(bs.begin(), bs.end() - 2) != batch) {
      return Emit(op, {a, b}, step, dtype, out_shape);
    }
    int64_t n = 1;
    for (int64_t d : batch) n *= d;
    auto flat = [&](const std::string& x, const Shape& shape,
                    const std::string& name) -> absl::StatusOr<std::string> {
      return Emit("view", {x}, name, im_.TypeOf(x).dtype(),
                  {n, shape[shape.size() - 2], shape.back()});
    };
    absl::StatusOr<std::string> fa = flat(a, as, step + "_a");
    if (!fa.ok()) return fa.status();
    absl::StatusOr<std::string> fb = flat(b, bs, step + "_b");
    if (!fb.ok()) return fb.status();
    absl::StatusOr<std::string> prod =
        Emit(op, {*fa, *fb}, step + "_flat", dtype,
             {n, out_shape[out_shape.size() - 2], out_shape.back()});
    if (!prod.ok()) return prod.status();
    return Emit("view", {*prod}, step, dtype, out_shape);
  }

  ir::Node Make(const std::string& op, const std::vector<std::string>& inputs,
                const std::string& step, ir::DType dtype, const Shape& shape,
                std::vector<std::pair<std::string, ir::Attribute>> attrs = {}) {
    ir::Node n;
    n.set_op(op);
    for (const std::string& in : inputs) n.add_inputs(in);
    ir::Value* v = n.add_outputs();
    v->set_name(absl::StrFormat("%s/%s", node_.outputs(0).name(), step));
    v->mutable_type()->set_dtype(dtype);
    for (int64_t d : shape) v->mutable_type()->add_shape(d);
    for (auto& [k, a] : attrs) (*n.mutable_attrs())[k] = a;
    return n;
  }

 private:
  GraphImporter& im_;
  const ir::Node& node_;
};

ir::Attribute Int(int64_t v) {
  ir::Attribute a;
  a.set_i(v);
  return a;
}
ir::Attribute Bool(bool v) {
  ir::Attribute a;
  a.set_b(v);
  return a;
}

// NumPy broadcast of two batch shapes.
absl::StatusOr<Shape> BroadcastBatch(const ir::Node& node, const Shape& a,
                                     const Shape& b) {
  Shape out(std::max(a.size(), b.size()));
  for (size_t i = 0; i < out.size(); ++i) {
    const int64_t x = i < out.size() - a.size() ? 1 : a[i - (out.size() - a.size())];
    const int64_t y = i < out.size() - b.size() ? 1 : b[i - (out.size() - b.size())];
    if (x != y && x != 1 && y != 1) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "op %s: batch dims [%s] and [%s] do not broadcast", node.op(),
          absl::StrJoin(a, ","), absl::StrJoin(b, ",")));
    }
    out[i] = x == 1 ? y : x;
  }
  return out;
}

absl::Status ConvertAttention(GraphImporter& im, const ir::Node& node) {
  const bool flash = node.op() == "_scaled_dot_product_flash_attention_for_cpu";
  const int num_outputs = flash ? 2 : 1;
  if (node.inputs_size() < 3 || node.inputs_size() > 4 ||
      node.outputs_size() != num_outputs) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s takes 3 or 4 inputs (query, key, value[, attn_mask]) and %d "
        "output(s), got %d and %d",
        node.op(), num_outputs, node.inputs_size(), node.outputs_size()));
  }
  if (FloatAttr(node, "dropout_p", 0.0) != 0.0) {
    return absl::UnimplementedError(absl::StrFormat(
        "The following operators are not implemented: ['%s' with dropout_p > "
        "0]",
        node.op()));
  }
  const ir::TensorType &qt = im.TypeOf(node.inputs(0)),
                       &kt = im.TypeOf(node.inputs(1)),
                       &vt = im.TypeOf(node.inputs(2));
  const ir::DType out_dtype = node.outputs(0).type().dtype();
  // p @ v's dtype: v's (read before steps add values, which may move the
  // types TypeOf refers to).
  const ir::DType pv_dtype = vt.dtype();
  for (const ir::TensorType* t : {&qt, &kt, &vt}) {
    if (!IsFloat(t->dtype()) || t->shape_size() < 2) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "op %s: query, key and value must be float tensors of rank >= 2, "
          "got %s, %s, %s",
          node.op(), ir::TypeToText(qt), ir::TypeToText(kt),
          ir::TypeToText(vt)));
    }
  }
  const Shape q = ShapeOf(qt), k = ShapeOf(kt), v = ShapeOf(vt);
  const int64_t L = q[q.size() - 2], E = q.back(), S = k[k.size() - 2],
                Ev = v.back();
  if (k.back() != E || v[v.size() - 2] != S) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: key %s must be [..., S, %d] and value %s [..., S, Ev]",
        node.op(), ir::TypeToText(kt), E, ir::TypeToText(vt)));
  }
  // Grouped-query attention: q [..., Hkv * G, L, E] runs as
  // [..., Hkv, G * L, E] against k and v's Hkv heads.
  const bool gqa = BoolAttr(node, "enable_gqa", false) && q.size() >= 3 &&
                   k.size() >= 3 && q[q.size() - 3] != k[k.size() - 3];
  int64_t group = 1;
  Shape q_rows = q;  // q as the products see it.
  if (gqa) {
    const int64_t heads = q[q.size() - 3], kv_heads = k[k.size() - 3];
    if (v.size() < 3 || v[v.size() - 3] != kv_heads || heads % kv_heads != 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "op %s with enable_gqa: query heads (%d) must be a multiple of key "
          "heads (%d), and value must have the key's heads, got %s",
          node.op(), heads, kv_heads, ir::TypeToText(vt)));
    }
    group = heads / kv_heads;
    q_rows.erase(q_rows.end() - 3, q_rows.end());
    for (int64_t d : {kv_heads, group * L, E}) q_rows.push_back(d);
  }
  absl::StatusOr<Shape> qk_batch =
      BroadcastBatch(node, Shape(q_rows.begin(), q_rows.end() - 2),
                     Shape(k.begin(), k.end() - 2));
  if (!qk_batch.ok()) return qk_batch.status();
  absl::StatusOr<Shape> batch =
      BroadcastBatch(node, *qk_batch, Shape(v.begin(), v.end() - 2));
  if (!batch.ok()) return batch.status();
  // The products' output: [..., Hkv, G * L, Ev] with gqa.
  Shape pv_shape = *batch;
  pv_shape.push_back(group * L);
  pv_shape.push_back(Ev);
  Shape expected = *batch;
  if (gqa) expected.back() *= group;  // Hkv -> H.
  expected.push_back(L);
  expected.push_back(Ev);
  if (ShapeOf(node.outputs(0).type()) != expected || !IsFloat(out_dtype)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s: output %%%s is %s, expected a float tensor of shape [%s]",
        node.op(), node.outputs(0).name(),
        ir::TypeToText(node.outputs(0).type()), absl::StrJoin(expected, ",")));
  }
  const double scale =
      FloatAttr(node, "scale", 1.0 / std::sqrt(static_cast<double>(E)));
  const bool causal = BoolAttr(node, "is_causal", false);
  // The kernel path (masked_attention_ops.h) where it applies; the flash
  // op's logsumexp (only training reads it) still comes from the steps
  // below, whose output chain is then dead.
  std::optional<Value> kernel_out;
  const MaskedAttentionOperands kernel_ops{
      node.inputs(0), node.inputs(1), node.inputs(2),
      node.inputs_size() == 4 ? node.inputs(3) : "", causal, scale, out_dtype};
  if (MaskedAttentionApplies(im, kernel_ops)) {
    absl::StatusOr<Value> out = EmitMaskedAttention(im, kernel_ops);
    if (!out.ok()) return out.status();
    if (!flash) {
      im.Define(node.outputs(0), *out);
      return absl::OkStatus();
    }
    kernel_out = *out;
  }
  Steps steps(im, node);

  std::string q_in = node.inputs(0);
  if (gqa) {
    absl::StatusOr<std::string> rows =
        steps.Emit("view", {q_in}, "q_rows", qt.dtype(), q_rows);
    if (!rows.ok()) return rows.status();
    q_in = *rows;
  }
  // f32 query and key (v enters p @ v in its own dtype).
  std::vector<std::string> f32_in;
  for (const std::string& in : {q_in, node.inputs(1)}) {
    const ir::TensorType& t = im.TypeOf(in);
    if (t.dtype() == ir::FLOAT32) {
      f32_in.push_back(in);
      continue;
    }
    absl::StatusOr<std::string> c =
        steps.Emit("_to_copy", {in}, absl::StrFormat("f32_%d", f32_in.size()),
                   ir::FLOAT32, ShapeOf(t));
    if (!c.ok()) return c.status();
    f32_in.push_back(*c);
  }
  Shape qk_shape = *qk_batch;
  qk_shape.push_back(group * L);
  qk_shape.push_back(S);
  absl::StatusOr<std::string> qk = steps.Product(
      "matmul_transpose_b", f32_in[0], f32_in[1], "qk", ir::FLOAT32, qk_shape);
  if (!qk.ok()) return qk.status();
  // The scores as [..., Hkv, G, L, S] with gqa, so the mask and the causal
  // test index (query position, key position) as without.
  Shape s_shape = *qk_batch;
  if (gqa) s_shape.push_back(group);
  s_shape.push_back(L);
  s_shape.push_back(S);
  if (gqa) {
    qk = steps.Emit("view", {*qk}, "qk_grouped", ir::FLOAT32, s_shape);
    if (!qk.ok()) return qk.status();
  }

  // Scale and mask in one element-wise generic over the scores.
  ir::Node masked = steps.Make("scaled_masked_scores", {*qk}, "scores",
                               ir::FLOAT32, s_shape);
  std::vector<ir::DType> operand_dtypes = {ir::FLOAT32};
  bool bool_mask = false;
  if (node.inputs_size() == 4) {
    const ir::TensorType& mt = im.TypeOf(node.inputs(3));
    bool_mask = mt.dtype() == ir::BOOL;
    if (!bool_mask && !IsFloat(mt.dtype())) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "op %s: attn_mask must be bool or float, got %s", node.op(),
          ir::TypeToText(mt)));
    }
    std::string mask = node.inputs(3);
    Shape m = ShapeOf(mt);
    if (gqa && m.size() >= 3) {
      // [..., H | 1, L', S'] -> [..., Hkv | 1, G | 1, L', S'].
      const size_t h = m.size() - 3;
      const int64_t kv_heads = k[k.size() - 3];
      Shape grouped(m.begin(), m.begin() + h);
      if (m[h] == 1) {
        grouped.push_back(1);
        grouped.push_back(1);
      } else if (m[h] == kv_heads * group) {
        grouped.push_back(kv_heads);
        grouped.push_back(group);
      } else {
        return absl::InvalidArgumentError(absl::StrFormat(
            "op %s: attn_mask %s does not broadcast to the query's %d heads",
            node.op(), ir::TypeToText(mt), kv_heads * group));
      }
      grouped.insert(grouped.end(), m.end() - 2, m.end());
      absl::StatusOr<std::string> g =
          steps.Emit("view", {mask}, "mask_grouped", mt.dtype(), grouped);
      if (!g.ok()) return g.status();
      mask = *g;
    }
    masked.add_inputs(mask);
    operand_dtypes.push_back(bool_mask ? ir::BOOL : ir::FLOAT32);
  }
  const int rank = s_shape.size();
  absl::StatusOr<Value> scores = im.Elementwise(
      masked, operand_dtypes, [&](OpBuilder& b, Location l, ValueRange x) {
        auto f32 = [&](double c) -> Value {
          return b.create<arith::ConstantOp>(l, b.getF32FloatAttr(c));
        };
        Value s = b.create<arith::MulFOp>(l, x[0], f32(scale));
        Value neg_inf = f32(-std::numeric_limits<float>::infinity());
        if (x.size() > 1) {
          if (bool_mask) {
            Value keep = b.create<arith::CmpIOp>(
                l, arith::CmpIPredicate::ne, x[1],
                b.create<arith::ConstantIntOp>(l, 0, 8));
            s = b.create<arith::SelectOp>(l, keep, s, neg_inf);
          } else {
            s = b.create<arith::AddFOp>(l, s, x[1]);
          }
        }
        if (causal) {
          Value i = b.create<mlir::linalg::IndexOp>(l, rank - 2);
          Value j = b.create<mlir::linalg::IndexOp>(l, rank - 1);
          Value future =
              b.create<arith::CmpIOp>(l, arith::CmpIPredicate::ugt, j, i);
          s = b.create<arith::SelectOp>(l, future, neg_inf, s);
        }
        return s;
      });
  if (!scores.ok()) return scores.status();
  im.Define(masked.outputs(0), *scores);

  absl::StatusOr<std::string> probs =
      steps.Emit("softmax", {masked.outputs(0).name()}, "probs", ir::FLOAT32,
                 s_shape, {{"dim", Int(-1)}});
  if (!probs.ok()) return probs.status();
  if (node.inputs_size() == 4) {
    // A query the mask hides every key from (a padding row) gets 0, as
    // PyTorch's kernels give (its safe softmax), not exp(-inf - -inf) = NaN,
    // which p @ v would spread to every row through 0 * NaN.
    Shape row = s_shape;
    row.back() = 1;
    absl::StatusOr<std::string> row_max =
        steps.Emit("amax", {masked.outputs(0).name()}, "row_max", ir::FLOAT32, row,
                   {{"dim", Int(-1)}, {"keepdim", Bool(true)}});
    if (!row_max.ok()) return row_max.status();
    ir::Node safe = steps.Make("safe_probs", {*probs, *row_max}, "safe_probs",
                               ir::FLOAT32, s_shape);
    absl::StatusOr<Value> zeroed = im.Elementwise(
        safe, {ir::FLOAT32, ir::FLOAT32}, [&](OpBuilder& b, Location l, ValueRange x) {
          Value neg_inf = b.create<arith::ConstantOp>(
              l, b.getF32FloatAttr(-std::numeric_limits<float>::infinity()));
          Value hidden = b.create<arith::CmpFOp>(l, arith::CmpFPredicate::OEQ, x[1], neg_inf);
          Value zero = b.create<arith::ConstantOp>(l, b.getF32FloatAttr(0.0f));
          return b.create<arith::SelectOp>(l, hidden, zero, x[0]).getResult();
        });
    if (!zeroed.ok()) return zeroed.status();
    im.Define(safe.outputs(0), *zeroed);
    probs = safe.outputs(0).name();
  }
  // p @ v: in v's dtype when it is a half type (p rounded to it; the
  // product accumulates in f32 and rounds once), else in f32.
  std::string p_operand = *probs;
  if (pv_dtype != ir::FLOAT32) {
    absl::StatusOr<std::string> rounded =
        steps.Emit("_to_copy", {*probs}, "probs_rounded", pv_dtype, s_shape);
    if (!rounded.ok()) return rounded.status();
    p_operand = *rounded;
  }
  if (gqa) {
    absl::StatusOr<std::string> rows =
        steps.Emit("view", {p_operand}, "probs_rows", pv_dtype, qk_shape);
    if (!rows.ok()) return rows.status();
    p_operand = *rows;
  }
  const bool convert = out_dtype != pv_dtype;
  absl::StatusOr<std::string> out = steps.Product(
      "matmul", p_operand, node.inputs(2),
      gqa ? "out_rows" : (convert ? "out_pv" : "out"), pv_dtype, pv_shape);
  if (!out.ok()) return out.status();
  if (gqa) {
    out = steps.Emit("view", {*out}, convert ? "out_pv" : "out", pv_dtype, expected);
    if (!out.ok()) return out.status();
  }
  if (convert) {
    out = steps.Emit("_to_copy", {*out}, "out", out_dtype, expected);
    if (!out.ok()) return out.status();
  }
  im.Define(node.outputs(0), im.ValueOf(*out));

  if (flash) {
    // logsumexp over keys: max + log(sum(exp(s - max))).
    Shape row = s_shape;
    row.back() = 1;
    // [..., H, L]; with gqa computed as [..., Hkv, G, L], the same order.
    Shape lse_shape(expected.begin(), expected.end() - 1);
    Shape s_rows(s_shape.begin(), s_shape.end() - 1);
    const std::string s_name = masked.outputs(0).name();
    absl::StatusOr<std::string> m =
        steps.Emit("amax", {s_name}, "row_max", ir::FLOAT32, row,
                   {{"dim", Int(-1)}, {"keepdim", Bool(true)}});
    if (!m.ok()) return m.status();
    absl::StatusOr<std::string> sh =
        steps.Emit("sub", {s_name, *m}, "shifted", ir::FLOAT32, s_shape);
    if (!sh.ok()) return sh.status();
    absl::StatusOr<std::string> e =
        steps.Emit("exp", {*sh}, "exp", ir::FLOAT32, s_shape);
    if (!e.ok()) return e.status();
    absl::StatusOr<std::string> z = steps.Emit(
        "sum", {*e}, "sum", ir::FLOAT32, s_rows, {{"dim", Int(-1)}});
    if (!z.ok()) return z.status();
    absl::StatusOr<std::string> logz =
        steps.Emit("log", {*z}, "log_sum", ir::FLOAT32, s_rows);
    if (!logz.ok()) return logz.status();
    if (gqa) {
      logz = steps.Emit("view", {*logz}, "log_sum_heads", ir::FLOAT32, lse_shape);
      if (!logz.ok()) return logz.status();
    }
    absl::StatusOr<std::string> m_flat =
        steps.Emit("view", {*m}, "row_max_flat", ir::FLOAT32, lse_shape);
    if (!m_flat.ok()) return m_flat.status();
    const ir::TensorType& lse_type = node.outputs(1).type();
    if (ShapeOf(lse_type) != lse_shape) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "op %s: logsumexp output %%%s is %s, expected [%s]", node.op(),
          node.outputs(1).name(), ir::TypeToText(lse_type),
          absl::StrJoin(lse_shape, ",")));
    }
    ir::Node add = steps.Make("add", {*m_flat, *logz}, "lse",
                              lse_type.dtype(), lse_shape);
    *add.mutable_outputs(0) = node.outputs(1);
    if (absl::Status s = im.EmitNode(add); !s.ok()) return s;
  }
  if (kernel_out) im.Define(node.outputs(0), *kernel_out);
  return absl::OkStatus();
}

}  // namespace

void RegisterAttentionOps(OpConverterTable& table) {
  table["scaled_dot_product_attention"] = &ConvertAttention;
  table["_scaled_dot_product_flash_attention_for_cpu"] = &ConvertAttention;
}

}  // namespace rbln::compiler
