// issue 17 item 3: the buffers of a program made of segments.
#include "rbln/compiler/execution/sequence_layout.h"

#include <vector>

#include "gtest/gtest.h"
#include "rbln/compiler/ir/graph_segments.h"
#include "rbln/compiler/testing/test_graphs.h"

namespace rbln::compiler {
namespace {

using testing::AddInput;
using testing::AddNode;
using testing::Type;
using Kind = SequenceBufferRef::Kind;

// x -> a -> b -> c -> d, each relu of the last; outputs d, a, d, x.
ir::Graph Chain() {
  ir::Graph g;
  g.set_name("chain");
  const ir::TensorType t = Type(ir::FLOAT32, {16});
  AddInput(g, "x", t);
  AddNode(g, "relu", {"x"}, "a", t);
  AddNode(g, "relu", {"a"}, "b", t);
  AddNode(g, "relu", {"b"}, "c", t);
  AddNode(g, "relu", {"c"}, "d", t);
  for (const char* out : {"d", "a", "d", "x"}) g.add_outputs(out);
  return g;
}

TEST(SequenceLayoutTest, ArgumentsIntermediatesAndCopies) {
  const ir::Graph g = Chain();
  auto segments = ir::SplitGraph(g, {0, 1, 2, 3});
  ASSERT_TRUE(segments.ok()) << segments.status();
  auto layout = PlanSequenceLayout(g, *segments, {{}, {}, {}, {}}, 1);
  ASSERT_TRUE(layout.ok()) << layout.status();
  // a is graph output 1 (argument 2); b and c are intermediates; d is
  // output 0 (argument 1).
  ASSERT_EQ(layout->step_args.size(), 4u);
  EXPECT_EQ(layout->step_args[0][0].kind, Kind::kArgument);
  EXPECT_EQ(layout->step_args[0][0].index, 0);
  EXPECT_EQ(layout->step_args[0][1].kind, Kind::kArgument);
  EXPECT_EQ(layout->step_args[0][1].index, 2);
  EXPECT_EQ(layout->step_args[1][1].kind, Kind::kIntermediate);
  EXPECT_EQ(layout->step_args[2][1].kind, Kind::kIntermediate);
  EXPECT_EQ(layout->step_args[3][1].kind, Kind::kArgument);
  EXPECT_EQ(layout->step_args[3][1].index, 1);
  // b dies when c is written two steps later, but c is written in the
  // step that reads b: two buffers.
  ASSERT_EQ(layout->intermediates.size(), 2u);
  EXPECT_NE(layout->intermediates[0].offset, layout->intermediates[1].offset);
  // Output 2 repeats d, output 3 is the input x.
  ASSERT_EQ(layout->copies.size(), 2u);
  EXPECT_EQ(layout->copies[0].first, 1 + 2);
  EXPECT_EQ(layout->copies[0].second.index, 1);
  EXPECT_EQ(layout->copies[1].first, 1 + 3);
  EXPECT_EQ(layout->copies[1].second.index, 0);
  EXPECT_EQ(layout->segment_bytes, std::vector<int64_t>{128});
}

TEST(SequenceLayoutTest, AnUpdatedInputHoldsItsValueForLaterSteps) {
  // c <- u = relu(c) in step 0; step 1 reads u; u is also an output.
  ir::Graph g;
  g.set_name("update");
  const ir::TensorType t = Type(ir::FLOAT32, {16});
  AddInput(g, "x", t);
  AddInput(g, "c", t);
  AddNode(g, "add", {"c", "x"}, "u", t);
  AddNode(g, "relu", {"u"}, "y", t);
  g.add_outputs("y");
  g.add_outputs("u");
  ir::Update* update = g.add_updates();
  update->set_input("c");
  update->set_value("u");
  auto segments = ir::SplitGraph(g, {0, 1});
  ASSERT_TRUE(segments.ok()) << segments.status();
  auto layout = PlanSequenceLayout(g, *segments, {{}, {}}, 1);
  ASSERT_TRUE(layout.ok()) << layout.status();
  // Step 0: inputs c, x (first use order); no outputs. Step 1 reads u in
  // c's argument and writes y (argument 2).
  ASSERT_EQ(layout->step_args[0].size(), 2u);
  ASSERT_EQ(layout->step_args[1].size(), 2u);
  EXPECT_EQ(layout->step_args[1][0].kind, Kind::kArgument);
  EXPECT_EQ(layout->step_args[1][0].index, 1);
  EXPECT_EQ(layout->step_args[1][1].index, 2);
  EXPECT_TRUE(layout->intermediates.empty());
  // Output u (argument 3) is copied from c after the steps.
  ASSERT_EQ(layout->copies.size(), 1u);
  EXPECT_EQ(layout->copies[0].first, 3);
  EXPECT_EQ(layout->copies[0].second.kind, Kind::kArgument);
  EXPECT_EQ(layout->copies[0].second.index, 1);
}

TEST(SequenceLayoutTest, DeadIntermediatesShareMemory) {
  // x -> a -> b -> c -> d -> e: b is dead once c is computed, so d reuses
  // b's buffer.
  ir::Graph g;
  g.set_name("long_chain");
  const ir::TensorType t = Type(ir::FLOAT32, {16});
  AddInput(g, "x", t);
  const char* names[] = {"a", "b", "c", "d", "e"};
  std::string last = "x";
  for (const char* n : names) {
    AddNode(g, "relu", {last}, n, t);
    last = n;
  }
  g.add_outputs("e");
  auto segments = ir::SplitGraph(g, {0, 1, 2, 3, 4});
  ASSERT_TRUE(segments.ok());
  auto layout = PlanSequenceLayout(g, *segments, {{}, {}, {}, {}, {}}, 1);
  ASSERT_TRUE(layout.ok()) << layout.status();
  ASSERT_EQ(layout->intermediates.size(), 4u);  // a, b, c, d
  EXPECT_EQ(layout->intermediates[0].offset, layout->intermediates[2].offset);
  EXPECT_EQ(layout->intermediates[1].offset, layout->intermediates[3].offset);
  EXPECT_EQ(layout->segment_bytes, std::vector<int64_t>{128});
}

TEST(SequenceLayoutTest, StepsShareTheWorkspaceAfterIntermediates) {
  const ir::Graph g = Chain();
  auto segments = ir::SplitGraph(g, {0, 1, 2, 3});
  ASSERT_TRUE(segments.ok());
  auto layout = PlanSequenceLayout(g, *segments, {{100, 0}, {}, {40, 300}, {}}, 2);
  ASSERT_TRUE(layout.ok()) << layout.status();
  // The two intermediates spread over the two workers' segments.
  EXPECT_NE(layout->intermediates[0].home, layout->intermediates[1].home);
  EXPECT_EQ(layout->step_workspace_offset, (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(layout->segment_bytes, (std::vector<int64_t>{64 + 100, 64 + 300}));
}

}  // namespace
}  // namespace rbln::compiler
