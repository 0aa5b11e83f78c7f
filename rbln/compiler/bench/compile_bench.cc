// Compile latency of the compiler's three paths (SPEC P9/P10): first compile
// (frontend, passes, codegen), in-memory cache hit, disk cache hit (object
// load, no codegen), for a 2-op graph and a transformer block.
//
//   bazel run //rbln/compiler:compile_bench [-- --quick]
//
// Warm-up first (P10): one compile of an unrelated graph creates the MLIR
// context and initializes LLVM, so the timings are of the steady state.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "rbln/compiler/compiler.h"
#include "rbln/compiler/test_graphs.h"

namespace rbln::compiler {
namespace {

using testing::Type;

class GraphBuilder {
 public:
  explicit GraphBuilder(const std::string& name) { g_.set_name(name); }
  std::string Input(const std::string& name, ir::DType t, std::vector<int64_t> shape) {
    testing::AddInput(g_, name, Type(t, shape));
    return name;
  }
  std::string Node(const std::string& op, std::vector<std::string> inputs,
                   std::vector<int64_t> shape,
                   std::vector<std::pair<std::string, ir::Attribute>> attrs = {}) {
    ir::Node* n = g_.add_nodes();
    n->set_op(op);
    for (const std::string& in : inputs) n->add_inputs(in);
    ir::Value* v = n->add_outputs();
    v->set_name(absl::StrFormat("t%d", g_.nodes_size()));
    *v->mutable_type() = Type(ir::FLOAT32, shape);
    for (auto& [k, a] : attrs) (*n->mutable_attrs())[k] = a;
    return v->name();
  }
  ir::Graph Finish(const std::string& out) {
    g_.add_outputs(out);
    return g_;
  }

 private:
  ir::Graph g_;
};

ir::Attribute I(int64_t v) {
  ir::Attribute a;
  a.set_i(v);
  return a;
}
ir::Attribute S(const std::string& v) {
  ir::Attribute a;
  a.set_s(v);
  return a;
}
ir::Attribute B(bool v) {
  ir::Attribute a;
  a.set_b(v);
  return a;
}

ir::Graph TwoOps(int64_t n) {
  GraphBuilder g("two_ops");
  std::string a = g.Input("a", ir::FLOAT32, {n, n}), b = g.Input("b", ir::FLOAT32, {n, n});
  std::string s = g.Node("add", {a, b}, {n, n});
  return g.Finish(g.Node("mul", {s, b}, {n, n}));
}

// A pre-norm decoder block: x + attn(ln(x)), then + mlp(rms(.)) with gelu.
ir::Graph TransformerBlock(int64_t seq, int64_t dim, int64_t heads) {
  const int64_t hd = dim / heads;
  GraphBuilder g("transformer_block");
  std::string x = g.Input("x", ir::FLOAT32, {1, seq, dim});
  std::string ln_w = g.Input("ln_w", ir::FLOAT32, {dim});
  std::string wq = g.Input("wq", ir::FLOAT32, {dim, dim}), wk = g.Input("wk", ir::FLOAT32, {dim, dim}),
              wv = g.Input("wv", ir::FLOAT32, {dim, dim}), wo = g.Input("wo", ir::FLOAT32, {dim, dim});
  std::string rms_w = g.Input("rms_w", ir::FLOAT32, {dim});
  std::string w1 = g.Input("w1", ir::FLOAT32, {4 * dim, dim}), w2 = g.Input("w2", ir::FLOAT32, {dim, 4 * dim});
  std::string h = g.Node("layer_norm", {x, ln_w}, {1, seq, dim}, {{"normalized_shape", S(std::to_string(dim))}});
  auto heads_of = [&](const std::string& w) {
    std::string p = g.Node("linear", {h, w}, {1, seq, dim});
    std::string v = g.Node("view", {p}, {1, seq, heads, hd});
    return g.Node("permute", {v}, {1, heads, seq, hd}, {{"dims", S("0,2,1,3")}});
  };
  std::string q = heads_of(wq), k = heads_of(wk), v = heads_of(wv);
  std::string att = g.Node("scaled_dot_product_attention", {q, k, v}, {1, heads, seq, hd},
                           {{"is_causal", B(true)}});
  std::string back = g.Node("permute", {att}, {1, seq, heads, hd}, {{"dims", S("0,2,1,3")}});
  std::string merged = g.Node("reshape", {back}, {1, seq, dim});
  std::string o = g.Node("linear", {merged, wo}, {1, seq, dim});
  std::string r1 = g.Node("add", {x, o}, {1, seq, dim});
  std::string n2 = g.Node("rms_norm", {r1, rms_w}, {1, seq, dim});
  std::string up = g.Node("linear", {n2, w1}, {1, seq, 4 * dim});
  std::string act = g.Node("gelu", {up}, {1, seq, 4 * dim}, {{"approximate", S("tanh")}});
  std::string down = g.Node("linear", {act, w2}, {1, seq, dim});
  (void)I;
  return g.Finish(g.Node("add", {r1, down}, {1, seq, dim}));
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Microseconds per call of `fn`, median of `reps`.
template <typename Fn>
double TimeUs(int reps, Fn fn) {
  std::vector<double> us;
  for (int i = 0; i < reps; ++i) {
    const absl::Time start = absl::Now();
    fn();
    us.push_back(absl::ToDoubleMicroseconds(absl::Now() - start));
  }
  return Median(us);
}

void Check(const absl::StatusOr<std::shared_ptr<const CompiledProgram>>& p) {
  if (!p.ok()) {
    std::fprintf(stderr, "compile failed: %s\n", std::string(p.status().message()).c_str());
    std::exit(1);
  }
}

int Main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  const int compile_reps = quick ? 1 : 5, hit_reps = quick ? 10 : 2000;
  const std::string dir = absl::StrFormat("/tmp/rbln_compile_bench_%d", getpid());
  std::filesystem::remove_all(dir);
  Compiler memory_only(CompilerOptions{.cache_capacity = 64});
  Compiler with_disk(CompilerOptions{.cache_capacity = 64, .cache_dir = dir});
  Check(memory_only.Compile(TwoOps(8)));  // Warm-up (P10).
  Check(with_disk.Compile(TwoOps(8)));
  std::printf("%-20s %7s %16s %14s %14s\n", "graph", "nodes", "first compile ms",
              "memory hit us", "disk hit ms");
  for (const ir::Graph& graph : {TwoOps(256), TransformerBlock(64, 256, 4)}) {
    const double first_ms = TimeUs(compile_reps, [&] {
      memory_only.ClearCache();
      Check(memory_only.Compile(graph));
    }) / 1000;
    const double hit_us = TimeUs(hit_reps, [&] { Check(memory_only.Compile(graph)); });
    Check(with_disk.Compile(graph));  // Writes the entry.
    const double disk_ms = TimeUs(compile_reps, [&] {
      with_disk.ClearCache();
      Check(with_disk.Compile(graph));
    }) / 1000;
    std::printf("%-20s %7d %16.1f %14.2f %14.2f\n", graph.name().c_str(), graph.nodes_size(),
                first_ms, hit_us, disk_ms);
  }
  const CompilerStats s = with_disk.stats();
  std::printf("disk compiler: %lld disk hits, %lld compiles, %lld rejects\n",
              static_cast<long long>(s.disk_hits), static_cast<long long>(s.compiles),
              static_cast<long long>(s.disk_rejects));
  std::filesystem::remove_all(dir);
  if (s.disk_hits != 2 * compile_reps || s.compiles != 3) {
    std::fprintf(stderr, "unexpected cache behaviour\n");
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace rbln::compiler

int main(int argc, char** argv) { return rbln::compiler::Main(argc, argv); }
