// Chiplet partitioning (SPEC A2): every op family, compiled for 4 chiplet
// workers, gives bit-identical outputs to the unpartitioned program; the
// size threshold, the barrier placement and the team itself.
//
// partition_no_blas_test runs the same file with RBLN_COMPILER_BLAS=0, so
// matmuls are checked on both paths of the BLAS switch.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "llvm/Support/raw_ostream.h"
#include "mlir/IR/MLIRContext.h"
#include "rbln/compiler/compiler.h"
#include "rbln/compiler/execution/chiplet_team.h"
#include "rbln/compiler/frontend/frontend.h"
#include "rbln/compiler/kernels/blas_loader.h"
#include "rbln/compiler/pipelines/mlir_setup.h"
#include "rbln/compiler/pipelines/pipelines.h"
#include "rbln/compiler/testing/op_test_util.h"
#include "rbln/compiler/transforms/passes.h"
#include "rbln/runtime/compute_slices.h"

namespace rbln::compiler::testing {
namespace {

// spec: A2

Compiler& Whole() {
  static auto* c = new Compiler(CompilerOptions{.partition = {.partitions = 1}});
  return *c;
}
// min_work 0: even small shapes are split, so edge cases are exercised.
Compiler& Split() {
  static auto* c = new Compiler(
      CompilerOptions{.partition = {.partitions = 4, .min_work = 0}});
  return *c;
}

// Raw output bytes of `program` on `inputs` (outputs start as 0xAB bytes, so
// an element no worker wrote shows up).
std::vector<std::vector<uint8_t>> RunRaw(const CompiledProgram& program,
                                         const std::vector<HostTensor>& inputs,
                                         runtime::ComputeSliceSink* slices = nullptr) {
  const std::vector<ir::TensorType>& types = program.arg_types();
  std::vector<std::vector<uint8_t>> buffers;
  std::vector<Shape> shapes;
  for (const HostTensor& t : inputs) {
    buffers.push_back(Encode(t));
    shapes.push_back(t.shape);
  }
  for (size_t i = inputs.size(); i < types.size(); ++i) {
    Shape shape(types[i].shape().begin(), types[i].shape().end());
    buffers.emplace_back(
        std::max<size_t>(1, NumElements(shape) * ElementSize(types[i].dtype())),
        0xAB);
    shapes.push_back(shape);
  }
  std::vector<runtime::BufferView> args;
  for (size_t i = 0; i < buffers.size(); ++i) {
    args.push_back({buffers[i].data(), RuntimeDType(types[i].dtype()),
                    shapes[i], ContiguousStrides(shapes[i])});
  }
  absl::Status s = slices != nullptr ? program.ExecuteProfiled(args, slices)
                                     : program.Execute(args);
  EXPECT_TRUE(s.ok()) << program.DebugName() << ": " << s;
  return {buffers.begin() + inputs.size(), buffers.end()};
}

// Compiles `g` whole and split; expects identical bytes. `split` says
// whether the program must really have been partitioned (nothing: either;
// empty tensors may fold away).
void ExpectSameSplit(const ir::Graph& g, const std::vector<HostTensor>& inputs,
                     std::optional<bool> split, const std::string& what) {
  SCOPED_TRACE(what);
  auto whole = Whole().Compile(g);
  ASSERT_TRUE(whole.ok()) << whole.status();
  auto parts = Split().Compile(g);
  ASSERT_TRUE(parts.ok()) << parts.status();
  EXPECT_EQ((*whole)->partition_layout().partitions, 1);
  if (split.has_value()) {
    EXPECT_EQ((*parts)->partition_layout().partitions, *split ? 4 : 1);
  }
  EXPECT_EQ((*whole)->uses_blas(), (*parts)->uses_blas());
  const auto want = RunRaw(**whole, inputs);
  // Twice: the team and the arena are reused.
  for (int run = 0; run < 2; ++run) {
    const auto got = RunRaw(**parts, inputs);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      if (got[i] == want[i]) continue;
      const ir::TensorType& type = (*whole)->arg_types()[inputs.size() + i];
      const int64_t n = NumElements(Shape(type.shape().begin(), type.shape().end()));
      const std::vector<double> g = Decode(type.dtype(), got[i], n),
                                w = Decode(type.dtype(), want[i], n);
      int64_t first = 0, count = 0;
      for (int64_t e = n - 1; e >= 0; --e) {
        if (std::memcmp(&got[i][e * ElementSize(type.dtype())],
                        &want[i][e * ElementSize(type.dtype())],
                        ElementSize(type.dtype())) != 0) {
          first = e;
          ++count;
        }
      }
      ADD_FAILURE() << "output " << i << " differs (run " << run << ") in "
                    << count << " of " << n << " elements; first [" << first
                    << "]: split " << g[first] << ", whole " << w[first];
    }
  }
  if ((*parts)->partition_layout().partitions == 4) {
    EXPECT_EQ((*parts)->LastSliceTimes().size(), 4u);
  }
}

std::string Name(const std::string& op, ir::DType dtype, const Shape& shape) {
  return absl::StrCat(op, " ", DTypeText(dtype), ShapeText(shape));
}

// Extents of the split dimension: < 4, not divisible by 4, divisible, 0.
const std::vector<int64_t> kRows = {1, 2, 3, 5, 8, 13, 0};

// Split unless the tensors are empty.
std::optional<bool> UnlessEmpty(int64_t n) {
  return n == 0 ? std::nullopt : std::optional<bool>(true);
}

TEST(PartitionTest, ElementWise) {
  for (ir::DType dtype : {ir::FLOAT32, ir::FLOAT16, ir::BFLOAT16, ir::INT64}) {
    for (int64_t n : kRows) {
      const Shape shape = {n, 7};
      HostTensor a = Random(dtype, shape, 1), b = Random(dtype, shape, 2);
      ir::Graph g = AddChainGraph(a.type());
      ExpectSameSplit(g, {a, b, Random(dtype, shape, 3)}, UnlessEmpty(n),
                      Name("add_chain", dtype, shape));
    }
  }
  // Broadcasting along the split dimension and a 1-d tensor.
  HostTensor row = Random(ir::FLOAT32, {1, 9}, 4), m = Random(ir::FLOAT32, {6, 9}, 5);
  ExpectSameSplit(OneOpGraph("mul", {m.type(), row.type()}, {m.type()}),
                  {m, row}, true, "broadcast mul");
  HostTensor v = Random(ir::FLOAT16, {1001}, 6);
  ExpectSameSplit(OneOpGraph("gelu", {v.type()}, {v.type()},
                             {{"approximate", StrA("tanh")}}),
                  {v}, true, "gelu 1001");
}

TEST(PartitionTest, Reductions) {
  for (int64_t n : kRows) {
    HostTensor x = Random(ir::FLOAT16, {n, 6}, 7);
    // Over the last dim: split along the rows.
    ExpectSameSplit(OneOpGraph("sum", {x.type()}, {Type(ir::FLOAT16, {n})},
                               {{"dim", IntA(1)}}),
                    {x}, n == 0 ? std::nullopt : std::optional<bool>(n >= 2),
                    Name("sum(dim=1)", ir::FLOAT16, x.shape));
    // Over the first dim: the columns (6) are split, each worker reducing
    // whole columns.
    ExpectSameSplit(OneOpGraph("sum", {x.type()}, {Type(ir::FLOAT16, {6})},
                               {{"dim", IntA(0)}}),
                    {x}, UnlessEmpty(n), Name("sum(dim=0)", ir::FLOAT16, x.shape));
    ExpectSameSplit(OneOpGraph("amax", {x.type()}, {Type(ir::FLOAT16, {n})},
                               {{"dim", IntA(-1)}}),
                    {x}, n == 0 ? std::nullopt : std::optional<bool>(n >= 2),
                    Name("amax", ir::FLOAT16, x.shape));
  }
  // A full reduction to a scalar has no parallel dimension: worker 0.
  HostTensor x = Random(ir::FLOAT32, {33, 5}, 8);
  ExpectSameSplit(OneOpGraph("sum", {x.type()}, {Type(ir::FLOAT32, {})}), {x},
                  false, "sum all");
}

TEST(PartitionTest, SoftmaxAndNorms) {
  for (int64_t n : kRows) {
    for (ir::DType dtype : {ir::FLOAT32, ir::FLOAT16}) {
      HostTensor x = Random(dtype, {n, 11}, 9);
      ExpectSameSplit(OneOpGraph("softmax", {x.type()}, {x.type()},
                                 {{"dim", IntA(-1)}}),
                      {x}, UnlessEmpty(n), Name("softmax", dtype, x.shape));
      HostTensor w = Random(dtype, {11}, 10), b = Random(dtype, {11}, 11);
      ExpectSameSplit(
          OneOpGraph("layer_norm", {x.type(), w.type(), b.type()}, {x.type()},
                     {{"normalized_ndim", IntA(1)}, {"eps", FloatA(1e-5)}}),
          {x, w, b}, UnlessEmpty(n), Name("layer_norm", dtype, x.shape));
    }
  }
}

// True when GEMMs become oneDNN calls: a small f32 one is then a single
// call on worker 0 with nothing left to split.
bool GemmsGoToOnednn() {
  absl::StatusOr<bool> enabled = BlasRewriteEnabled();
  absl::StatusOr<std::optional<GemmLibrary>> library = ChosenGemmLibrary();
  return enabled.ok() && *enabled && library.ok() &&
         *library == GemmLibrary::kOnednn;
}

TEST(PartitionTest, Matmul) {
  const bool onednn = GemmsGoToOnednn();
  for (int64_t m : {1, 3, 5, 8, 30, 0}) {
    for (ir::DType dtype : {ir::FLOAT32, ir::FLOAT16}) {
      // f16 operands are widened by split generics first.
      const std::optional<bool> split =
          onednn && dtype == ir::FLOAT32 ? std::nullopt : UnlessEmpty(m);
      HostTensor a = Random(dtype, {m, 17}, 12), b = Random(dtype, {17, 9}, 13);
      ExpectSameSplit(OneOpGraph("mm", {a.type(), b.type()},
                                 {Type(dtype, {m, 9})}),
                      {a, b}, split, Name("mm", dtype, a.shape));
      HostTensor x = Random(dtype, {3, m, 6}, 14), y = Random(dtype, {3, 6, 5}, 15);
      ExpectSameSplit(OneOpGraph("bmm", {x.type(), y.type()},
                                 {Type(dtype, {3, m, 5})}),
                      {x, y}, split, Name("bmm", dtype, x.shape));
    }
  }
  HostTensor a = Random(ir::FLOAT32, {64, 48}, 16), b = Random(ir::FLOAT32, {48, 40}, 17);
  ExpectSameSplit(OneOpGraph("mm", {a.type(), b.type()}, {Type(ir::FLOAT32, {64, 40})}),
                  {a, b}, onednn ? std::nullopt : std::optional<bool>(true),
                  "mm 64x48x40");
}

// GEMMs large enough to be cut into blocks (kMinGemmBlockWork): tall (by
// rows), wide (by columns), batched, in f32, bf16 (read as bf16 by oneDNN)
// and f16; the blocks spread over the workers give the same bits.
TEST(PartitionTest, LargeMatmul) {
  struct Case {
    const char* op;
    Shape a, b, out;
  };
  for (const Case& c : std::vector<Case>{
           {"mm", {300, 128}, {128, 130}, {300, 130}},
           {"mm", {20, 256}, {256, 1000}, {20, 1000}},
           {"bmm", {8, 64, 128}, {8, 128, 80}, {8, 64, 80}},
       }) {
    for (ir::DType dtype : {ir::FLOAT32, ir::BFLOAT16, ir::FLOAT16}) {
      HostTensor a = Random(dtype, c.a, 30), b = Random(dtype, c.b, 31);
      ExpectSameSplit(OneOpGraph(c.op, {a.type(), b.type()}, {Type(dtype, c.out)}),
                      {a, b}, true, Name(c.op, dtype, c.a));
    }
  }
}

TEST(PartitionTest, DataMovement) {
  for (int64_t n : kRows) {
    HostTensor w = Random(ir::FLOAT16, {10, 4}, 18);
    HostTensor ids = Random(ir::INT64, {n}, 19, 0, 10);
    ExpectSameSplit(OneOpGraph("embedding", {w.type(), ids.type()},
                               {Type(ir::FLOAT16, {n, 4})}),
                    {w, ids}, UnlessEmpty(n), Name("embedding", ir::FLOAT16, ids.shape));
    HostTensor a = Random(ir::FLOAT32, {n, 3}, 20), c = Random(ir::FLOAT32, {2, 3}, 21);
    ExpectSameSplit(OneOpGraph("cat", {a.type(), c.type()},
                               {Type(ir::FLOAT32, {n + 2, 3})}, {{"dim", IntA(0)}}),
                    {a, c}, true, Name("cat", ir::FLOAT32, a.shape));
  }
  for (int dim : {0, 1}) {
    HostTensor x = Random(ir::FLOAT32, {6, 5}, 22);
    HostTensor index = Tensor(ir::INT64, {2}, {3, 1});
    HostTensor src = Random(ir::FLOAT32, dim == 0 ? Shape{2, 5} : Shape{6, 2}, 23);
    ExpectSameSplit(OneOpGraph("index_copy", {x.type(), index.type(), src.type()},
                               {x.type()}, {{"dim", IntA(dim)}}),
                    {x, index, src}, true, absl::StrCat("index_copy dim=", dim));
  }
  // index_select of whole slices (a paged KV cache's block gather) is a loop
  // of slice copies whose iterations the workers split (P8's range check
  // in each); alone in the program, so the program is split only if the
  // loop is.
  for (int64_t n : kRows) {
    HostTensor cache = Random(ir::BFLOAT16, {2, 9, 16, 8}, 24);
    HostTensor ids = Random(ir::INT64, {n}, 25, 0, 9);
    ExpectSameSplit(OneOpGraph("index_select", {cache.type(), ids.type()},
                               {Type(ir::BFLOAT16, {2, n, 16, 8})}, {{"dim", IntA(1)}}),
                    {cache, ids}, UnlessEmpty(n),
                    Name("index_select dim=1", ir::BFLOAT16, ids.shape));
  }
}

// Scans are one loop on worker 0 that writes the output slice by slice
// (through views made inside the loop) before split ops read it: the
// barrier must see those writes. Sorts are split passes that gather from
// the previous pass.
TEST(PartitionTest, ScansSortsAndSearches) {
  for (ir::DType dtype : {ir::FLOAT32, ir::FLOAT16}) {
    HostTensor x = Random(dtype, {5, 6, 7}, 50);
    for (int dim : {0, 2}) {
      ExpectSameSplit(
          OneOpGraph("cumsum", {x.type()}, {x.type()}, {{"dim", IntA(dim)}}),
          {x}, std::nullopt, Name("cumsum", dtype, x.shape));
      ExpectSameSplit(
          OneOpGraph("cummax", {x.type()}, {x.type(), Type(ir::INT64, x.shape)},
                     {{"dim", IntA(dim)}}),
          {x}, std::nullopt, Name("cummax", dtype, x.shape));
      ExpectSameSplit(
          OneOpGraph("sort", {x.type()}, {x.type(), Type(ir::INT64, x.shape)},
                     {{"dim", IntA(dim)}}),
          {x}, true, Name("sort", dtype, x.shape));
    }
    ExpectSameSplit(OneOpGraph("var", {x.type()}, {Type(dtype, {5, 7})},
                               {{"dim", IntA(1)}}),
                    {x}, true, Name("var", dtype, x.shape));
    ExpectSameSplit(OneOpGraph("histc", {x.type()}, {Type(dtype, {10})},
                               {{"bins", IntA(10)}}),
                    {x}, std::nullopt, Name("histc", dtype, x.shape));
    HostTensor bounds = Tensor(dtype, {4}, {-1, 0, 0.5, 1});
    ExpectSameSplit(OneOpGraph("bucketize", {x.type(), bounds.type()},
                               {Type(ir::INT64, x.shape)}),
                    {x, bounds}, true, Name("bucketize", dtype, x.shape));
  }
}

// spec: A2 -- a sort of one row (an MoE's top-k over its experts) lowers to a
// loop whose results bound the next loop; worker 0 runs the two together and
// the rest of the program (a large add) is still split over the chiplets,
// bit-identical (it kept the whole program on one worker before).
TEST(PartitionTest, OneRowSortLeavesTheRestSplit) {
  for (ir::DType dtype : {ir::FLOAT32, ir::BFLOAT16}) {
    HostTensor row = Random(dtype, {1, 64}, 51);
    HostTensor big = Random(ir::FLOAT32, {1024, 1024}, 52);
    ir::Graph g = OneOpGraph("sort", {row.type()}, {row.type(), Type(ir::INT64, row.shape)},
                             {{"dim", IntA(1)}});
    AddInput(g, "big", big.type());
    AddNode(g, "add", {"big", "big"}, "sum", big.type());
    g.add_outputs("sum");
    ExpectSameSplit(g, {row, big}, true, Name("sort and add", dtype, row.shape));
  }
}

// Attention is one rbln_masked_attention call, cut into blocks of (batch x
// kv head) items only when it has the work for it: small ones may stay
// whole; a prefill-sized one is split over the workers.
TEST(PartitionTest, Attention) {
  for (bool causal : {false, true}) {
    for (int64_t seq : {1, 3, 8, 13, 64}) {
      const int64_t dim = seq == 64 ? 64 : 8, heads = seq == 64 ? 4 : 2;
      HostTensor q = Random(ir::FLOAT32, {2, heads, seq, dim}, 24),
                 k = Random(ir::FLOAT32, {2, heads, seq, dim}, 25),
                 v = Random(ir::FLOAT32, {2, heads, seq, dim}, 26);
      ExpectSameSplit(OneOpGraph("scaled_dot_product_attention",
                                 {q.type(), k.type(), v.type()}, {q.type()},
                                 {{"is_causal", BoolA(causal)}}),
                      {q, k, v}, seq == 64 ? std::optional<bool>(true) : std::nullopt,
                      absl::StrCat("sdpa seq=", seq, causal ? " causal" : ""));
    }
  }
}

// The pre-norm decoder block of the compile benchmark, small.
ir::Graph TransformerBlock(int64_t seq, int64_t dim, int64_t heads) {
  ir::Graph g;
  g.set_name("transformer_block");
  const int64_t hd = dim / heads;
  auto input = [&](const std::string& name, Shape shape) {
    AddInput(g, name, Type(ir::FLOAT32, shape));
    return name;
  };
  auto node = [&](const std::string& op, std::vector<std::string> inputs,
                  Shape shape, Attrs attrs = {}) {
    ir::Node* n = g.add_nodes();
    n->set_op(op);
    for (const std::string& in : inputs) n->add_inputs(in);
    ir::Value* v = n->add_outputs();
    v->set_name(absl::StrCat("t", g.nodes_size()));
    *v->mutable_type() = Type(ir::FLOAT32, shape);
    for (auto& [k, a] : attrs) (*n->mutable_attrs())[k] = a;
    return v->name();
  };
  std::string x = input("x", {1, seq, dim}), ln_w = input("ln_w", {dim});
  std::string wq = input("wq", {dim, dim}), wk = input("wk", {dim, dim}),
              wv = input("wv", {dim, dim}), wo = input("wo", {dim, dim});
  std::string rms_w = input("rms_w", {dim});
  std::string w1 = input("w1", {4 * dim, dim}), w2 = input("w2", {dim, 4 * dim});
  std::string h = node("layer_norm", {x, ln_w}, {1, seq, dim},
                       {{"normalized_shape", StrA(std::to_string(dim))}});
  auto heads_of = [&](const std::string& w) {
    std::string p = node("linear", {h, w}, {1, seq, dim});
    std::string v = node("view", {p}, {1, seq, heads, hd});
    return node("permute", {v}, {1, heads, seq, hd}, {{"dims", StrA("0,2,1,3")}});
  };
  std::string q = heads_of(wq), k = heads_of(wk), v = heads_of(wv);
  std::string att = node("scaled_dot_product_attention", {q, k, v},
                         {1, heads, seq, hd}, {{"is_causal", BoolA(true)}});
  std::string back = node("permute", {att}, {1, seq, heads, hd}, {{"dims", StrA("0,2,1,3")}});
  std::string merged = node("reshape", {back}, {1, seq, dim});
  std::string o = node("linear", {merged, wo}, {1, seq, dim});
  std::string r1 = node("add", {x, o}, {1, seq, dim});
  std::string n2 = node("rms_norm", {r1, rms_w}, {1, seq, dim});
  std::string up = node("linear", {n2, w1}, {1, seq, 4 * dim});
  std::string act = node("gelu", {up}, {1, seq, 4 * dim}, {{"approximate", StrA("tanh")}});
  std::string down = node("linear", {act, w2}, {1, seq, dim});
  g.add_outputs(node("add", {r1, down}, {1, seq, dim}));
  return g;
}

TEST(PartitionTest, TransformerBlock) {
  for (int64_t seq : {5, 16}) {
    ir::Graph g = TransformerBlock(seq, 32, 4);
    std::vector<HostTensor> inputs;
    uint32_t seed = 30;
    for (const ir::Value& in : g.inputs()) {
      Shape shape(in.type().shape().begin(), in.type().shape().end());
      inputs.push_back(Random(ir::FLOAT32, shape, seed++, -0.5, 0.5));
    }
    ExpectSameSplit(g, inputs, true, absl::StrCat("transformer block seq=", seq));
  }
}

// softmax then mm: barriers and internal buffers.
ir::Graph SoftmaxMmGraph(const ir::TensorType& x, const ir::TensorType& w) {
  ir::Graph g = OneOpGraph("softmax", {x}, {x}, {{"dim", IntA(-1)}});
  g.mutable_nodes(0)->mutable_outputs(0)->set_name("s");
  g.clear_outputs();
  AddInput(g, "w", w);
  AddNode(g, "mm", {"s", "w"}, "out", x);
  g.add_outputs("out");
  return g;
}

std::vector<HostTensor> RandomInputs(const ir::Graph& g, uint32_t seed) {
  std::vector<HostTensor> inputs;
  for (const ir::Value& in : g.inputs()) {
    Shape shape(in.type().shape().begin(), in.type().shape().end());
    inputs.push_back(Random(in.type().dtype(), shape, seed++, -0.5, 0.5));
  }
  return inputs;
}

// spec: A2, A7 -- the target's worker count is any number (the NPUs x
// chiplets of an RSD group): 1, 2, 4, 8 and 16 workers give the bytes of
// the unpartitioned program, with more workers than rows too.
TEST(PartitionTest, AnyWorkerCountIsBitIdentical) {
  std::vector<std::pair<std::string, ir::Graph>> graphs;
  graphs.emplace_back("add_chain f16[13x7]",
                      AddChainGraph(Type(ir::FLOAT16, {13, 7})));
  graphs.emplace_back("add_chain f32[37x5]",
                      AddChainGraph(Type(ir::FLOAT32, {37, 5})));
  graphs.emplace_back("softmax+mm f32[19x8]",
                      SoftmaxMmGraph(Type(ir::FLOAT32, {19, 8}), Type(ir::FLOAT32, {8, 8})));
  graphs.emplace_back("transformer block seq=16", TransformerBlock(16, 32, 4));
  for (const auto& [what, g] : graphs) {
    const std::vector<HostTensor> inputs = RandomInputs(g, 60);
    auto whole = Whole().Compile(g);
    ASSERT_TRUE(whole.ok()) << whole.status();
    const auto want = RunRaw(**whole, inputs);
    for (int workers : {1, 2, 4, 8, 16}) {
      SCOPED_TRACE(absl::StrCat(what, ", ", workers, " workers"));
      Compiler compiler(
          CompilerOptions{.partition = {.partitions = workers, .min_work = 0}});
      auto parts = compiler.Compile(g);
      ASSERT_TRUE(parts.ok()) << parts.status();
      const PartitionLayout& layout = (*parts)->partition_layout();
      EXPECT_EQ(layout.partitions, workers);
      EXPECT_EQ((*parts)->num_workers(), workers);
      for (int run = 0; run < 2; ++run) {
        EXPECT_TRUE(RunRaw(**parts, inputs) == want) << "run " << run;
      }
      if (workers > 1) {
        EXPECT_EQ((*parts)->LastSliceTimes().size(), workers);
      }
    }
  }
}

// spec: A2 -- the workspace is one segment per worker; every internal
// buffer lies inside its home segment, buffers only worker 0 touches are
// homed on worker 0, and shared buffers spread over the segments.
TEST(PartitionTest, WorkspaceSegmentsAndAccessTable) {
  ir::Graph g = TransformerBlock(16, 32, 4);
  Compiler compiler(CompilerOptions{.partition = {.partitions = 4, .min_work = 0}});
  auto p = compiler.Compile(g);
  ASSERT_TRUE(p.ok()) << p.status();
  const PartitionLayout& layout = (*p)->partition_layout();
  ASSERT_EQ(layout.partitions, 4);
  ASSERT_EQ(layout.segment_bytes.size(), 4u);
  EXPECT_EQ((*p)->WorkspaceBytes(), layout.segment_bytes);
  int64_t total = 0;
  for (int64_t bytes : layout.segment_bytes) total += bytes;
  EXPECT_EQ(total, layout.scratch_bytes);
  ASSERT_FALSE(layout.scratch.empty());
  std::vector<bool> used(4, false);
  for (const ScratchBuffer& buffer : layout.scratch) {
    ASSERT_GE(buffer.home, 0);
    ASSERT_LT(buffer.home, 4);
    int64_t bytes = 4;  // float32 at most here
    for (int64_t d : buffer.shape) bytes *= d;
    EXPECT_LE(buffer.offset + bytes, layout.segment_bytes[buffer.home] + 64);
    if (buffer.accessors != kAllWorkers) {
      EXPECT_EQ(buffer.home, 0);
      EXPECT_TRUE(buffer.TouchedOnlyByHome());
    }
    used[buffer.home] = true;
  }
  EXPECT_GT(std::count(used.begin(), used.end(), true), 1)
      << "shared buffers should spread over the workers' segments";
  // A run given too little workspace is refused, not run out of bounds.
  runtime::ExecutionContext context;
  context.workers.resize(4);
  for (int w = 0; w < 4; ++w) context.workers[w].workspace_bytes = 0;
  const std::vector<HostTensor> inputs = RandomInputs(g, 70);
  std::vector<std::vector<uint8_t>> buffers;
  std::vector<runtime::BufferView> args;
  for (size_t i = 0; i < (*p)->arg_types().size(); ++i) {
    const ir::TensorType& t = (*p)->arg_types()[i];
    Shape shape(t.shape().begin(), t.shape().end());
    buffers.push_back(i < inputs.size() ? Encode(inputs[i])
                                        : std::vector<uint8_t>(NumElements(shape) *
                                                               ElementSize(t.dtype())));
  }
  for (size_t i = 0; i < buffers.size(); ++i) {
    const ir::TensorType& t = (*p)->arg_types()[i];
    Shape shape(t.shape().begin(), t.shape().end());
    args.push_back({buffers[i].data(), RuntimeDType(t.dtype()), shape,
                    ContiguousStrides(shape)});
  }
  absl::Status s = (*p)->ExecutePlaced(args, context);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("needs"), std::string::npos) << s;
}

// A forked child has none of the team's threads: it builds a team of its
// own rather than waiting forever for the parent's workers.
TEST(ChipletTeamTest, ForkedChildRebuildsItsTeam) {
  HostTensor a = Random(ir::FLOAT32, {64, 8}, 80), b = Random(ir::FLOAT32, {64, 8}, 81),
             c = Random(ir::FLOAT32, {64, 8}, 82);
  auto parts = Split().Compile(AddChainGraph(a.type()));
  ASSERT_TRUE(parts.ok()) << parts.status();
  ASSERT_EQ((*parts)->partition_layout().partitions, 4);
  const auto want = RunRaw(**parts, {a, b, c});  // The parent's team exists.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    alarm(30);  // A deadlock ends the child with SIGALRM.
    const bool same = RunRaw(**parts, {a, b, c}) == want;
    _exit(same ? 0 : 3);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "child killed by signal "
                                 << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_TRUE(RunRaw(**parts, {a, b, c}) == want);  // The parent's still works.
}

// spec: A2 -- a worker per chiplet at most: more workers per NPU than the
// profile has chiplets could not be placed, so the setting is refused up
// front, naming the variable and the valid range.
TEST(PartitionTest, PartitionsSettingIsBoundedByTheChiplets) {
  setenv("RBLN_SIM_PROFILE", "rebel100", 1);
  setenv("RBLN_COMPILER_PARTITIONS", "8", 1);
  absl::StatusOr<CompilerOptions> options = CompilerOptions::FromEnv();
  EXPECT_FALSE(options.ok());
  EXPECT_NE(options.status().message().find("RBLN_COMPILER_PARTITIONS"), std::string::npos)
      << options.status();
  EXPECT_NE(options.status().message().find("[1, 4]"), std::string::npos) << options.status();
  setenv("RBLN_COMPILER_PARTITIONS", "2", 1);
  options = CompilerOptions::FromEnv();
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->partition.partitions, 2);
  unsetenv("RBLN_COMPILER_PARTITIONS");
  unsetenv("RBLN_SIM_PROFILE");
}

// The OS threads of the chiplet teams are read when a team starts; a bad
// setting is refused when the compiler reads its environment, naming it.
TEST(PartitionTest, ChipletThreadsSettingIsValidated) {
  const char* set = std::getenv(kChipletThreadsVar);
  const std::string saved = set != nullptr ? set : "";
  setenv(kChipletThreadsVar, "zero", 1);
  absl::StatusOr<CompilerOptions> options = CompilerOptions::FromEnv();
  EXPECT_FALSE(options.ok());
  EXPECT_NE(options.status().message().find(kChipletThreadsVar), std::string::npos)
      << options.status();
  setenv(kChipletThreadsVar, "3", 1);
  EXPECT_TRUE(CompilerOptions::FromEnv().ok());
  if (saved.empty()) {
    unsetenv(kChipletThreadsVar);
  } else {
    setenv(kChipletThreadsVar, saved.c_str(), 1);
  }
}

TEST(PartitionTest, GatherOutOfRangeStillRaises) {
  HostTensor w = Random(ir::FLOAT32, {10, 4}, 40);
  HostTensor ids = Tensor(ir::INT64, {8}, {0, 1, 2, 3, 4, 5, 12, 7});
  auto program = Split().Compile(OneOpGraph("embedding", {w.type(), ids.type()},
                                            {Type(ir::FLOAT32, {8, 4})}));
  ASSERT_TRUE(program.ok()) << program.status();
  ASSERT_EQ((*program)->partition_layout().partitions, 4);
  auto out = RunProgram(**program, {w, ids});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(out.status().message().find("index 12"), std::string::npos)
      << out.status();
}

// Each chiplet worker reports into its own slot; a zero divisor in any
// slice fails the call, as P8's gather range check does.
TEST(PartitionTest, ZeroDivisionInOneSliceStillRaises) {
  const ir::TensorType t = Type(ir::INT32, {64, 64});
  HostTensor a = Tensor(ir::INT32, {64, 64}, std::vector<double>(64 * 64, 9));
  std::vector<double> divisor(64 * 64, 2);
  divisor[63 * 64 + 5] = 0;  // in the last worker's slice
  HostTensor b = Tensor(ir::INT32, {64, 64}, divisor);
  auto program = Split().Compile(OneOpGraph(
      "div", {t, t}, {t}, {{"rounding_mode", StrA("floor")}}));
  ASSERT_TRUE(program.ok()) << program.status();
  ASSERT_EQ((*program)->partition_layout().partitions, 4);
  auto out = RunProgram(**program, {a, b});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kUnknown);
  EXPECT_EQ(out.status().message().rfind("ZeroDivisionError", 0), 0)
      << out.status();
}

TEST(PartitionTest, SmallProgramsStayWhole) {
  Compiler defaults(CompilerOptions{.partition = {.partitions = 4}});
  HostTensor small = Random(ir::FLOAT32, {8, 8}, 41);
  auto p = defaults.Compile(AddGraph(small.type()));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ((*p)->partition_layout().partitions, 1);
  HostTensor big = Random(ir::FLOAT32, {1024, 1024}, 42);
  p = defaults.Compile(AddGraph(big.type()));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ((*p)->partition_layout().partitions, 4);
}

// spec: O2 -- a profiled run of a split program reports one compute slice
// per chiplet worker and phase (the stretches between its barriers; the
// profiler records one compute stage per phase); a whole program reports
// none (the executor then records one phase of worker 0).
TEST(PartitionTest, ProfiledRunReportsOneSlicePerWorkerAndPhase) {
  HostTensor a = Random(ir::FLOAT32, {64, 8}, 43), b = Random(ir::FLOAT32, {64, 8}, 44);
  auto parts = Split().Compile(AddGraph(a.type()));
  ASSERT_TRUE(parts.ok()) << parts.status();
  ASSERT_EQ((*parts)->partition_layout().partitions, 4);
  runtime::ComputeSliceSink sink;
  RunRaw(**parts, {a, b}, &sink);
  std::vector<runtime::ComputeSlice> slices = sink.Take();
  ASSERT_EQ(slices.size(), 4u);  // One op, no barrier: one phase.
  for (int w = 0; w < 4; ++w) {
    EXPECT_EQ(slices[w].worker, w);
    EXPECT_EQ(slices[w].phase, 0);
    EXPECT_LE(slices[w].start_ns, slices[w].end_ns);
  }
  auto whole = Whole().Compile(AddGraph(a.type()));
  ASSERT_TRUE(whole.ok()) << whole.status();
  RunRaw(**whole, {a, b}, &sink);
  EXPECT_TRUE(sink.Take().empty());

  // Seed 002's float16 matmul: float16 -> float32 of both operands, the
  // float32 GEMM (cblas_sgemm on worker 0, or split loops without BLAS),
  // float32 -> float16 of the result, with a barrier between each: 3 phases;
  // with oneDNN the GEMM reads the float16 operands itself: 2 phases. The
  // GEMM's split loops write the rows of C that the same worker then
  // narrows (slice-local: no barrier between them), so without BLAS: 2.
  HostTensor x = Random(ir::FLOAT16, {64, 64}, 48), y = Random(ir::FLOAT16, {64, 64}, 49);
  ir::Graph mm = OneOpGraph("mm", {x.type(), y.type()}, {Type(ir::FLOAT16, {64, 64})});
  auto f16_mm = Split().Compile(mm);
  ASSERT_TRUE(f16_mm.ok()) << f16_mm.status();
  const std::vector<std::vector<uint8_t>> unprofiled = RunRaw(**f16_mm, {x, y});
  EXPECT_EQ(RunRaw(**f16_mm, {x, y}, &sink), unprofiled);
  std::vector<runtime::ComputePhase> phases = runtime::GroupIntoPhases(sink.Take());
  // No BLAS stage (RBLN_COMPILER_BLAS=0 or no GEMM library): the GEMM is loops.
  const absl::StatusOr<bool> blas = BlasRewriteEnabled();
  const bool gemm_loops = blas.ok() && !*blas;
  const int phase_count = (*f16_mm)->uses_onednn() || gemm_loops ? 2 : 3;
  ASSERT_EQ(phases.size(), static_cast<size_t>(phase_count));
  for (int p = 0; p < phase_count; ++p) {
    SCOPED_TRACE(absl::StrCat("phase ", p));
    EXPECT_EQ(phases[p].phase, p);
    ASSERT_EQ(phases[p].slices.size(), 4u);
    for (int w = 0; w < 4; ++w) EXPECT_EQ(phases[p].slices[w].worker, w);
    // A worker leaves a barrier only after every worker arrived: every slice
    // of a phase starts after every slice of the one before ended.
    if (p > 0) EXPECT_GE(phases[p].start_ns, phases[p - 1].end_ns);
    for (const runtime::ComputeSlice& slice : phases[p].slices) {
      EXPECT_LE(slice.start_ns, slice.end_ns);
      if (p > 0) EXPECT_GE(slice.start_ns, phases[p - 1].end_ns);
    }
  }
}

TEST(PartitionTest, DiskCacheKeepsTheLayout) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/partition_disk_cache");
  std::filesystem::remove_all(dir);
  const PartitionOptions four = {.partitions = 4, .min_work = 0};
  // softmax then mm: barriers and scratch buffers.
  HostTensor x = Random(ir::FLOAT32, {6, 5}, 46), w = Random(ir::FLOAT32, {5, 5}, 47);
  ir::Graph g = OneOpGraph("softmax", {x.type()}, {x.type()}, {{"dim", IntA(-1)}});
  g.mutable_nodes(0)->mutable_outputs(0)->set_name("s");
  g.clear_outputs();
  AddInput(g, "w", w.type());
  AddNode(g, "mm", {"s", "w"}, "out", x.type());
  g.add_outputs("out");
  std::vector<std::vector<uint8_t>> want;
  {
    Compiler writer(CompilerOptions{.cache_dir = dir, .partition = four});
    auto p = writer.Compile(g);
    ASSERT_TRUE(p.ok()) << p.status();
    ASSERT_EQ((*p)->partition_layout().partitions, 4);
    EXPECT_FALSE((*p)->partition_layout().scratch.empty());
    want = RunRaw(**p, {x, w});
  }
  Compiler reader(CompilerOptions{.cache_dir = dir, .partition = four});
  auto p = reader.Compile(g);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(reader.stats().disk_hits, 1);
  EXPECT_EQ(reader.stats().compiles, 0);
  EXPECT_EQ((*p)->partition_layout().partitions, 4);
  EXPECT_TRUE(RunRaw(**p, {x, w}) == want);
  // Another partition count is another entry.
  Compiler whole(CompilerOptions{.cache_dir = dir, .partition = {.partitions = 1}});
  auto q = whole.Compile(g);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(whole.stats().disk_hits, 0);
  EXPECT_EQ((*q)->partition_layout().partitions, 1);
  EXPECT_TRUE(RunRaw(**q, {x, w}) == want);
  std::filesystem::remove_all(dir);
}

TEST(PartitionTest, CacheKeyIncludesPartitions) {
  EXPECT_NE(Compiler::TargetDescription({.partitions = 1}),
            Compiler::TargetDescription({.partitions = 4}));
  EXPECT_NE(Compiler::TargetDescription({.partitions = 4, .min_work = 0}),
            Compiler::TargetDescription({.partitions = 4}));
}

// The module after the partition stage, as text.
std::string PartitionedText(const ir::Graph& g) {
  auto context = CreateCompilerContext();
  auto module = ImportGraph(g, context.get());
  EXPECT_TRUE(module.ok()) << module.status();
  std::vector<Stage> stages = FusionStages();
  stages.insert(stages.end(), BufferizationStages().begin(),
                BufferizationStages().end());
  stages.push_back(Stage{"partition", "", nullptr, [] {
                           return CreatePartitionPass({.partitions = 4, .min_work = 0});
                         }});
  absl::Status s = RunStages(**module, stages, g.name());
  EXPECT_TRUE(s.ok()) << s;
  std::string text;
  llvm::raw_string_ostream os(text);
  (*module)->print(os);
  return os.str();
}

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos;
       at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

TEST(PartitionTest, BarriersOnlyBetweenDependentOps) {
  // One fused element-wise op: no barrier.
  HostTensor a = Random(ir::FLOAT32, {8, 8}, 43);
  std::string text = PartitionedText(AddChainGraph(a.type()));
  EXPECT_EQ(Count(text, "call @rbln_chiplet_barrier"), 0) << text;
  EXPECT_NE(text.find("rbln.partitions = 4"), std::string::npos) << text;
  // softmax then mm: the matmul reads rows other workers wrote.
  ir::Graph g;
  g.set_name("softmax_mm");
  AddInput(g, "x", Type(ir::FLOAT32, {8, 8}));
  AddInput(g, "w", Type(ir::FLOAT32, {8, 8}));
  ir::Node* n = g.add_nodes();
  n->set_op("softmax");
  n->add_inputs("x");
  (*n->mutable_attrs())["dim"] = IntA(-1);
  *n->add_outputs() = ir::Value();
  n->mutable_outputs(0)->set_name("s");
  *n->mutable_outputs(0)->mutable_type() = Type(ir::FLOAT32, {8, 8});
  AddNode(g, "mm", {"s", "w"}, "out", Type(ir::FLOAT32, {8, 8}));
  g.add_outputs("out");
  text = PartitionedText(g);
  EXPECT_GE(Count(text, "call @rbln_chiplet_barrier"), 1) << text;
  EXPECT_EQ(Count(text, "memref.alloc"), 0) << "scratch buffers live in the arena\n"
                                            << text;
  HostTensor x = Random(ir::FLOAT32, {8, 8}, 44), w = Random(ir::FLOAT32, {8, 8}, 45);
  ExpectSameSplit(g, {x, w}, true, "softmax then mm");
}

// spec: A2 -- ops split over the same rows, each reading only the rows its
// own worker wrote (a softmax's row max, exp, row sum and divide; a layer
// norm's mean, variance and normalization) run without a barrier between
// them. An op that reads rows other workers wrote still waits: the
// transpose of a softmax added to a tensor.
TEST(PartitionTest, SliceLocalChainsNeedNoBarrier) {
  HostTensor x = Random(ir::FLOAT32, {8, 16}, 50);
  ir::Graph softmax = OneOpGraph("softmax", {x.type()}, {x.type()}, {{"dim", IntA(-1)}});
  std::string text = PartitionedText(softmax);
  EXPECT_EQ(Count(text, "call @rbln_chiplet_barrier"), 0) << text;
  HostTensor w = Random(ir::FLOAT32, {16}, 51), b = Random(ir::FLOAT32, {16}, 52);
  ir::Graph norm = OneOpGraph("layer_norm", {x.type(), w.type(), b.type()}, {x.type()},
                              {{"normalized_ndim", IntA(1)}, {"eps", FloatA(1e-5)}});
  text = PartitionedText(norm);
  EXPECT_EQ(Count(text, "call @rbln_chiplet_barrier"), 0) << text;
  ExpectSameSplit(norm, {x, w, b}, true, "layer_norm without barriers");

  const ir::TensorType square = Type(ir::FLOAT32, {8, 8});
  ir::Graph g = OneOpGraph("softmax", {square}, {square}, {{"dim", IntA(-1)}});
  g.mutable_nodes(0)->mutable_outputs(0)->set_name("s");
  g.clear_outputs();
  AddNode(g, "transpose", {"s"}, "st", square);
  (*g.mutable_nodes(1)->mutable_attrs())["dim0"] = IntA(0);
  (*g.mutable_nodes(1)->mutable_attrs())["dim1"] = IntA(1);
  AddNode(g, "add", {"st", "in0"}, "out", square);
  g.add_outputs("out");
  text = PartitionedText(g);
  EXPECT_GE(Count(text, "call @rbln_chiplet_barrier"), 1) << text;
  HostTensor y = Random(ir::FLOAT32, {8, 8}, 53);
  ExpectSameSplit(g, {y}, true, "softmax, transposed, plus its input");
}

// spec: A2 -- a static KV cache's update: index_copy of one row at a position
// an earlier op computes (cache_position = arange + the cache's length).
// The position's load is a top-level read every worker makes (it used to
// keep the whole program on one worker); it waits for the add that writes it.
TEST(PartitionTest, OneRowIndexCopyAtAComputedPosition) {
  HostTensor cache = Random(ir::FLOAT32, {6, 9, 5}, 24);
  HostTensor length = Tensor(ir::INT64, {1}, {3});
  HostTensor one = Tensor(ir::INT64, {1}, {1});
  HostTensor row = Random(ir::FLOAT32, {6, 1, 5}, 25);
  ir::Graph g;
  g.set_name("kv_cache_update");
  AddInput(g, "cache", cache.type());
  AddInput(g, "length", length.type());
  AddInput(g, "one", one.type());
  AddInput(g, "row", row.type());
  AddNode(g, "add", {"length", "one"}, "position", length.type());
  AddNode(g, "index_copy", {"cache", "position", "row"}, "updated", cache.type());
  (*g.mutable_nodes(1)->mutable_attrs())["dim"] = IntA(1);
  AddNode(g, "mul", {"updated", "updated"}, "out", cache.type());
  g.add_outputs("updated");
  g.add_outputs("out");
  const std::string text = PartitionedText(g);
  EXPECT_NE(text.find("rbln.partitions = 4"), std::string::npos) << text;
  EXPECT_GE(Count(text, "call @rbln_chiplet_barrier"), 1) << text;
  ExpectSameSplit(g, {cache, length, one, row}, true, "one-row index_copy");
}

TEST(ChipletTeamTest, BarrierSeparatesPhases) {
  ChipletTeam team(4);
  for (int round = 0; round < 200; ++round) {
    std::vector<std::atomic<int>> slots(4);
    std::vector<int> seen(4, 0);
    std::vector<absl::Duration> busy;
    team.Run(
        [&](int w) {
          slots[w].store(round + w, std::memory_order_relaxed);
          rbln_chiplet_barrier();
          int sum = 0;
          for (auto& s : slots) sum += s.load(std::memory_order_relaxed);
          seen[w] = sum;
          rbln_chiplet_barrier();
          slots[w].store(-1, std::memory_order_relaxed);
        },
        &busy);
    for (int w = 0; w < 4; ++w) {
      ASSERT_EQ(seen[w], 4 * round + 6) << "round " << round << " worker " << w;
    }
    ASSERT_EQ(busy.size(), 4u);
  }
  // Outside a job the barrier does nothing.
  rbln_chiplet_barrier();
}

}  // namespace
}  // namespace rbln::compiler::testing
