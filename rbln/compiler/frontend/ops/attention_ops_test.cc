// scaled_dot_product_attention against a double-precision reference.
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "rbln/compiler/testing/op_test_util.h"

namespace rbln::compiler::testing {
namespace {

struct Reference {
  std::vector<double> out, lse;
  std::vector<double> out_abs;  // sum_j p_j |v_j|: the scale of p's rounding error
};

int64_t Offset(const Shape& shape, const Shape& batch_index) {
  // Index of the leading (batch) dims of `shape`, broadcasting size 1.
  const size_t nb = shape.size() - 2;
  int64_t flat = 0;
  for (size_t i = 0; i < nb; ++i) {
    const int64_t bi = batch_index[batch_index.size() - nb + i];
    flat = flat * shape[i] + (shape[i] == 1 ? 0 : bi);
  }
  return flat * shape[shape.size() - 2] * shape.back();
}

// mask: bool (keep) or float (added), shaped [L, S] or broadcastable
// [..., L, S] with every batch dim 1.
Reference Attention(const HostTensor& q, const HostTensor& k,
                    const HostTensor& v, const Shape& batch, bool causal,
                    double scale, const HostTensor* mask) {
  const int64_t L = q.shape[q.shape.size() - 2], E = q.shape.back(),
                S = k.shape[k.shape.size() - 2], Ev = v.shape.back();
  Reference r;
  for (int64_t bflat = 0; bflat < NumElements(batch); ++bflat) {
    Shape bi(batch.size());
    for (int64_t rem = bflat, d = batch.size() - 1; d >= 0; --d) {
      bi[d] = rem % batch[d];
      rem /= batch[d];
    }
    const int64_t qo = Offset(q.shape, bi), ko = Offset(k.shape, bi),
                  vo = Offset(v.shape, bi);
    for (int64_t i = 0; i < L; ++i) {
      std::vector<double> s(S);
      double mx = -INFINITY;
      for (int64_t j = 0; j < S; ++j) {
        double dot = 0;
        for (int64_t e = 0; e < E; ++e) {
          dot += q.values[qo + i * E + e] * k.values[ko + j * E + e];
        }
        s[j] = dot * scale;
        if (mask != nullptr) {
          const double m = mask->values[i * S + j];
          if (mask->dtype == ir::BOOL) {
            if (m == 0) s[j] = -INFINITY;
          } else {
            s[j] += m;
          }
        }
        if (causal && j > i) s[j] = -INFINITY;
        mx = std::max(mx, s[j]);
      }
      if (mx == -INFINITY) {  // Every key hidden: PyTorch gives 0.
        r.lse.push_back(-INFINITY);
        for (int64_t c = 0; c < Ev; ++c) {
          r.out.push_back(0);
          r.out_abs.push_back(0);
        }
        continue;
      }
      double z = 0;
      for (int64_t j = 0; j < S; ++j) z += std::exp(s[j] - mx);
      r.lse.push_back(mx + std::log(z));
      for (int64_t c = 0; c < Ev; ++c) {
        double acc = 0, abs = 0;
        for (int64_t j = 0; j < S; ++j) {
          const double p = std::exp(s[j] - mx) / z;
          acc += p * v.values[vo + j * Ev + c];
          abs += p * std::fabs(v.values[vo + j * Ev + c]);
        }
        r.out.push_back(acc);
        r.out_abs.push_back(abs);
      }
    }
  }
  return r;
}

std::vector<double> Tolerance(ir::DType dtype, const std::vector<double>& want) {
  std::vector<double> tol;
  for (double w : want) tol.push_back(2 * UnitRoundoff(dtype) * std::fabs(w) + 2e-5);
  return tol;
}

// The output's tolerance: rounded once, and for half inputs p rounded to
// their dtype before p @ v (as PyTorch's CPU and CUDA flash kernels do),
// which moves each term p_j v_j by at most u |p_j v_j|.
std::vector<double> OutTolerance(ir::DType dtype, const Reference& want) {
  std::vector<double> tol = Tolerance(dtype, want.out);
  if (dtype == ir::FLOAT32) return tol;
  for (size_t i = 0; i < tol.size(); ++i) tol[i] += UnitRoundoff(dtype) * want.out_abs[i];
  return tol;
}

TEST(AttentionOpsTest, ScaledDotProductAttentionMatchesTheReference) {
  struct Case {
    Shape q, k, v;
    bool causal;
    std::optional<double> scale;
    std::optional<ir::DType> mask_dtype;
    Shape mask_shape;
  };
  const std::vector<Case> cases = {
      {{2, 3, 4, 8}, {2, 3, 5, 8}, {2, 3, 5, 6}, false, {}, {}, {}},
      {{1, 2, 4, 8}, {1, 2, 4, 8}, {1, 2, 4, 8}, true, 0.5, {}, {}},
      {{2, 3, 4, 8}, {1, 3, 5, 8}, {1, 3, 5, 8}, false, {}, ir::BOOL, {4, 5}},
      {{3, 4, 8}, {3, 5, 8}, {3, 5, 8}, true, {}, ir::FLOAT32, {1, 4, 5}},
  };
  for (ir::DType dtype : {ir::FLOAT32, ir::FLOAT16, ir::BFLOAT16}) {
    for (const Case& c : cases) {
      HostTensor q = Random(dtype, c.q, 1, -2, 2), k = Random(dtype, c.k, 2, -2, 2),
                 v = Random(dtype, c.v, 3, -2, 2);
      std::vector<HostTensor> inputs = {q, k, v};
      std::optional<HostTensor> mask;
      if (c.mask_dtype) {
        mask = *c.mask_dtype == ir::BOOL
                   ? Random(ir::BOOL, c.mask_shape, 4, 0, 2)
                   : Random(*c.mask_dtype, c.mask_shape, 4, -1, 1);
        if (*c.mask_dtype == ir::BOOL) {
          // Every row keeps key 0, so no row is fully masked.
          for (int64_t i = 0; i < c.mask_shape[0]; ++i) {
            mask->values[i * c.mask_shape.back()] = 1;
          }
        }
        inputs.push_back(*mask);
      }
      Shape batch(c.q.begin(), c.q.end() - 2);
      Shape out_shape = batch;
      out_shape.push_back(c.q[c.q.size() - 2]);
      out_shape.push_back(c.v.back());
      Attrs attrs = {{"is_causal", BoolA(c.causal)}};
      if (c.scale) attrs["scale"] = FloatA(*c.scale);
      std::vector<ir::TensorType> types;
      for (const HostTensor& t : inputs) types.push_back(t.type());
      ir::Graph g = OneOpGraph("scaled_dot_product_attention", types,
                               {Type(dtype, out_shape)}, attrs);
      absl::StatusOr<std::vector<HostTensor>> out = CompileAndRun(g, inputs);
      ASSERT_TRUE(out.ok()) << out.status() << "\n" << ir::ToText(g);
      const double scale = c.scale.value_or(1.0 / std::sqrt(c.q.back()));
      Reference want = Attention(q, k, v, batch, c.causal, scale,
                                 mask ? &*mask : nullptr);
      ExpectClose((*out)[0], want.out, OutTolerance(dtype, want), ir::ToText(g));
    }
  }
}

// A query whose mask hides every key (a padding row) gets 0, as PyTorch's
// kernels give; the other rows are unaffected (no NaN through p @ v).
TEST(AttentionOpsTest, AFullyMaskedRowGivesZeros) {
  for (ir::DType dtype : {ir::FLOAT32, ir::BFLOAT16}) {
    HostTensor q = Random(dtype, {1, 2, 3, 8}, 8), k = Random(dtype, {1, 2, 5, 8}, 9),
               v = Random(dtype, {1, 2, 5, 8}, 10);
    HostTensor mask = Random(ir::BOOL, {3, 5}, 11, 0, 2);
    for (int64_t j = 0; j < 5; ++j) {
      mask.values[j] = 1;           // row 0 sees every key
      mask.values[5 + j] = 0;       // row 1 sees none
      mask.values[10 + j] = j % 2;  // row 2 every other one
    }
    ir::Graph g = OneOpGraph("scaled_dot_product_attention",
                             {q.type(), k.type(), v.type(), mask.type()},
                             {Type(dtype, {1, 2, 3, 8})}, {{"is_causal", BoolA(false)}});
    absl::StatusOr<std::vector<HostTensor>> out = CompileAndRun(g, {q, k, v, mask});
    ASSERT_TRUE(out.ok()) << out.status();
    Reference want = Attention(q, k, v, {1, 2}, false, 1.0 / std::sqrt(8.0), &mask);
    ExpectClose((*out)[0], want.out, OutTolerance(dtype, want), ir::ToText(g));
  }
}

// A float mask constant along the keys ([L, 1]: one bias per query row)
// broadcasts like any other; the kernel path reads mask rows over the keys,
// so this one takes the composed lowering, with the same values.
TEST(AttentionOpsTest, AMaskConstantAlongTheKeysBroadcasts) {
  HostTensor q = Random(ir::FLOAT32, {1, 2, 4, 8}, 12), k = Random(ir::FLOAT32, {1, 2, 5, 8}, 13),
             v = Random(ir::FLOAT32, {1, 2, 5, 8}, 14);
  HostTensor mask = Random(ir::FLOAT32, {4, 1}, 15, -1, 1);
  ir::Graph g = OneOpGraph("scaled_dot_product_attention",
                           {q.type(), k.type(), v.type(), mask.type()},
                           {Type(ir::FLOAT32, {1, 2, 4, 8})}, {{"is_causal", BoolA(false)}});
  absl::StatusOr<std::vector<HostTensor>> out = CompileAndRun(g, {q, k, v, mask});
  ASSERT_TRUE(out.ok()) << out.status();
  HostTensor full{ir::FLOAT32, {4, 5}, {}};
  for (int64_t i = 0; i < 4; ++i) full.values.insert(full.values.end(), 5, mask.values[i]);
  Reference want = Attention(q, k, v, {1, 2}, false, 1.0 / std::sqrt(8.0), &full);
  ExpectClose((*out)[0], want.out, OutTolerance(ir::FLOAT32, want), ir::ToText(g));
}

TEST(AttentionOpsTest, FlashAttentionForCpuReturnsLogSumExp) {
  for (ir::DType dtype : {ir::FLOAT32, ir::FLOAT16}) {
    HostTensor q = Random(dtype, {1, 2, 3, 4}, 5), k = Random(dtype, {1, 2, 6, 4}, 6),
               v = Random(dtype, {1, 2, 6, 4}, 7);
    ir::Graph g = OneOpGraph("_scaled_dot_product_flash_attention_for_cpu",
                             {q.type(), k.type(), v.type()},
                             {Type(dtype, {1, 2, 3, 4}), Type(ir::FLOAT32, {1, 2, 3})},
                             {{"is_causal", BoolA(true)}});
    absl::StatusOr<std::vector<HostTensor>> out = CompileAndRun(g, {q, k, v});
    ASSERT_TRUE(out.ok()) << out.status();
    Reference want = Attention(q, k, v, {1, 2}, true, 0.5, nullptr);
    ExpectClose((*out)[0], want.out, OutTolerance(dtype, want), "out");
    ExpectClose((*out)[1], want.lse, Tolerance(ir::FLOAT32, want.lse), "lse");
  }
}

// k or v [..., Hkv, S, E] with each head repeated `group` times in place
// ([..., Hkv * G, S, E], head h = kv head h / G): transformers' repeat_kv.
HostTensor RepeatHeads(const HostTensor& t, int64_t group) {
  const size_t r = t.shape.size();
  const int64_t heads = t.shape[r - 3],
                block = t.shape[r - 2] * t.shape[r - 1],
                outer = NumElements(t.shape) / (heads * block);
  HostTensor out{t.dtype, t.shape, {}};
  out.shape[r - 3] *= group;
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t g = 0; g < group; ++g) {
        const auto first = t.values.begin() + (o * heads + h) * block;
        out.values.insert(out.values.end(), first, first + block);
      }
    }
  }
  return out;
}

// spec: H4. Grouped-query attention (enable_gqa, as the compiled graphs'
// attention gets it from repeat_kv): k and v keep their Hkv heads and give
// what attention over the repeated heads gives -- decode (L = 1) and
// prefill rows, a float mask shared by the heads or per head, causal, and
// the flash op's logsumexp per query head.
TEST(AttentionOpsTest, GroupedQueryAttentionMatchesRepeatedHeads) {
  struct Case {
    std::string op;
    Shape q, kv;
    bool causal;
    Shape mask_shape;  // empty: no mask
  };
  const std::vector<Case> cases = {
      {"scaled_dot_product_attention", {2, 4, 1, 8}, {2, 2, 6, 8}, false, {2, 1, 1, 6}},
      {"scaled_dot_product_attention", {2, 4, 3, 8}, {2, 2, 6, 8}, true, {}},
      {"scaled_dot_product_attention", {1, 6, 3, 8}, {1, 2, 5, 8}, false, {1, 6, 3, 5}},
      {"_scaled_dot_product_flash_attention_for_cpu", {2, 4, 3, 8}, {2, 1, 5, 8}, false,
       {1, 1, 3, 5}},
  };
  for (ir::DType dtype : {ir::FLOAT32, ir::BFLOAT16}) {
    for (const Case& c : cases) {
      const int64_t group = c.q[1] / c.kv[1];
      HostTensor q = Random(dtype, c.q, 1), k = Random(dtype, c.kv, 2),
                 v = Random(dtype, c.kv, 3);
      std::vector<HostTensor> inputs = {q, k, v};
      if (!c.mask_shape.empty()) inputs.push_back(Random(ir::FLOAT32, c.mask_shape, 4, -1, 1));
      const bool flash = c.op != "scaled_dot_product_attention";
      std::vector<ir::TensorType> types, outs = {Type(dtype, c.q)};
      for (const HostTensor& t : inputs) types.push_back(t.type());
      if (flash) outs.push_back(Type(ir::FLOAT32, {c.q[0], c.q[1], c.q[2]}));
      ir::Graph g = OneOpGraph(c.op, types, outs,
                               {{"is_causal", BoolA(c.causal)}, {"enable_gqa", BoolA(true)}});
      absl::StatusOr<std::vector<HostTensor>> out = CompileAndRun(g, inputs);
      ASSERT_TRUE(out.ok()) << out.status() << "\n" << ir::ToText(g);
      // The reference: per (batch, head) with the heads repeated, and the
      // mask broadcast to every head.
      const HostTensor k_full = RepeatHeads(k, group), v_full = RepeatHeads(v, group);
      Reference want;
      for (int64_t b = 0; b < c.q[0]; ++b) {
        for (int64_t h = 0; h < c.q[1]; ++h) {
          auto head = [&](const HostTensor& t) {
            const int64_t block = t.shape[2] * t.shape[3];
            const auto first = t.values.begin() + (b * t.shape[1] + h) * block;
            return HostTensor{t.dtype, {t.shape[2], t.shape[3]}, {first, first + block}};
          };
          std::optional<HostTensor> m;
          if (!c.mask_shape.empty()) {
            const HostTensor& mt = inputs[3];
            const int64_t block = c.q[2] * c.kv[2];
            const int64_t mb = mt.shape[0] == 1 ? 0 : b, mh = mt.shape[1] == 1 ? 0 : h;
            const int64_t rows = mt.shape[2];  // 1 or L
            std::vector<double> vals;
            for (int64_t i = 0; i < c.q[2]; ++i) {
              const auto first = mt.values.begin() +
                                 ((mb * mt.shape[1] + mh) * rows + (rows == 1 ? 0 : i)) * c.kv[2];
              vals.insert(vals.end(), first, first + c.kv[2]);
            }
            m = HostTensor{ir::FLOAT32, {c.q[2], c.kv[2]}, vals};
            ASSERT_EQ(static_cast<int64_t>(vals.size()), block);
          }
          Reference r = Attention(head(q), head(k_full), head(v_full), {1}, c.causal,
                                  1.0 / std::sqrt(8.0), m ? &*m : nullptr);
          for (auto [to, from] : {std::pair{&want.out, &r.out}, {&want.out_abs, &r.out_abs},
                                  {&want.lse, &r.lse}}) {
            to->insert(to->end(), from->begin(), from->end());
          }
        }
      }
      ExpectClose((*out)[0], want.out, OutTolerance(dtype, want), ir::ToText(g));
      if (flash) ExpectClose((*out)[1], want.lse, Tolerance(ir::FLOAT32, want.lse), "lse");
    }
  }
  // Without enable_gqa unequal heads are an error that names the shapes.
  HostTensor q = Random(ir::FLOAT32, {1, 4, 2, 8}, 1), kv = Random(ir::FLOAT32, {1, 2, 3, 8}, 2);
  absl::StatusOr<std::vector<HostTensor>> out = CompileAndRun(
      OneOpGraph("scaled_dot_product_attention", {q.type(), kv.type(), kv.type()},
                 {q.type()}, {}),
      {q, kv, kv});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("do not broadcast"), std::string::npos) << out.status();
}

TEST(AttentionOpsTest, DropoutIsNotImplemented) {
  ir::TensorType t = Type(ir::FLOAT32, {1, 2, 4});
  absl::StatusOr<std::vector<HostTensor>> out = CompileAndRun(
      OneOpGraph("scaled_dot_product_attention", {t, t, t}, {t},
                 {{"dropout_p", FloatA(0.1)}}),
      {Random(ir::FLOAT32, {1, 2, 4}, 0), Random(ir::FLOAT32, {1, 2, 4}, 1),
       Random(ir::FLOAT32, {1, 2, 4}, 2)});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace rbln::compiler::testing
