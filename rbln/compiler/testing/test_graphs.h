// Small graphs and reference helpers shared by the compiler's tests.
#ifndef RBLN_COMPILER_TESTING_TEST_GRAPHS_H_
#define RBLN_COMPILER_TESTING_TEST_GRAPHS_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "rbln/compiler/ir/graph.pb.h"

namespace rbln::compiler::testing {

inline ir::TensorType Type(ir::DType dtype, std::vector<int64_t> shape) {
  ir::TensorType t;
  t.set_dtype(dtype);
  for (int64_t d : shape) t.add_shape(d);
  return t;
}

inline void AddInput(ir::Graph& g, const std::string& name,
                     const ir::TensorType& t) {
  ir::Value* v = g.add_inputs();
  v->set_name(name);
  *v->mutable_type() = t;
}

inline void AddNode(ir::Graph& g, const std::string& op,
                    std::initializer_list<std::string> inputs,
                    const std::string& out, const ir::TensorType& t,
                    double alpha = 1.0) {
  ir::Node* n = g.add_nodes();
  n->set_op(op);
  for (const std::string& in : inputs) n->add_inputs(in);
  ir::Value* v = n->add_outputs();
  v->set_name(out);
  *v->mutable_type() = t;
  // As the producers write a Python scalar: an integral alpha is an int
  // (valid on every dtype), a fractional one a float.
  if (alpha != 1.0) {
    ir::Attribute& a = (*n->mutable_attrs())["alpha"];
    if (alpha == std::trunc(alpha)) {
      a.set_i(static_cast<int64_t>(alpha));
    } else {
      a.set_f(alpha);
    }
  }
}

// The shapes of one paged attention node (frontend/ops/paged_attention_ops.cc).
struct PagedAttentionShape {
  ir::DType dtype = ir::FLOAT32;        // query, cache and output
  ir::DType index_dtype = ir::INT64;    // block table and positions
  int64_t batch = 3, q_len = 1, heads = 4, kv_heads = 2, dim = 64;
  int64_t block_size = 16, num_blocks = 12, table_width = 4;
  int64_t sliding_window = 0;           // 0: no attribute
  double soft_cap = 0.0;                // 0: no attribute (negative: invalid)
  int64_t sinks = 0;                    // > 0: a sinks input [sinks] of sinks_dtype
  ir::DType sinks_dtype = ir::FLOAT32;
  bool negated = false;                 // out = -paged_attention(...), as a consumer
};

// out [T, Hq, D] = paged_attention(query [T, Hq, D], cache [2, Hkv, S, D],
// block_table [B, NB], positions [T] [, sinks [Hq]]), T = batch * q_len, S =
// num_blocks * block_size, scale 1/sqrt(D).
inline ir::Graph PagedAttentionGraph(const PagedAttentionShape& s) {
  ir::Graph graph;
  graph.set_name("paged_attention");
  const int64_t tokens = s.batch * s.q_len;
  AddInput(graph, "query", Type(s.dtype, {tokens, s.heads, s.dim}));
  AddInput(graph, "cache", Type(s.dtype, {2, s.kv_heads, s.num_blocks * s.block_size, s.dim}));
  AddInput(graph, "block_table", Type(s.index_dtype, {s.batch, s.table_width}));
  AddInput(graph, "positions", Type(s.index_dtype, {tokens}));
  AddNode(graph, "paged_attention", {"query", "cache", "block_table", "positions"},
          s.negated ? "attention" : "out", Type(s.dtype, {tokens, s.heads, s.dim}));
  ir::Node* n = graph.mutable_nodes(graph.nodes_size() - 1);
  if (s.sinks > 0) {
    AddInput(graph, "sinks", Type(s.sinks_dtype, {s.sinks}));
    n->add_inputs("sinks");
  }
  (*n->mutable_attrs())["block_size"].set_i(s.block_size);
  (*n->mutable_attrs())["scale"].set_f(1.0 / std::sqrt(static_cast<double>(s.dim)));
  if (s.sliding_window > 0) (*n->mutable_attrs())["sliding_window"].set_i(s.sliding_window);
  if (s.soft_cap != 0) (*n->mutable_attrs())["soft_cap"].set_f(s.soft_cap);
  if (s.negated) AddNode(graph, "neg", {"attention"}, "out", Type(s.dtype, {tokens, s.heads, s.dim}));
  graph.add_outputs("out");
  return graph;
}

// out [m, n] = _grouped_mm(a [m, k], b [g, k, n], offs [g] of `offs_dtype`);
// with `b_transposed` b is the transpose(-2, -1) of the input [g, n, k]
// (how transformers passes an nn.Linear-layout expert weight).
inline ir::Graph GroupedMmGraph(ir::DType t, ir::DType offs_dtype, int64_t g,
                                int64_t m, int64_t k, int64_t n,
                                bool b_transposed) {
  ir::Graph graph;
  graph.set_name("grouped_mm");
  AddInput(graph, "a", Type(t, {m, k}));
  AddInput(graph, "b", b_transposed ? Type(t, {g, n, k}) : Type(t, {g, k, n}));
  AddInput(graph, "offs", Type(offs_dtype, {g}));
  std::string weight = "b";
  if (b_transposed) {
    AddNode(graph, "transpose", {"b"}, "bt", Type(t, {g, k, n}));
    ir::Node* tr = graph.mutable_nodes(graph.nodes_size() - 1);
    (*tr->mutable_attrs())["dim0"].set_i(-2);
    (*tr->mutable_attrs())["dim1"].set_i(-1);
    weight = "bt";
  }
  AddNode(graph, "_grouped_mm", {"a", weight, "offs"}, "out", Type(t, {m, n}));
  graph.add_outputs("out");
  return graph;
}

// out = a + alpha * b, all of type `t` (or b of `b_type` when given).
inline ir::Graph AddGraph(const ir::TensorType& t, double alpha = 1.0) {
  ir::Graph g;
  g.set_name("add");
  AddInput(g, "a", t);
  AddInput(g, "b", t);
  AddNode(g, "add", {"a", "b"}, "out", t, alpha);
  g.add_outputs("out");
  return g;
}

// out = (a + b) + c: two element-wise ops that fusion turns into one.
inline ir::Graph AddChainGraph(const ir::TensorType& t) {
  ir::Graph g;
  g.set_name("add_chain");
  AddInput(g, "a", t);
  AddInput(g, "b", t);
  AddInput(g, "c", t);
  AddNode(g, "add", {"a", "b"}, "t0", t);
  AddNode(g, "add", {"t0", "c"}, "out", t);
  g.add_outputs("out");
  return g;
}

// A decoder-only model of `layers` identical pre-norm blocks, as
// torch.compile hands it over: token embedding, per block layer_norm,
// q/k/v projections split into heads, causal attention, output projection,
// residual, rms_norm, a tanh-GELU MLP and residual; then a final layer_norm
// and the vocabulary projection. Each block has weights of its own (graph
// inputs) and also returns its keys (like a KV cache), so the blocks are
// equal up to their inputs and outputs. Outputs: logits, then the keys.
inline ir::Graph DecoderStackGraph(int layers, int64_t seq, int64_t dim,
                                   int64_t heads, int64_t vocab,
                                   ir::DType dtype = ir::FLOAT32) {
  ir::Graph g;
  g.set_name("decoder_stack");
  const int64_t hd = dim / heads;
  auto input = [&](const std::string& name, std::vector<int64_t> shape,
                   ir::DType t) {
    AddInput(g, name, Type(t, shape));
    return name;
  };
  auto node = [&](const std::string& op, std::vector<std::string> inputs,
                  std::vector<int64_t> shape,
                  std::vector<std::pair<std::string, std::string>> str_attrs = {},
                  bool causal = false) {
    ir::Node* n = g.add_nodes();
    n->set_op(op);
    for (const std::string& in : inputs) n->add_inputs(in);
    ir::Value* v = n->add_outputs();
    v->set_name("t" + std::to_string(g.nodes_size()));
    *v->mutable_type() = Type(dtype, shape);
    for (auto& [k, a] : str_attrs) (*n->mutable_attrs())[k].set_s(a);
    if (causal) (*n->mutable_attrs())["is_causal"].set_b(true);
    return v->name();
  };
  const std::string dims = std::to_string(dim);
  std::string ids = input("ids", {1, seq}, ir::INT64);
  std::string table = input("embed", {vocab, dim}, dtype);
  std::string x = node("embedding", {table, ids}, {1, seq, dim});
  std::vector<std::string> keys;
  for (int l = 0; l < layers; ++l) {
    const std::string p = "l" + std::to_string(l) + "_";
    std::string ln_w = input(p + "ln_w", {dim}, dtype);
    std::string wq = input(p + "wq", {dim, dim}, dtype);
    std::string wk = input(p + "wk", {dim, dim}, dtype);
    std::string wv = input(p + "wv", {dim, dim}, dtype);
    std::string wo = input(p + "wo", {dim, dim}, dtype);
    std::string rms_w = input(p + "rms_w", {dim}, dtype);
    std::string w1 = input(p + "w1", {4 * dim, dim}, dtype);
    std::string w2 = input(p + "w2", {dim, 4 * dim}, dtype);
    std::string h = node("layer_norm", {x, ln_w}, {1, seq, dim}, {{"normalized_shape", dims}});
    auto heads_of = [&](const std::string& w) {
      std::string proj = node("linear", {h, w}, {1, seq, dim});
      std::string v = node("view", {proj}, {1, seq, heads, hd});
      return node("permute", {v}, {1, heads, seq, hd}, {{"dims", "0,2,1,3"}});
    };
    std::string q = heads_of(wq), k = heads_of(wk), v = heads_of(wv);
    keys.push_back(k);
    std::string att = node("scaled_dot_product_attention", {q, k, v}, {1, heads, seq, hd},
                           {}, /*causal=*/true);
    std::string back = node("permute", {att}, {1, seq, heads, hd}, {{"dims", "0,2,1,3"}});
    std::string merged = node("reshape", {back}, {1, seq, dim});
    std::string o = node("linear", {merged, wo}, {1, seq, dim});
    std::string r1 = node("add", {x, o}, {1, seq, dim});
    std::string n2 = node("rms_norm", {r1, rms_w}, {1, seq, dim});
    std::string up = node("linear", {n2, w1}, {1, seq, 4 * dim});
    std::string act = node("gelu", {up}, {1, seq, 4 * dim}, {{"approximate", "tanh"}});
    std::string down = node("linear", {act, w2}, {1, seq, dim});
    x = node("add", {r1, down}, {1, seq, dim});
  }
  std::string final_w = input("final_ln_w", {dim}, dtype);
  std::string head = input("lm_head", {vocab, dim}, dtype);
  std::string normed = node("layer_norm", {x, final_w}, {1, seq, dim}, {{"normalized_shape", dims}});
  g.add_outputs(node("linear", {normed, head}, {1, seq, vocab}));
  for (const std::string& k : keys) g.add_outputs(k);
  return g;
}

// bfloat16 <-> float with c10::BFloat16's rounding (nearest even).
inline uint16_t FloatToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (f != f) return 0x7fc0;
  return static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}
inline float Bf16ToFloat(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The value of IEEE half `bits` from its definition (NaN for NaNs): a
// reference independent of any conversion code under test.
inline double HalfValue(uint16_t bits) {
  const int exponent = (bits >> 10) & 0x1f, mantissa = bits & 0x3ff;
  double magnitude;
  if (exponent == 0x1f) {
    magnitude = mantissa ? NAN : INFINITY;
  } else if (exponent == 0) {
    magnitude = std::ldexp(mantissa, -24);
  } else {
    magnitude = std::ldexp(1024 + mantissa, exponent - 25);
  }
  return (bits & 0x8000) ? -magnitude : magnitude;
}

}  // namespace rbln::compiler::testing

#endif  // RBLN_COMPILER_TESTING_TEST_GRAPHS_H_
