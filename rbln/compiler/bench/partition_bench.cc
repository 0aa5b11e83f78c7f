// Chiplet partitioning (SPEC A2) costs and gains, in one run:
//  - the chiplet team's dispatch cost (an empty job, a job with a barrier);
//  - element-wise add over n elements, whole vs split over 4 workers, for
//    the size threshold (kDefaultPartitionMinWork);
//  - a large fused element-wise chain and a 512^3 f32 matmul, 1 vs 4 workers;
//  - a worker sweep (1, 4, 8 workers: one NPU's chiplets, two NPUs' of an
//    RSD group) of the chain and of softmax(x) @ w, whose internal buffers
//    live in the per-worker workspace segments.
// Speedups are bounded by the host's cores (this machine: 2, shared).
//
//   bazel run -c opt //rbln/compiler/bench:partition_bench [-- --quick]
//   RBLN_COMPILER_BLAS=0 bazel run -c opt //rbln/compiler/bench:partition_bench
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "rbln/compiler/compiler.h"
#include "rbln/compiler/execution/chiplet_team.h"
#include "rbln/compiler/testing/test_graphs.h"

namespace rbln::compiler {
namespace {

using testing::Type;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <typename Fn>
double TimeUs(int reps, Fn fn) {
  fn();  // warm
  std::vector<double> us;
  for (int i = 0; i < reps; ++i) {
    const absl::Time start = absl::Now();
    fn();
    us.push_back(absl::ToDoubleMicroseconds(absl::Now() - start));
  }
  return Median(us);
}

runtime::BufferView View(std::vector<float>& v, std::vector<int64_t> sizes) {
  std::vector<int64_t> strides(sizes.size(), 1);
  for (int d = static_cast<int>(sizes.size()) - 2; d >= 0; --d) {
    strides[d] = strides[d + 1] * sizes[d + 1];
  }
  return {v.data(), DType::kFloat32, sizes, strides};
}

std::shared_ptr<const CompiledProgram> MustCompile(Compiler& c, const ir::Graph& g) {
  auto p = c.Compile(g);
  if (!p.ok()) {
    std::fprintf(stderr, "compile failed: %s\n", std::string(p.status().message()).c_str());
    std::exit(1);
  }
  return *p;
}

void MustRun(const CompiledProgram& p, const std::vector<runtime::BufferView>& args) {
  if (absl::Status s = p.Execute(args); !s.ok()) {
    std::fprintf(stderr, "run failed: %s\n", std::string(s.message()).c_str());
    std::exit(1);
  }
}

// (x * g + b) * 0.5 over n elements: one fused kernel.
ir::Graph Chain(int64_t n) {
  ir::Graph g;
  g.set_name("chain");
  const ir::TensorType t = Type(ir::FLOAT32, {n});
  testing::AddInput(g, "x", t);
  testing::AddInput(g, "g", t);
  testing::AddInput(g, "b", t);
  testing::AddNode(g, "mul", {"x", "g"}, "m", t);
  testing::AddNode(g, "add", {"m", "b"}, "a", t);
  ir::Node* half = g.add_nodes();
  half->set_op("mul");
  half->add_inputs("a");
  (*half->mutable_attrs())["other"].set_f(0.5);
  ir::Value* out = half->add_outputs();
  out->set_name("out");
  *out->mutable_type() = t;
  g.add_outputs("out");
  return g;
}

ir::Graph Matmul(int64_t n) {
  ir::Graph g;
  g.set_name("mm");
  const ir::TensorType t = Type(ir::FLOAT32, {n, n});
  testing::AddInput(g, "a", t);
  testing::AddInput(g, "b", t);
  testing::AddNode(g, "mm", {"a", "b"}, "out", t);
  g.add_outputs("out");
  return g;
}

// softmax(x, -1) @ w on [n, k] x [k, k]: a barrier and internal buffers.
ir::Graph SoftmaxMm(int64_t n, int64_t k) {
  ir::Graph g;
  g.set_name("softmax_mm");
  const ir::TensorType x = Type(ir::FLOAT32, {n, k});
  testing::AddInput(g, "x", x);
  testing::AddInput(g, "w", Type(ir::FLOAT32, {k, k}));
  ir::Node* softmax = g.add_nodes();
  softmax->set_op("softmax");
  softmax->add_inputs("x");
  (*softmax->mutable_attrs())["dim"].set_i(-1);
  ir::Value* s = softmax->add_outputs();
  s->set_name("s");
  *s->mutable_type() = x;
  testing::AddNode(g, "mm", {"s", "w"}, "out", x);
  g.add_outputs("out");
  return g;
}

// 1, 4 and 8 workers (the target's worker count: NPUs x chiplets).
void WorkerSweep(bool quick) {
  const int reps = quick ? 3 : 20;
  const int64_t n = quick ? 1 << 14 : 1 << 22;
  const int64_t rows = quick ? 64 : 1024, k = quick ? 32 : 256;
  std::printf("\n%-34s %8s %12s %16s %10s\n", "program", "workers", "us/call",
              "vs 1 worker", "workspace");
  double chain1 = 0, softmax1 = 0;
  for (int workers : {1, 4, 8}) {
    Compiler c(CompilerOptions{.partition = {.partitions = workers, .min_work = 0}});
    {
      auto p = MustCompile(c, Chain(n));
      std::vector<float> x(n, 1.5f), gain(n, 0.5f), bias(n, 2.0f), out(n);
      std::vector<runtime::BufferView> args = {View(x, {n}), View(gain, {n}),
                                               View(bias, {n}), View(out, {n})};
      const double t = TimeUs(reps, [&] { MustRun(*p, args); });
      if (workers == 1) chain1 = t;
      std::printf("%-34s %8d %12.1f %16.2f %10lld\n",
                  absl::StrFormat("chain n=%d", n).c_str(), workers, t, chain1 / t,
                  static_cast<long long>(p->partition_layout().scratch_bytes));
    }
    {
      auto p = MustCompile(c, SoftmaxMm(rows, k));
      std::vector<float> x(rows * k, 0.25f), w(k * k, 0.5f), out(rows * k);
      std::vector<runtime::BufferView> args = {View(x, {rows, k}), View(w, {k, k}),
                                               View(out, {rows, k})};
      const double t = TimeUs(reps, [&] { MustRun(*p, args); });
      if (workers == 1) softmax1 = t;
      std::printf("%-34s %8d %12.1f %16.2f %10lld\n",
                  absl::StrFormat("softmax(x)@w %dx%d @ %dx%d", rows, k, k, k).c_str(),
                  workers, t, softmax1 / t,
                  static_cast<long long>(p->partition_layout().scratch_bytes));
    }
  }
}

int Main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  const int reps = quick ? 20 : 2000;
  Compiler whole(CompilerOptions{.partition = {.partitions = 1}});
  Compiler split(CompilerOptions{.partition = {.partitions = 4, .min_work = 0}});

  ChipletTeam& team = ChipletTeam::Shared(4);
  const double empty_us = TimeUs(reps, [&] { team.Run([](int) {}); });
  const double barrier_us = TimeUs(reps, [&] {
    team.Run([](int) { rbln_chiplet_barrier(); });
  });
  std::printf("chiplet team (4 workers): empty job %.2f us, job with one barrier %.2f us\n\n",
              empty_us, barrier_us);

  std::printf("%-28s %12s %12s %8s\n", "f32 add, n elements", "1 worker us", "4 workers us",
              "speedup");
  for (int64_t n : {int64_t{64}, int64_t{4096}, int64_t{16384}, int64_t{65536},
                    int64_t{262144}}) {
    const ir::Graph g = testing::AddGraph(Type(ir::FLOAT32, {n}));
    auto p1 = MustCompile(whole, g), p4 = MustCompile(split, g);
    std::vector<float> a(n, 1.0f), b(n, 2.0f), c(n);
    std::vector<runtime::BufferView> args = {View(a, {n}), View(b, {n}), View(c, {n})};
    const int r = n >= 65536 ? std::max(5, reps / 10) : reps;
    const double t1 = TimeUs(r, [&] { MustRun(*p1, args); });
    const double t4 = TimeUs(r, [&] { MustRun(*p4, args); });
    std::printf("%-28lld %12.2f %12.2f %8.2f\n", static_cast<long long>(n), t1, t4, t1 / t4);
  }

  const int64_t n = quick ? 1 << 14 : 1 << 22;
  const int big_reps = quick ? 3 : 20;
  {
    const ir::Graph g = Chain(n);
    auto p1 = MustCompile(whole, g), p4 = MustCompile(split, g);
    std::vector<float> x(n, 1.5f), gain(n, 0.5f), bias(n, 2.0f), out(n);
    std::vector<runtime::BufferView> args = {View(x, {n}), View(gain, {n}), View(bias, {n}),
                                             View(out, {n})};
    const double t1 = TimeUs(big_reps, [&] { MustRun(*p1, args); });
    const double t4 = TimeUs(big_reps, [&] { MustRun(*p4, args); });
    std::vector<absl::Duration> slices = p4->LastSliceTimes();
    std::string per_worker;
    for (size_t w = 0; w < slices.size(); ++w) {
      per_worker += absl::StrFormat(" W%d=%.0f", w, absl::ToDoubleMicroseconds(slices[w]));
    }
    std::printf("\nchain (x*g+b)*0.5, n = %lld: 1 worker %.1f us, 4 workers %.1f us "
                "(speedup %.2f; last call per worker us:%s)\n",
                static_cast<long long>(n), t1, t4, t1 / t4, per_worker.c_str());
  }
  {
    const int64_t m = quick ? 64 : 512;
    const ir::Graph g = Matmul(m);
    auto p1 = MustCompile(whole, g), p4 = MustCompile(split, g);
    std::vector<float> a(m * m, 0.25f), b(m * m, 0.5f), c(m * m);
    std::vector<runtime::BufferView> args = {View(a, {m, m}), View(b, {m, m}), View(c, {m, m})};
    const int mm_reps = quick ? 2 : 5;
    const double t1 = TimeUs(mm_reps, [&] { MustRun(*p1, args); });
    const double t4 = TimeUs(mm_reps, [&] { MustRun(*p4, args); });
    const double flop = 2.0 * m * m * m;
    std::printf("mm %lld^3 (%s): 1 worker %.1f us (%.2f GFLOP/s), 4 workers %.1f us "
                "(%.2f GFLOP/s, speedup %.2f, partitions %d)\n",
                static_cast<long long>(m), p1->uses_blas() ? "BLAS, whole on chiplet 0" : "loops",
                t1, flop / (t1 * 1e3), t4, flop / (t4 * 1e3), t1 / t4,
                p4->partition_layout().partitions);
  }
  WorkerSweep(quick);
  return 0;
}

}  // namespace
}  // namespace rbln::compiler

int main(int argc, char** argv) { return rbln::compiler::Main(argc, argv); }
