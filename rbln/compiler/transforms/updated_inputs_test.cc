// Updated inputs (graph.proto's Update): the program writes the new value
// into the input's own buffer. A KV-cache step -- write rows by index, read
// rows of the written cache -- writes just those rows (no copy of the
// cache), in a whole program and in one made of segments; reads of the
// input's old value still see it; the executor treats the input as written.
// spec: P4
#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "rbln/compiler/compiler.h"
#include "rbln/compiler/frontend/frontend.h"
#include "rbln/compiler/pipelines/mlir_setup.h"
#include "rbln/compiler/pipelines/pipelines.h"
#include "rbln/compiler/testing/op_test_util.h"
#include "rbln/runtime/runtime.h"

namespace rbln::compiler {
namespace {

using testing::AddInput;
using testing::AddNode;
using testing::Count;
using testing::Decode;
using testing::Encode;
using testing::HostTensor;
using testing::IntA;
using testing::Random;
using testing::Type;

constexpr int kSlots = 64, kWidth = 4;

void AddUpdate(ir::Graph& g, const std::string& input, const std::string& value) {
  ir::Update* u = g.add_updates();
  u->set_input(input);
  u->set_value(value);
}

// u_l = index_copy(c_l, rows, s_l); r_l = index_select(u_l, rows);
// s_{l+1} = r_l * s_l; updates c_l <- u_l; output s_layers.
ir::Graph CacheSteps(int layers) {
  ir::Graph g;
  g.set_name("cache_steps");
  const ir::TensorType cache = Type(ir::FLOAT32, {kSlots, kWidth}),
                       rows = Type(ir::INT64, {3}), row = Type(ir::FLOAT32, {3, kWidth});
  for (int l = 0; l < layers; ++l) AddInput(g, "c" + std::to_string(l), cache);
  AddInput(g, "rows", rows);
  AddInput(g, "s0", row);
  for (int l = 0; l < layers; ++l) {
    const std::string c = "c" + std::to_string(l), u = "u" + std::to_string(l),
                      r = "r" + std::to_string(l), s = "s" + std::to_string(l),
                      next = "s" + std::to_string(l + 1);
    AddNode(g, "index_copy", {c, "rows", s}, u, cache);
    AddNode(g, "index_select", {u, "rows"}, r, row);
    (*g.mutable_nodes(g.nodes_size() - 1)->mutable_attrs())["dim"] = IntA(0);
    AddNode(g, "mul", {r, s}, next, row);
    AddUpdate(g, c, u);
  }
  g.add_outputs("s" + std::to_string(layers));
  return g;
}

struct StepRun {
  std::vector<std::vector<double>> caches;  // after the run
  std::vector<double> out;
};

// Runs `program` on host buffers: caches random, rows {5, 0, 63}, s0 random.
StepRun RunSteps(const CompiledProgram& program, int layers, std::vector<HostTensor>* before) {
  std::vector<HostTensor> inputs;
  for (int l = 0; l < layers; ++l) {
    inputs.push_back(Random(ir::FLOAT32, {kSlots, kWidth}, 10 + l));
  }
  inputs.push_back(HostTensor{ir::INT64, {3}, {5, 0, 63}});
  inputs.push_back(Random(ir::FLOAT32, {3, kWidth}, 1));
  *before = inputs;
  std::vector<std::vector<uint8_t>> buffers;
  std::vector<runtime::BufferView> args;
  for (const HostTensor& t : inputs) buffers.push_back(Encode(t));
  HostTensor out{ir::FLOAT32, {3, kWidth}, std::vector<double>(3 * kWidth, 0.0)};
  buffers.push_back(Encode(out));
  for (size_t i = 0; i < buffers.size(); ++i) {
    const HostTensor& t = i < inputs.size() ? inputs[i] : out;
    args.push_back({buffers[i].data(), testing::RuntimeDType(t.dtype), t.shape,
                    testing::ContiguousStrides(t.shape)});
  }
  absl::Status s = program.Execute(args);
  EXPECT_TRUE(s.ok()) << s;
  StepRun run;
  for (int l = 0; l < layers; ++l) {
    run.caches.push_back(Decode(ir::FLOAT32, buffers[l], kSlots * kWidth));
  }
  run.out = Decode(ir::FLOAT32, buffers.back(), 3 * kWidth);
  return run;
}

// What the steps compute, on the host.
void ExpectStepResults(const StepRun& run, const std::vector<HostTensor>& in, int layers) {
  const std::vector<int> rows = {5, 0, 63};
  std::vector<double> s = in[layers + 1].values;
  for (int l = 0; l < layers; ++l) {
    std::vector<double> cache = in[l].values;
    for (int r = 0; r < 3; ++r) {
      for (int w = 0; w < kWidth; ++w) cache[rows[r] * kWidth + w] = s[r * kWidth + w];
    }
    EXPECT_EQ(run.caches[l], cache) << "cache " << l;
    for (int i = 0; i < 3 * kWidth; ++i) s[i] = static_cast<float>(s[i] * s[i]);
  }
  EXPECT_EQ(run.out, s);
}

TEST(UpdatedInputsTest, RowsAreWrittenIntoTheInputAndReadBack) {
  Compiler compiler;
  auto program = compiler.Compile(CacheSteps(1));
  ASSERT_TRUE(program.ok()) << program.status();
  EXPECT_TRUE((*program)->WritesInput(0));
  EXPECT_FALSE((*program)->WritesInput(1));
  std::vector<HostTensor> before;
  const StepRun run = RunSteps(**program, 1, &before);
  ExpectStepResults(run, before, 1);
}

// Copies of the cache's size (buffers allocated or copied) after
// bufferization of `g`.
int CacheSizedCopies(const ir::Graph& g) {
  auto context = CreateCompilerContext();
  auto module = ImportGraph(g, context.get());
  EXPECT_TRUE(module.ok()) << module.status();
  if (!module.ok()) return -1;
  EXPECT_TRUE(RunStages(**module, FusionStages(), "t").ok());
  EXPECT_TRUE(RunStages(**module, BufferizationStages(), "t").ok());
  int n = 0;
  (*module)->walk([&](mlir::Operation* op) {
    const bool copy = llvm::isa<mlir::memref::CopyOp, mlir::linalg::CopyOp>(op);
    for (mlir::Value v : op->getOperands()) {
      auto type = v.getType().dyn_cast<mlir::MemRefType>();
      if (type && copy && type.getNumElements() == kSlots * kWidth) ++n;
    }
  });
  (*module)->walk([&](mlir::memref::AllocOp alloc) {
    if (alloc.getType().getNumElements() == kSlots * kWidth) ++n;
  });
  return n;
}

TEST(UpdatedInputsTest, OneWrittenRowCopiesNoCache) {
  // One row: the index_copy's loop folds to an extract_slice/insert_slice
  // pair on the cache, which the update keeps in place too.
  ir::Graph g = CacheSteps(1);
  for (const char* name : {"rows"}) {
    for (ir::Value& v : *g.mutable_inputs()) {
      if (v.name() == name) v.mutable_type()->set_shape(0, 1);
    }
  }
  for (ir::Node& n : *g.mutable_nodes()) {
    for (ir::Value& v : *n.mutable_outputs()) {
      if (v.type().shape_size() == 2 && v.type().shape(0) == 3) v.mutable_type()->set_shape(0, 1);
    }
  }
  for (ir::Value& v : *g.mutable_inputs()) {
    if (v.name() == "s0") v.mutable_type()->set_shape(0, 1);
  }
  EXPECT_EQ(CacheSizedCopies(g), 0);
}

TEST(UpdatedInputsTest, TheCacheIsNotCopied) {
  EXPECT_EQ(CacheSizedCopies(CacheSteps(1)), 0);
}

TEST(UpdatedInputsTest, ReadsOfTheOldValueStillSeeIt) {
  // After the write, the graph also reads the input itself (its old rows).
  ir::Graph g = CacheSteps(1);
  AddNode(g, "index_select", {"c0", "rows"}, "old", Type(ir::FLOAT32, {3, kWidth}));
  (*g.mutable_nodes(g.nodes_size() - 1)->mutable_attrs())["dim"] = IntA(0);
  g.clear_outputs();
  g.add_outputs("old");
  Compiler compiler;
  auto program = compiler.Compile(g);
  ASSERT_TRUE(program.ok()) << program.status();
  std::vector<HostTensor> before;
  const StepRun run = RunSteps(**program, 1, &before);
  const std::vector<int> rows = {5, 0, 63};
  for (int r = 0; r < 3; ++r) {
    for (int w = 0; w < kWidth; ++w) {
      EXPECT_EQ(run.out[r * kWidth + w], before[0].values[rows[r] * kWidth + w]);
      EXPECT_EQ(run.caches[0][rows[r] * kWidth + w], before[2].values[r * kWidth + w]);
    }
  }
}

TEST(UpdatedInputsTest, AnInputUpdatedWithItselfIsLeftAlone) {
  // BatchNorm in eval mode: the functional op returns the running stats as
  // they were, which its converter defines as the inputs themselves (here:
  // a view to the same shape, which converts to its input).
  ir::Graph g;
  g.set_name("unchanged");
  AddInput(g, "stats", Type(ir::FLOAT32, {4}));
  AddInput(g, "x", Type(ir::FLOAT32, {4}));
  AddNode(g, "view", {"stats"}, "same", Type(ir::FLOAT32, {4}));
  AddNode(g, "add", {"x", "stats"}, "y", Type(ir::FLOAT32, {4}));
  g.add_outputs("y");
  AddUpdate(g, "stats", "same");
  const HostTensor stats = Random(ir::FLOAT32, {4}, 1), x = Random(ir::FLOAT32, {4}, 2);
  absl::StatusOr<std::vector<HostTensor>> out = testing::CompileAndRun(g, {stats, x});
  ASSERT_TRUE(out.ok()) << out.status();
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ((*out)[0].values[i], static_cast<float>(x.values[i] + stats.values[i]));
  }
}

TEST(UpdatedInputsTest, ProgramsOfSegmentsWriteEachLayersInput) {
  CompilerOptions options;
  options.segment.min_work = 1;
  options.segment.min_block_nodes = 2;
  options.segment.pieces = 1;
  Compiler compiler(options);
  auto program = compiler.Compile(CacheSteps(3));
  ASSERT_TRUE(program.ok()) << program.status();
  ASSERT_GT((*program)->steps().size(), 1u);  // Cut into segments.
  for (int l = 0; l < 3; ++l) EXPECT_TRUE((*program)->WritesInput(l));
  std::vector<HostTensor> before;
  const StepRun run = RunSteps(**program, 3, &before);
  ExpectStepResults(run, before, 3);
}

TEST(UpdatedInputsTest, TheExecutorMarksTheInputWritten) {
  DeviceProfile profile = DeviceProfile::ForFamily(DeviceFamily::kRebel100);
  profile.memory_per_chiplet = 1 << 20;
  auto rt = runtime::Runtime::Create(profile);
  ASSERT_TRUE(rt.ok());
  Compiler compiler;
  auto program = compiler.Compile(CacheSteps(1));
  ASSERT_TRUE(program.ok()) << program.status();
  const HostTensor cache = Random(ir::FLOAT32, {kSlots, kWidth}, 3);
  const HostTensor rows{ir::INT64, {3}, {5, 0, 63}};
  const HostTensor s0 = Random(ir::FLOAT32, {3, kWidth}, 4);
  std::vector<uintptr_t> bufs;
  std::vector<runtime::DeviceBuffer> args;
  for (const HostTensor* t : {&cache, &rows, &s0}) {
    const std::vector<uint8_t> bytes = Encode(*t);
    bufs.push_back(*(*rt)->storage().Create(0, bytes.size()));
    ASSERT_TRUE((*rt)->storage().WriteFromHost(bufs.back(), bytes.data(), bytes.size()).ok());
    args.push_back({bufs.back(), testing::RuntimeDType(t->dtype), t->shape,
                    testing::ContiguousStrides(t->shape)});
  }
  bufs.push_back(*(*rt)->storage().Create(0, 3 * kWidth * 4));
  args.push_back({bufs.back(), DType::kFloat32, {3, kWidth}, {kWidth, 1}});
  auto version = [&] { return (*(*rt)->storage().Info(bufs[0])).content_version; };
  const uint64_t first = version();
  ASSERT_TRUE((*rt)->executor().Run(**program, args).ok());
  EXPECT_EQ((*(*rt)->storage().Info(bufs[0])).state, runtime::DataState::kDeviceLatest);
  EXPECT_NE(version(), first);
  std::vector<uint8_t> after(kSlots * kWidth * 4);
  ASSERT_TRUE((*rt)->storage().ReadToHost(after.data(), bufs[0], after.size()).ok());
  const std::vector<double> values = Decode(ir::FLOAT32, after, kSlots * kWidth);
  EXPECT_EQ(values[5 * kWidth], s0.values[0]);
  EXPECT_EQ(values[kWidth], cache.values[kWidth]);  // Row 1 untouched.
}

}  // namespace
}  // namespace rbln::compiler
