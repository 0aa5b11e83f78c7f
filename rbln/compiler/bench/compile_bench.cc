// Compile latency of the compiler's three paths (SPEC P9/P10): first compile
// (frontend, passes, codegen), in-memory cache hit, disk cache hit (object
// load, no codegen), for a 2-op graph and a transformer block. Then run-time
// quality of the generated code, measured in the same run against plain
// references: a fused element-wise chain and a triad against a STREAM-style
// C++ triad loop, and a compiled f32 matmul against calling cblas_sgemm.
//
//   bazel run //rbln/compiler/bench:compile_bench [-- --quick]
//   bazel run //rbln/compiler/bench:compile_bench -- --matmul [rounds]   # matmul only
//   bazel run //rbln/compiler/bench:compile_bench -- --layers [max] [--no-whole]
//
// Warm-up first (P10): one compile of an unrelated graph creates the MLIR
// context and initializes LLVM, so the timings are of the steady state.
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "rbln/compiler/compiler.h"
#include "rbln/compiler/kernels/blas_loader.h"
#include "rbln/compiler/testing/test_graphs.h"

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
                   std::vector<std::pair<std::string, ir::Attribute>> attrs = {},
                   ir::DType dtype = ir::FLOAT32) {
    ir::Node* n = g_.add_nodes();
    n->set_op(op);
    for (const std::string& in : inputs) n->add_inputs(in);
    ir::Value* v = n->add_outputs();
    v->set_name(absl::StrFormat("t%d", g_.nodes_size()));
    *v->mutable_type() = Type(dtype, shape);
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

// (x * gain + bias) * 0.5: three element-wise ops fused into one kernel.
ir::Graph Chain(int64_t n) {
  GraphBuilder g("chain");
  std::string x = g.Input("x", ir::FLOAT32, {n}), gain = g.Input("g", ir::FLOAT32, {n}),
              bias = g.Input("b", ir::FLOAT32, {n});
  std::string m = g.Node("mul", {x, gain}, {n});
  std::string a = g.Node("add", {m, bias}, {n});
  ir::Attribute half;
  half.set_f(0.5);
  return g.Finish(g.Node("mul", {a}, {n}, {{"other", half}}));
}

// a = b + 3 * c, STREAM's triad, as one add with alpha.
ir::Graph Triad(int64_t n) {
  GraphBuilder g("triad");
  std::string b = g.Input("b", ir::FLOAT32, {n}), c = g.Input("c", ir::FLOAT32, {n});
  ir::Attribute alpha;
  alpha.set_f(3.0);
  return g.Finish(g.Node("add", {b, c}, {n}, {{"alpha", alpha}}));
}

ir::Graph Matmul(int64_t n, ir::DType dtype) {
  GraphBuilder g("mm");
  std::string a = g.Input("a", dtype, {n, n}), b = g.Input("b", dtype, {n, n});
  return g.Finish(g.Node("mm", {a, b}, {n, n}, {}, dtype));
}

runtime::BufferView View(std::vector<float>& v, std::vector<int64_t> sizes) {
  std::vector<int64_t> strides(sizes.size(), 1);
  for (int d = static_cast<int>(sizes.size()) - 2; d >= 0; --d) {
    strides[d] = strides[d + 1] * sizes[d + 1];
  }
  return {v.data(), DType::kFloat32, sizes, strides};
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

// The compiled f32 and f16 m^3 matmuls against cblas_sgemm called directly
// on f32 buffers. The three are timed round-robin (one call of each per
// round, median over `reps` rounds), so load on a shared machine hits them
// alike.
void MatmulBench(Compiler& compiler, int64_t m, int reps) {
  std::vector<float> a32(m * m, 0.25f), b32(m * m, 0.5f), c32(m * m), direct(m * m);
  // float16 0.25 and 0.5.
  std::vector<uint16_t> a16(m * m, 0x3400), b16(m * m, 0x3800), c16(m * m);
  auto mm32 = compiler.Compile(Matmul(m, ir::FLOAT32));
  auto mm16 = compiler.Compile(Matmul(m, ir::FLOAT16));
  Check(mm32);
  Check(mm16);
  auto view16 = [&](std::vector<uint16_t>& v) {
    return runtime::BufferView{v.data(), DType::kFloat16, {m, m}, {m, 1}};
  };
  const std::vector<runtime::BufferView> args32 = {View(a32, {m, m}), View(b32, {m, m}),
                                                   View(c32, {m, m})};
  const std::vector<runtime::BufferView> args16 = {view16(a16), view16(b16), view16(c16)};
  using Sgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*,
                         int, float, float*, int);
  Sgemm sgemm = LoadOpenBlas() ? reinterpret_cast<Sgemm>(dlsym(RTLD_DEFAULT, "cblas_sgemm"))
                               : nullptr;
  // OpenBLAS's own thread count knob, to time one thread in the same rounds.
  using SetThreads = void (*)(int);
  using GetThreads = int (*)();
  auto set_threads = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  auto get_threads = reinterpret_cast<GetThreads>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  const int threads = get_threads ? get_threads() : 0;
  const int other_threads = threads == 1 ? 2 : 1;  // Timed too, same rounds.
  std::vector<double> us32, us16, us_direct, us_direct1;
  auto time = [](std::vector<double>& out, auto fn) {
    const absl::Time start = absl::Now();
    fn();
    out.push_back(absl::ToDoubleMicroseconds(absl::Now() - start));
  };
  for (int r = 0; r < reps + 1; ++r) {  // Round 0 warms up.
    time(us32, [&] { (void)(*mm32)->Execute(args32); });
    time(us16, [&] { (void)(*mm16)->Execute(args16); });
    // CblasRowMajor = 101, CblasNoTrans = 111.
    if (sgemm) {
      time(us_direct, [&] {
        sgemm(101, 111, 111, m, m, m, 1.0f, a32.data(), m, b32.data(), m, 0.0f,
              direct.data(), m);
      });
    }
    if (sgemm && set_threads && threads > 0) {
      set_threads(other_threads);
      time(us_direct1, [&] {
        sgemm(101, 111, 111, m, m, m, 1.0f, a32.data(), m, b32.data(), m, 0.0f,
              direct.data(), m);
      });
      set_threads(threads);
    }
    if (r == 0) us32.clear(), us16.clear(), us_direct.clear(), us_direct1.clear();
  }
  const double flop = 2.0 * m * m * m;
  auto row = [&](const char* name, const std::vector<double>& us, const char* note) {
    const double t = Median(us);
    std::printf("%-40s %10.1f %8.2f  %s\n", name, t, flop / (t * 1e3), note);
  };
  std::printf("\n%-40s %10s %8s\n", absl::StrFormat("matmul %d^3, median of %d rounds", m, reps).c_str(),
              "us", "GFLOP/s");
  row("compiled mm f32", us32, (*mm32)->uses_blas() ? "(BLAS rewrite)" : "(loops)");
  row("compiled mm f16 (f32 accumulate)", us16, (*mm16)->uses_blas() ? "(BLAS rewrite)" : "(loops)");
  const std::string threads_note = absl::StrFormat("(%d OpenBLAS threads)", threads);
  if (sgemm) row("cblas_sgemm called directly (f32)", us_direct, threads_note.c_str());
  const std::string other_name =
      absl::StrFormat("cblas_sgemm directly, %d thread(s)", other_threads);
  if (!us_direct1.empty()) row(other_name.c_str(), us_direct1, "");
  if (c32 != direct) std::printf("  compiled f32 result differs from cblas_sgemm's\n");
}

// Compile time against depth (issue 17 item 3): a decoder stack of 1..max
// identical layers (test_graphs.h, float16, dim 768, seq 128, 12 heads)
// compiled whole and as segments, each in a fresh compiler (cold caches),
// with the per-phase report of each compile.
void LayersBench(int max_layers, bool with_whole) {
  std::printf("%-8s %-10s %10s  %s\n", "layers", "mode", "wall ms", "report");
  for (int layers = 1; layers <= max_layers; layers *= 2) {
    const ir::Graph g = testing::DecoderStackGraph(layers, 128, 768, 12, 512, ir::FLOAT16);
    for (bool segmented : {true, false}) {
      if (!segmented && !with_whole) continue;
      absl::StatusOr<CompilerOptions> options = CompilerOptions::FromEnv();
      if (!options.ok()) {
        std::fprintf(stderr, "%s\n", std::string(options.status().message()).c_str());
        std::exit(1);
      }
      options->segment.min_work = segmented ? 1 : 1 << 30;
      Compiler compiler(*options);
      Check(compiler.Compile(TwoOps(8)));  // Warm-up (P10).
      const absl::Time start = absl::Now();
      auto program = compiler.Compile(g);
      Check(program);
      std::printf("%-8d %-10s %10.1f  %s\n", layers, segmented ? "segments" : "whole",
                  absl::ToDoubleMilliseconds(absl::Now() - start),
                  (*program)->compile_report().ToString().c_str());
      std::fflush(stdout);
    }
  }
}

int Main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  // --layers [max] [--no-whole]: compile time against depth.
  if (argc > 1 && std::strcmp(argv[1], "--layers") == 0) {
    LayersBench(argc > 2 ? std::atoi(argv[2]) : 8,
                !(argc > 3 && std::strcmp(argv[3], "--no-whole") == 0));
    return 0;
  }
  // --matmul: only the matmul comparison, with `reps` rounds (for perf).
  if (argc > 1 && std::strcmp(argv[1], "--matmul") == 0) {
    Compiler compiler(CompilerOptions{.cache_capacity = 8});
    MatmulBench(compiler, 512, argc > 2 ? std::atoi(argv[2]) : 50);
    return 0;
  }
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

  // Generated code against plain references, same run, same buffers.
  const int64_t n = quick ? 1 << 12 : 1 << 22;
  const int run_reps = quick ? 2 : 20;
  std::vector<float> x(n, 1.5f), gain(n, 0.5f), bias(n, 2.0f), out(n);
  auto chain = memory_only.Compile(Chain(n));
  auto triad = memory_only.Compile(Triad(n));
  Check(chain);
  Check(triad);
  std::vector<runtime::BufferView> chain_args = {View(x, {n}), View(gain, {n}), View(bias, {n}),
                                                 View(out, {n})};
  std::vector<runtime::BufferView> triad_args = {View(x, {n}), View(gain, {n}), View(out, {n})};
  const double chain_us = TimeUs(run_reps, [&] { (void)(*chain)->Execute(chain_args); });
  const double triad_us = TimeUs(run_reps, [&] { (void)(*triad)->Execute(triad_args); });
  const double loop_us = TimeUs(run_reps, [&] {
    float* a = out.data();
    const float *b = x.data(), *c = gain.data();
    for (int64_t i = 0; i < n; ++i) a[i] = b[i] + 3.0f * c[i];
    asm volatile("" : : "r"(a) : "memory");
  });
  auto gbs = [&](int arrays, double us) { return arrays * n * 4.0 / (us * 1e3); };
  std::printf("\n%-40s %10s %8s\n", ("f32 element-wise, n = " + std::to_string(n)).c_str(), "us", "GB/s");
  std::printf("%-40s %10.1f %8.2f\n", "compiled chain (x*g+b)*0.5 [4 arrays]", chain_us, gbs(4, chain_us));
  std::printf("%-40s %10.1f %8.2f\n", "compiled triad b+3c [3 arrays]", triad_us, gbs(3, triad_us));
  std::printf("%-40s %10.1f %8.2f\n", "C++ triad loop [3 arrays]", loop_us, gbs(3, loop_us));

  MatmulBench(memory_only, quick ? 64 : 512, run_reps);

  const CompilerStats s = with_disk.stats();
  std::printf("\ndisk compiler: %lld disk hits, %lld compiles, %lld rejects\n",
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
