// Graphs compiled as segments (issue 17 item 3): a model's identical layers
// compile once, the unique work compiles on several threads, and the result
// is the same program as the whole graph compiled at once, bit for bit.
// spec: P9 (equal blocks share a program), P8 (kernel errors name the
// node), P4 (aliased arguments), A2 (partitioned segments), O2 (profiled
// phases)
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "rbln/compiler/compiler.h"
#include "rbln/compiler/testing/op_test_util.h"
#include "rbln/compiler/testing/test_graphs.h"
#include "rbln/runtime/compute_slices.h"

namespace rbln::compiler {
namespace {

using testing::DecoderStackGraph;
using testing::HostTensor;
using testing::Random;
using testing::RunProgram;

CompilerOptions SegmentedOptions(int threads = 2, int partitions = 1) {
  CompilerOptions options;
  options.compile_threads = threads;
  options.segment.pieces = threads;
  options.segment.min_work = 1;
  options.segment.min_piece_work = 4;
  options.partition.partitions = partitions;
  options.partition.min_work = 0;
  return options;
}

CompilerOptions WholeOptions() {
  CompilerOptions options;
  options.segment.min_work = 1 << 30;
  return options;
}

std::vector<HostTensor> InputsFor(const ir::Graph& g, int64_t vocab, uint32_t seed) {
  std::vector<HostTensor> inputs;
  for (const ir::Value& v : g.inputs()) {
    testing::Shape shape(v.type().shape().begin(), v.type().shape().end());
    if (v.type().dtype() == ir::INT64) {
      inputs.push_back(Random(ir::INT64, shape, seed++, 0, static_cast<double>(vocab)));
    } else {
      inputs.push_back(Random(v.type().dtype(), shape, seed++, -0.5, 0.5));
    }
  }
  return inputs;
}

void ExpectBitIdentical(const std::vector<HostTensor>& a, const std::vector<HostTensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].values.size(), b[i].values.size());
    for (size_t j = 0; j < a[i].values.size(); ++j) {
      ASSERT_EQ(a[i].values[j], b[i].values[j]) << "output " << i << " element " << j;
    }
  }
}

// Small enough that the whole 4-layer graph compiles in seconds.
ir::Graph Decoder(int layers, ir::DType dtype) {
  return DecoderStackGraph(layers, 8, 16, 2, 32, dtype);
}

TEST(CompilerSegmentsTest, LayersCompileOnceAndResultsAreBitIdentical) {
  for (const auto& [dtype, partitions] :
       std::vector<std::pair<ir::DType, int>>{{ir::FLOAT32, 1}, {ir::FLOAT16, 4}}) {
    {
      SCOPED_TRACE(::testing::Message() << "dtype " << dtype << " partitions " << partitions);
      const ir::Graph g = Decoder(4, dtype);
      CompilerOptions whole_options = WholeOptions();
      whole_options.partition = SegmentedOptions(2, partitions).partition;
      Compiler whole(whole_options);
      Compiler segmented(SegmentedOptions(2, partitions));
      auto expected_program = whole.Compile(g);
      ASSERT_TRUE(expected_program.ok()) << expected_program.status();
      EXPECT_TRUE((*expected_program)->steps().empty());
      auto program = segmented.Compile(g);
      ASSERT_TRUE(program.ok()) << program.status();

      const CompileReport& report = (*program)->compile_report();
      // Prefix, 4 x (block cut in two), suffix; 4 distinct.
      EXPECT_EQ(report.segments, 10);
      EXPECT_EQ(report.unique_segments, 4);
      EXPECT_EQ(report.codegen, 4);
      EXPECT_EQ(report.threads, 2);
      EXPECT_EQ(report.block_repeats, 4);
      EXPECT_EQ(segmented.stats().compiles, 4);
      EXPECT_GT(report.phases.llvm_codegen, absl::ZeroDuration());
      EXPECT_GT(report.phases.mlir_passes, absl::ZeroDuration());
      EXPECT_EQ((*program)->steps().size(), 10u);
      EXPECT_EQ((*program)->num_workers(), partitions);

      const std::vector<HostTensor> inputs = InputsFor(g, 32, 3);
      auto expected = RunProgram(**expected_program, inputs);
      auto got = RunProgram(**program, inputs);
      ASSERT_TRUE(expected.ok()) << expected.status();
      ASSERT_TRUE(got.ok()) << got.status();
      ExpectBitIdentical(*expected, *got);

      // Twice as deep: every segment is already compiled.
      auto deeper = segmented.Compile(Decoder(8, dtype));
      ASSERT_TRUE(deeper.ok()) << deeper.status();
      EXPECT_EQ((*deeper)->compile_report().segments, 18);
      EXPECT_EQ((*deeper)->compile_report().codegen, 0);
      EXPECT_EQ((*deeper)->compile_report().memory_hits, 4);
      EXPECT_EQ(segmented.stats().compiles, 4);
      EXPECT_TRUE(RunProgram(**deeper, InputsFor(Decoder(8, dtype), 32, 5)).ok());
    }
  }
}

TEST(CompilerSegmentsTest, SegmentsComeFromTheDiskCache) {
  const std::string dir =
      std::string(::testing::TempDir()) + "/compiler_segments_disk_cache";
  std::filesystem::remove_all(dir);
  const ir::Graph g = Decoder(3, ir::FLOAT32);
  CompilerOptions options = SegmentedOptions();
  options.cache_dir = dir;
  std::vector<HostTensor> first_result;
  const std::vector<HostTensor> inputs = InputsFor(g, 32, 11);
  {
    Compiler compiler(options);
    auto program = compiler.Compile(g);
    ASSERT_TRUE(program.ok()) << program.status();
    EXPECT_EQ((*program)->compile_report().codegen, 4);
    EXPECT_EQ(compiler.stats().disk_writes, 4);
    auto out = RunProgram(**program, inputs);
    ASSERT_TRUE(out.ok());
    first_result = *out;
  }
  Compiler later(options);  // Another process, as far as caches go.
  auto program = later.Compile(g);
  ASSERT_TRUE(program.ok()) << program.status();
  EXPECT_EQ((*program)->compile_report().codegen, 0);
  EXPECT_EQ((*program)->compile_report().disk_hits, 4);
  EXPECT_GT((*program)->compile_report().phases.disk_load, absl::ZeroDuration());
  EXPECT_EQ(later.stats().compiles, 0);
  auto out = RunProgram(**program, inputs);
  ASSERT_TRUE(out.ok());
  ExpectBitIdentical(first_result, *out);
}

// x -> six relus -> embedding(table, ids) + x: cut in two, the embedding in
// the second segment.
ir::Graph GatherLate() {
  ir::Graph g;
  g.set_name("gather_late");
  const ir::TensorType t = testing::Type(ir::FLOAT32, {4, 16});
  testing::AddInput(g, "x", t);
  testing::AddInput(g, "table", testing::Type(ir::FLOAT32, {8, 16}));
  testing::AddInput(g, "ids", testing::Type(ir::INT64, {4}));
  std::string last = "x";
  for (int i = 0; i < 6; ++i) {
    const std::string name = "r" + std::to_string(i);
    testing::AddNode(g, i % 2 ? "relu" : "neg", {last}, name, t);
    last = name;
  }
  testing::AddNode(g, "embedding", {"table", "ids"}, "e", t);
  testing::AddNode(g, "add", {"e", last}, "out", t);
  g.add_outputs("out");
  return g;
}

TEST(CompilerSegmentsTest, KernelErrorsNameTheNodeOfTheWholeGraph) {
  Compiler compiler(SegmentedOptions());
  auto program = compiler.Compile(GatherLate());
  ASSERT_TRUE(program.ok()) << program.status();
  ASSERT_EQ((*program)->steps().size(), 2u);
  std::vector<HostTensor> inputs = {Random(ir::FLOAT32, {4, 16}, 1),
                                    Random(ir::FLOAT32, {8, 16}, 2),
                                    testing::Tensor(ir::INT64, {4}, {1, 2, 9, 3})};
  auto out = RunProgram(**program, inputs);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_TRUE(absl::StrContains(out.status().message(), "embedding (node 6, output %e)"))
      << out.status();
  EXPECT_TRUE(absl::StrContains(out.status().message(), "program gather_late"))
      << out.status();
}

TEST(CompilerSegmentsTest, UnimplementedOpsAreListedForTheWholeGraph) {
  ir::Graph g = GatherLate();
  g.mutable_nodes(1)->set_op("no_such_op");
  g.mutable_nodes(7)->set_op("another_missing_op");
  Compiler compiler(SegmentedOptions());
  auto program = compiler.Compile(g);
  ASSERT_FALSE(program.ok());
  EXPECT_EQ(program.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(program.status().message(),
            "The following operators are not implemented: ['no_such_op', "
            "'another_missing_op']");
}

TEST(CompilerSegmentsTest, OutputAliasingAnInputReadsTheInputFirst) {
  Compiler compiler(SegmentedOptions());
  const ir::Graph g = GatherLate();
  auto program = compiler.Compile(g);
  ASSERT_TRUE(program.ok()) << program.status();
  std::vector<HostTensor> inputs = {Random(ir::FLOAT32, {4, 16}, 1),
                                    Random(ir::FLOAT32, {8, 16}, 2),
                                    testing::Tensor(ir::INT64, {4}, {1, 2, 7, 3})};
  auto expected = RunProgram(**program, inputs);
  ASSERT_TRUE(expected.ok()) << expected.status();
  // The output is x's own buffer (an in-place call).
  std::vector<std::vector<uint8_t>> buffers;
  for (const HostTensor& t : inputs) buffers.push_back(testing::Encode(t));
  std::vector<runtime::BufferView> args;
  for (size_t i = 0; i < inputs.size(); ++i) {
    args.push_back({buffers[i].data(), testing::RuntimeDType(inputs[i].dtype),
                    inputs[i].shape, testing::ContiguousStrides(inputs[i].shape)});
  }
  args.push_back(args[0]);
  ASSERT_TRUE((*program)->Execute(args).ok());
  EXPECT_EQ(testing::Decode(ir::FLOAT32, buffers[0], 64), (*expected)[0].values);
}

TEST(CompilerSegmentsTest, ProfiledRunReportsEveryStep) {
  Compiler compiler(SegmentedOptions(2, 4));
  const ir::Graph g = Decoder(2, ir::FLOAT32);
  auto program = compiler.Compile(g);
  ASSERT_TRUE(program.ok()) << program.status();
  const std::vector<HostTensor> inputs = InputsFor(g, 32, 7);
  std::vector<std::vector<uint8_t>> buffers;
  std::vector<runtime::BufferView> args;
  for (const ir::TensorType& t : (*program)->arg_types()) {
    testing::Shape shape(t.shape().begin(), t.shape().end());
    buffers.emplace_back(testing::NumElements(shape) * testing::ElementSize(t.dtype()) + 1);
  }
  for (size_t i = 0; i < inputs.size(); ++i) buffers[i] = testing::Encode(inputs[i]);
  for (size_t i = 0; i < buffers.size(); ++i) {
    const ir::TensorType& t = (*program)->arg_types()[i];
    testing::Shape shape(t.shape().begin(), t.shape().end());
    args.push_back({buffers[i].data(), testing::RuntimeDType(t.dtype()), shape,
                    testing::ContiguousStrides(shape)});
  }
  runtime::ComputeSliceSink sink;
  ASSERT_TRUE((*program)->ExecuteProfiled(args, &sink).ok());
  std::vector<runtime::ComputePhase> phases = runtime::GroupIntoPhases(sink.Take());
  EXPECT_GE(phases.size(), (*program)->steps().size());
  for (size_t p = 1; p < phases.size(); ++p) {
    EXPECT_GE(phases[p].start_ns, phases[p - 1].start_ns);
  }
}

TEST(CompilerSegmentsTest, SmallGraphsCompileWhole) {
  Compiler compiler{CompilerOptions()};
  auto program = compiler.Compile(GatherLate());
  ASSERT_TRUE(program.ok()) << program.status();
  EXPECT_TRUE((*program)->steps().empty());
  EXPECT_EQ((*program)->compile_report().segments, 1);
  EXPECT_EQ((*program)->compile_report().codegen, 1);
}

}  // namespace
}  // namespace rbln::compiler
