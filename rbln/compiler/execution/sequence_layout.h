// How a program made of segments (ir/graph_segments.h) runs: the buffer
// behind each argument of each segment's program, and the workspace that
// holds the values passed between segments.
//
// A value that crosses segments lives in the caller's buffer when it is a
// graph input or output, else in an intermediate buffer of the workspace.
// Intermediates whose lifetimes (first writing step to last reading step)
// do not overlap share memory; they spread over the workers' workspace
// segments (least filled first), as the partition pass spreads shared
// scratch. After them, each worker's segment holds the largest workspace
// any step needs of that worker; steps run one after the other, so they
// share it. Graph outputs no step writes (a graph input returned as is, a
// value returned twice, an update's value) are copied after the last step.
// A segment that applies an update (ir::Segment) writes the input's own
// argument buffer, and later steps read the update's value there.
#ifndef RBLN_COMPILER_EXECUTION_SEQUENCE_LAYOUT_H_
#define RBLN_COMPILER_EXECUTION_SEQUENCE_LAYOUT_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "rbln/compiler/ir/graph.pb.h"
#include "rbln/compiler/ir/graph_segments.h"

namespace rbln::compiler {

// A buffer of the sequence: the caller's argument `index` (inputs, then
// outputs), or intermediate `index`.
struct SequenceBufferRef {
  enum class Kind { kArgument, kIntermediate };
  Kind kind = Kind::kArgument;
  int index = 0;
};

struct SequenceIntermediate {
  ir::TensorType type;
  int home = 0;        // the worker whose workspace segment holds it
  int64_t offset = 0;  // bytes into that segment
};

struct SequenceLayout {
  // Per step (segment): its program's inputs, then its outputs.
  std::vector<std::vector<SequenceBufferRef>> step_args;
  std::vector<SequenceIntermediate> intermediates;
  // Per worker: the whole segment, and where the steps' own workspace
  // starts in it.
  std::vector<int64_t> segment_bytes;
  std::vector<int64_t> step_workspace_offset;
  // Graph outputs written after the steps: (output argument, source).
  std::vector<std::pair<int, SequenceBufferRef>> copies;
};

// `step_workspace[s]` is the workspace per worker that step s's program
// needs (as CompiledProgram::WorkspaceBytes(); may be empty); `workers` is
// the sequence's worker count (the most any step uses).
absl::StatusOr<SequenceLayout> PlanSequenceLayout(
    const ir::Graph& graph, absl::Span<const ir::Segment> segments,
    absl::Span<const std::vector<int64_t>> step_workspace, int workers);

// Bytes of a dense tensor of `type`.
int64_t DenseBytes(const ir::TensorType& type);

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_EXECUTION_SEQUENCE_LAYOUT_H_
