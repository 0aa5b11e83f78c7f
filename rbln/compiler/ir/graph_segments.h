// Cutting a graph into segments that compile separately (issue 17: compile
// time that scales with the unique work of a model, not its depth).
//
// A model with N identical layers should cost one layer's codegen, not N.
// PlanSegments finds the longest run of a repeated block of nodes (same
// ops, attributes and types, the same wiring; weights may differ: they are
// inputs) and cuts the graph at the block boundaries, so each repeat is a
// segment with the same bytes, which the compiler's cache compiles once. It
// also cuts the unique work (prefix, one block, suffix) into pieces of about
// equal size that compile in parallel, choosing among nearby positions the
// cut that fewest values cross. SplitGraph builds the segments' graphs with
// canonical value names, so identical segments serialize identically
// whatever the parent graph calls its values.
//
// No MLIR here: this is graph IR only.
#ifndef RBLN_COMPILER_IR_GRAPH_SEGMENTS_H_
#define RBLN_COMPILER_IR_GRAPH_SEGMENTS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "rbln/compiler/ir/graph.pb.h"

namespace rbln::compiler::ir {

struct SegmentOptions {
  // Graphs with less work stay whole (work: nodes that are not pure views).
  int min_work = 32;
  // The shortest block whose repeats are looked for, in nodes.
  int min_block_nodes = 8;
  // The unique work is cut into about this many pieces of equal work (the
  // compiler's codegen threads); no cut makes a piece of less work than
  // min_piece_work.
  int pieces = 2;
  int min_piece_work = 16;
};

struct SegmentPlan {
  // The first node of each segment, ascending; starts[0] == 0.
  std::vector<int> starts;
  // The repeated block, if one was found: its length in nodes, how often it
  // repeats and where the first repeat starts.
  int block_nodes = 0;
  int block_repeats = 0;
  int first_block = 0;
};

// Where to cut `graph`. One segment (starts == {0}) when the graph is small,
// has nothing worth cutting, or has an update no segment could apply.
SegmentPlan PlanSegments(const Graph& graph, const SegmentOptions& options);

// One segment as a graph of its own.
//
// An update of the parent (graph.proto: an input written in place) becomes
// an update of the segment that defines its value, when that segment reads
// the input and no later segment does (they would see the new bytes): the
// segment writes the input's buffer itself, the value is none of its
// outputs, and later segments that read the value read the input's buffer.
struct Segment {
  // Named "segment_<content hash>"; inputs a0, a1, ... in order of first
  // use, node outputs v0, v1, ... in order of definition.
  Graph graph;
  // The parent's index of each node of `graph`.
  std::vector<int> nodes;
  // The parent's value behind each input / output of `graph`.
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
  // The parent's updates this segment applies (parent names).
  std::vector<Update> updates;
};

// The segments that start at `starts` (ascending, starts[0] == 0). A
// segment's outputs are its values that later segments use or that are
// outputs of `graph`; segments with the same nodes get the same outputs (the
// union over them), so that they stay byte-identical. Graph outputs that no
// segment defines (graph inputs) are left to the caller. FailedPrecondition
// if an update cannot be applied by a segment (see Segment).
absl::StatusOr<std::vector<Segment>> SplitGraph(const Graph& graph,
                                                absl::Span<const int> starts);

}  // namespace rbln::compiler::ir

#endif  // RBLN_COMPILER_IR_GRAPH_SEGMENTS_H_
