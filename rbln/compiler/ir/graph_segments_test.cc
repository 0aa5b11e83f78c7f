// spec: P9 (identical blocks share one program); issue 17 item 3 (compile
// time that scales with the unique work).
#include "rbln/compiler/ir/graph_segments.h"

#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rbln/compiler/ir/graph_util.h"
#include "rbln/compiler/testing/test_graphs.h"

namespace rbln::compiler::ir {
namespace {

using compiler::testing::DecoderStackGraph;

// Nodes of one decoder block (test_graphs.h): layer_norm, 3 x (linear, view,
// permute), attention, permute, reshape, linear, add, rms_norm, linear,
// gelu, linear, add (12 of them work, 8 views).
constexpr int kBlockNodes = 20;

std::set<std::string> Names(const std::vector<Segment>& segments) {
  std::set<std::string> names;
  for (const Segment& s : segments) names.insert(s.graph.name());
  return names;
}

TEST(GraphSegmentsTest, RepeatedBlocksBecomeEqualSegments) {
  for (int layers : {2, 4, 8}) {
    SCOPED_TRACE(layers);
    const Graph g = DecoderStackGraph(layers, 16, 32, 4, 64);
    SegmentOptions options;
    options.min_work = 1;
    options.pieces = 1;
    const SegmentPlan plan = PlanSegments(g, options);
    EXPECT_EQ(plan.block_nodes, kBlockNodes);
    EXPECT_EQ(plan.block_repeats, layers);
    // Prefix (embedding), one segment per block, suffix.
    ASSERT_EQ(plan.starts.size(), static_cast<size_t>(layers + 2));
    absl::StatusOr<std::vector<Segment>> segments = SplitGraph(g, plan.starts);
    ASSERT_TRUE(segments.ok()) << segments.status();
    EXPECT_EQ(Names(*segments).size(), 3u);  // prefix, block, suffix
    for (int l = 1; l < layers; ++l) {
      EXPECT_EQ(DeterministicBytes((*segments)[1].graph),
                DeterministicBytes((*segments)[1 + l].graph));
    }
    for (const Segment& s : *segments) EXPECT_TRUE(Validate(s.graph).ok());
  }
}

TEST(GraphSegmentsTest, SegmentsDoNotDependOnParentNames) {
  SegmentOptions options;
  options.min_work = 1;
  options.pieces = 1;
  Graph a = DecoderStackGraph(3, 16, 32, 4, 64);
  Graph b = DecoderStackGraph(5, 16, 32, 4, 64);
  b.set_name("other");
  auto sa = SplitGraph(a, PlanSegments(a, options).starts);
  auto sb = SplitGraph(b, PlanSegments(b, options).starts);
  ASSERT_TRUE(sa.ok() && sb.ok());
  // The block of a 3-layer and a 5-layer model is the same segment.
  EXPECT_EQ((*sa)[1].graph.name(), (*sb)[1].graph.name());
  EXPECT_EQ(Names(*sa), Names(*sb));
}

TEST(GraphSegmentsTest, BlockBoundaryIsTheResidualStream) {
  SegmentOptions options;
  options.min_work = 1;
  options.pieces = 1;
  const Graph g = DecoderStackGraph(4, 16, 32, 4, 64);
  auto segments = SplitGraph(g, PlanSegments(g, options).starts);
  ASSERT_TRUE(segments.ok());
  const Segment& block = (*segments)[2];
  // Inputs: the residual stream and the block's 8 weights; outputs: the
  // residual stream and the keys (a graph output).
  EXPECT_EQ(block.inputs.size(), 9u);
  EXPECT_EQ(block.outputs.size(), 2u);
  EXPECT_EQ(block.graph.inputs(0).name(), "a0");
  EXPECT_EQ(block.graph.nodes(0).outputs(0).name(), "v0");
  EXPECT_EQ(block.nodes.front(), 1 + kBlockNodes);
}

TEST(GraphSegmentsTest, UniqueWorkIsCutIntoPieces) {
  const Graph g = DecoderStackGraph(4, 16, 32, 4, 64);
  SegmentOptions options;
  options.min_work = 1;
  options.min_piece_work = 2;
  options.pieces = 2;
  const SegmentPlan plan = PlanSegments(g, options);
  EXPECT_EQ(plan.block_repeats, 4);
  // Each block is cut in two, at the same place in every block.
  auto segments = SplitGraph(g, plan.starts);
  ASSERT_TRUE(segments.ok());
  EXPECT_EQ(segments->size(), 2u + 4 * 2);
  EXPECT_EQ(Names(*segments).size(), 4u);
}

TEST(GraphSegmentsTest, GraphWithoutRepeatsIsCutForThreads) {
  const Graph g = DecoderStackGraph(1, 16, 32, 4, 64);
  SegmentOptions options;
  options.min_work = 1;
  options.min_piece_work = 2;
  options.pieces = 2;
  const SegmentPlan plan = PlanSegments(g, options);
  EXPECT_EQ(plan.block_repeats, 0);
  EXPECT_EQ(plan.starts.size(), 2u);
  options.pieces = 1;
  EXPECT_EQ(PlanSegments(g, options).starts.size(), 1u);
}

TEST(GraphSegmentsTest, SmallGraphsStayWhole) {
  const Graph g = DecoderStackGraph(4, 16, 32, 4, 64);
  SegmentOptions options;
  options.min_work = 1000;
  EXPECT_EQ(PlanSegments(g, options).starts, std::vector<int>{0});
}

TEST(GraphSegmentsTest, EqualSegmentsGetTheUnionOfOutputs) {
  // Two equal adds; only the second one's result is read later, yet both
  // segments output it, so that they stay one program.
  Graph g;
  g.set_name("g");
  compiler::testing::AddInput(g, "x", compiler::testing::Type(FLOAT32, {4}));
  compiler::testing::AddNode(g, "add", {"x", "x"}, "a", compiler::testing::Type(FLOAT32, {4}));
  compiler::testing::AddNode(g, "relu", {"x"}, "b", compiler::testing::Type(FLOAT32, {4}));
  compiler::testing::AddNode(g, "add", {"x", "x"}, "c", compiler::testing::Type(FLOAT32, {4}));
  compiler::testing::AddNode(g, "relu", {"c"}, "d", compiler::testing::Type(FLOAT32, {4}));
  g.add_outputs("b");
  g.add_outputs("d");
  auto segments = SplitGraph(g, {0, 1, 2, 3});
  ASSERT_TRUE(segments.ok()) << segments.status();
  EXPECT_EQ((*segments)[0].graph.name(), (*segments)[2].graph.name());
  EXPECT_EQ((*segments)[0].outputs, std::vector<std::string>{"a"});
  EXPECT_EQ((*segments)[2].outputs, std::vector<std::string>{"c"});
}

// Two layers that each write rows of their own cache input and read rows
// of the written cache: u_l = index_copy(c_l, rows, s_l), r_l =
// index_select(u_l, rows), s_{l+1} = r_l + s_l. Updates c_l <- u_l.
Graph CacheStack() {
  using compiler::testing::AddInput;
  using compiler::testing::AddNode;
  using compiler::testing::Type;
  Graph g;
  g.set_name("caches");
  const TensorType cache = Type(FLOAT32, {16, 8}), rows = Type(INT64, {2}),
                   row = Type(FLOAT32, {2, 8});
  AddInput(g, "c0", cache);
  AddInput(g, "c1", cache);
  AddInput(g, "rows", rows);
  AddInput(g, "s0", row);
  for (int l = 0; l < 2; ++l) {
    const std::string c = absl::StrCat("c", l), u = absl::StrCat("u", l),
                      r = absl::StrCat("r", l), s = absl::StrCat("s", l),
                      next = absl::StrCat("s", l + 1);
    AddNode(g, "index_copy", {c, "rows", s}, u, cache);
    AddNode(g, "index_select", {u, "rows"}, r, row);
    AddNode(g, "add", {r, s}, next, row);
    Update* update = g.add_updates();
    update->set_input(c);
    update->set_value(u);
  }
  g.add_outputs("s2");
  return g;
}

TEST(GraphSegmentsTest, AnUpdateGoesToTheSegmentDefiningItsValue) {
  const Graph g = CacheStack();
  ASSERT_TRUE(Validate(g).ok()) << Validate(g);
  // Cuts between each write and its read.
  auto segments = SplitGraph(g, {0, 1, 3, 4});
  ASSERT_TRUE(segments.ok()) << segments.status();
  const Segment& write0 = (*segments)[0];
  ASSERT_EQ(write0.updates.size(), 1u);
  EXPECT_EQ(write0.updates[0].input(), "c0");
  EXPECT_EQ(write0.updates[0].value(), "u0");
  // The written cache is no output: the next segment reads it in c0.
  EXPECT_TRUE(write0.outputs.empty());
  ASSERT_EQ(write0.graph.updates_size(), 1);
  EXPECT_TRUE(Validate(write0.graph).ok()) << Validate(write0.graph);
  EXPECT_EQ(write0.graph.updates(0).value(), write0.graph.nodes(0).outputs(0).name());
  EXPECT_EQ((*segments)[1].inputs[0], "u0");
  EXPECT_EQ((*segments)[2].updates[0].input(), "c1");
  // Equal layers stay one program, updates included.
  EXPECT_EQ((*segments)[0].graph.name(), (*segments)[2].graph.name());
}

TEST(GraphSegmentsTest, AnUpdateNoSegmentCanApplyKeepsTheGraphWhole) {
  Graph g = CacheStack();
  // The second layer also reads the first cache as it was: the first
  // layer's segment cannot write it in place.
  compiler::testing::AddNode(g, "index_select", {"c0", "rows"}, "old",
                             compiler::testing::Type(FLOAT32, {2, 8}));
  g.add_outputs("old");
  absl::StatusOr<std::vector<Segment>> segments = SplitGraph(g, {0, 3});
  ASSERT_FALSE(segments.ok());
  EXPECT_EQ(segments.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(segments.status().message()),
              ::testing::HasSubstr("no segment can update %c0 with %u0 in place (a later "
                                   "segment reads the input)"));
  SegmentOptions options;
  options.min_work = 1;
  options.min_block_nodes = 2;
  options.pieces = 4;
  EXPECT_EQ(PlanSegments(g, options).starts, std::vector<int>{0});
  // Without that read, the same options cut the graph.
  EXPECT_GT(PlanSegments(CacheStack(), options).starts.size(), 1u);
}

TEST(GraphSegmentsTest, BadStartsAreErrors) {
  const Graph g = DecoderStackGraph(1, 16, 32, 4, 64);
  EXPECT_FALSE(SplitGraph(g, {}).ok());
  EXPECT_FALSE(SplitGraph(g, {1}).ok());
  EXPECT_FALSE(SplitGraph(g, {0, 5, 5}).ok());
  EXPECT_FALSE(SplitGraph(g, {0, g.nodes_size()}).ok());
}

}  // namespace
}  // namespace rbln::compiler::ir
