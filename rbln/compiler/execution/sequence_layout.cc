#include "rbln/compiler/execution/sequence_layout.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "rbln/compiler/ir/graph_util.h"
#include "rbln/core/dtype.h"

namespace rbln::compiler {
namespace {

// Intermediates start on cache-line boundaries, as partition scratch does.
constexpr int64_t kAlignment = 64;

int64_t Aligned(int64_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

// core's size of `t`; a dtype the graph enum does not name (an open proto3
// enum can carry one) takes 8 bytes, the widest, so its buffer is never short.
int64_t ElementBytes(ir::DType t) {
  const rbln::DType runtime = ir::ToRuntimeDType(t);
  if (runtime == rbln::DType::kBool && t != ir::BOOL) return 8;
  return rbln::DTypeSize(runtime);
}

// A stretch of one worker's segment that intermediates take turns in.
struct Block {
  int64_t offset = 0;
  int64_t bytes = 0;
  int free_after = -1;  // the last step that reads its current value
};

}  // namespace

int64_t DenseBytes(const ir::TensorType& type) {
  int64_t n = ElementBytes(type.dtype());
  for (int64_t d : type.shape()) n *= d;
  return n;
}

absl::StatusOr<SequenceLayout> PlanSequenceLayout(
    const ir::Graph& graph, absl::Span<const ir::Segment> segments,
    absl::Span<const std::vector<int64_t>> step_workspace, int workers) {
  workers = std::max(1, workers);
  if (step_workspace.size() != segments.size()) {
    return absl::InternalError(absl::StrFormat(
        "graph %s: %d segments but %d workspace sizes", graph.name(),
        segments.size(), step_workspace.size()));
  }
  const int num_inputs = graph.inputs_size();
  using Ref = SequenceBufferRef;
  absl::flat_hash_map<std::string, Ref> where;
  absl::flat_hash_map<std::string, const ir::TensorType*> types;
  for (int i = 0; i < num_inputs; ++i) {
    where[graph.inputs(i).name()] = Ref{Ref::Kind::kArgument, i};
    types[graph.inputs(i).name()] = &graph.inputs(i).type();
  }
  for (const ir::Node& node : graph.nodes()) {
    for (const ir::Value& v : node.outputs()) types[v.name()] = &v.type();
  }
  // An update's value lives in its input's buffer, which the segment
  // applying it writes (ir::Segment): later readers read it there.
  absl::flat_hash_map<std::string, Ref> updated;
  for (const ir::Segment& segment : segments) {
    for (const ir::Update& u : segment.updates) updated[u.value()] = where.at(u.input());
  }
  // The first occurrence of a node-defined graph output is written by the
  // step that defines it (an update's value is copied after the steps).
  absl::flat_hash_map<std::string, int> output_arg;
  for (int k = 0; k < graph.outputs_size(); ++k) {
    const std::string& out = graph.outputs(k);
    if (!where.contains(out) && !updated.contains(out)) output_arg.emplace(out, num_inputs + k);
  }
  // Lifetimes of the values that go between steps.
  struct Crossing {
    std::string value;
    int defined = 0;
    int last_read = 0;
  };
  std::vector<Crossing> crossing;
  absl::flat_hash_map<std::string, int> crossing_index;
  for (int s = 0; s < static_cast<int>(segments.size()); ++s) {
    for (const std::string& in : segments[s].inputs) {
      auto it = crossing_index.find(in);
      if (it != crossing_index.end()) crossing[it->second].last_read = s;
    }
    for (const std::string& out : segments[s].outputs) {
      if (!types.contains(out)) {
        return absl::InternalError(absl::StrFormat(
            "graph %s: segment %d outputs unknown value %%%s", graph.name(), s, out));
      }
      if (output_arg.contains(out)) {
        where[out] = Ref{Ref::Kind::kArgument, output_arg.at(out)};
        continue;
      }
      crossing_index[out] = static_cast<int>(crossing.size());
      crossing.push_back(Crossing{out, s, s});
    }
    for (const ir::Update& u : segments[s].updates) where[u.value()] = updated.at(u.value());
  }

  SequenceLayout layout;
  // Intermediates: reuse a block whose value is dead (best fit over every
  // worker's segment), else grow the least filled segment.
  std::vector<std::vector<Block>> blocks(workers);
  std::vector<int64_t> filled(workers, 0);
  for (const Crossing& c : crossing) {
    const ir::TensorType& type = *types.at(c.value);
    const int64_t bytes = Aligned(DenseBytes(type));
    int home = -1;
    Block* fit = nullptr;
    for (int w = 0; w < workers; ++w) {
      for (Block& b : blocks[w]) {
        if (b.free_after < c.defined && b.bytes >= bytes &&
            (fit == nullptr || b.bytes < fit->bytes)) {
          fit = &b;
          home = w;
        }
      }
    }
    if (fit == nullptr) {
      home = static_cast<int>(std::min_element(filled.begin(), filled.end()) - filled.begin());
      blocks[home].push_back(Block{filled[home], bytes, -1});
      filled[home] += bytes;
      fit = &blocks[home].back();
    }
    fit->free_after = c.last_read;
    where[c.value] = Ref{Ref::Kind::kIntermediate, static_cast<int>(layout.intermediates.size())};
    layout.intermediates.push_back(SequenceIntermediate{type, home, fit->offset});
  }

  for (const ir::Segment& segment : segments) {
    std::vector<Ref>& args = layout.step_args.emplace_back();
    for (const auto* names : {&segment.inputs, &segment.outputs}) {
      for (const std::string& v : *names) {
        auto it = where.find(v);
        if (it == where.end()) {
          return absl::InternalError(absl::StrFormat(
              "graph %s: a segment reads %%%s before any segment defines it",
              graph.name(), v));
        }
        args.push_back(it->second);
      }
    }
  }
  for (int k = 0; k < graph.outputs_size(); ++k) {
    const std::string& out = graph.outputs(k);
    auto arg = output_arg.find(out);
    if (arg != output_arg.end() && arg->second == num_inputs + k) continue;
    auto it = where.find(out);
    if (it == where.end()) {
      return absl::InternalError(absl::StrFormat(
          "graph %s: output %%%s is defined by no segment", graph.name(), out));
    }
    layout.copies.emplace_back(num_inputs + k, it->second);
  }

  layout.segment_bytes.assign(workers, 0);
  layout.step_workspace_offset.assign(workers, 0);
  for (int w = 0; w < workers; ++w) {
    int64_t steps = 0;
    for (const std::vector<int64_t>& bytes : step_workspace) {
      if (w < static_cast<int>(bytes.size())) steps = std::max(steps, bytes[w]);
    }
    layout.step_workspace_offset[w] = Aligned(filled[w]);
    layout.segment_bytes[w] = Aligned(filled[w]) + steps;
  }
  return layout;
}

}  // namespace rbln::compiler
