#include "rbln/compiler/ir/graph_segments.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "rbln/compiler/ir/graph_util.h"

namespace rbln::compiler::ir {
namespace {

// Ops that only reinterpret their input's shape: they cost (almost) no
// codegen, so they do not count as work.
bool IsPureView(const std::string& op) {
  static const auto* views = new absl::flat_hash_set<std::string>{
      "view", "reshape", "_unsafe_view", "expand", "unsqueeze", "squeeze",
      "alias", "detach", "t", "transpose", "permute", "lift_fresh_copy"};
  return views->contains(op);
}

// Where a value comes from: node index (or -1 - input index) and output slot.
struct Producer {
  int node = 0;
  int slot = 0;
};

// Facts about the parent graph that planning and splitting share.
class GraphIndex {
 public:
  explicit GraphIndex(const Graph& graph) : graph_(graph) {
    const int n = graph.nodes_size();
    for (int i = 0; i < graph.inputs_size(); ++i) {
      producer_[graph.inputs(i).name()] = Producer{-1 - i, 0};
      type_[graph.inputs(i).name()] = &graph.inputs(i).type();
    }
    for (int i = 0; i < n; ++i) {
      const Node& node = graph.nodes(i);
      for (int s = 0; s < node.outputs_size(); ++s) {
        producer_[node.outputs(s).name()] = Producer{i, s};
        type_[node.outputs(s).name()] = &node.outputs(s).type();
      }
    }
    for (int i = 0; i < n; ++i) {
      for (const std::string& in : graph.nodes(i).inputs()) last_use_[in] = i;
    }
    for (const std::string& out : graph.outputs()) outputs_.insert(out);
  }

  const Graph& graph() const { return graph_; }
  int size() const { return graph_.nodes_size(); }
  Producer producer(const std::string& value) const { return producer_.at(value); }
  const TensorType& type(const std::string& value) const { return *type_.at(value); }
  // The last node that reads the value; -1 when none does.
  int last_use(const std::string& value) const {
    auto it = last_use_.find(value);
    return it == last_use_.end() ? -1 : it->second;
  }
  bool is_output(const std::string& value) const { return outputs_.contains(value); }

  // Values that a cut before node c separates from a reader, for every c in
  // [0, size()]: defined by a node before c, read by a node at or after c.
  // (A graph output that no later node reads costs no buffer between
  // segments: its segment writes it into the output.)
  std::vector<int> LiveAcrossCuts() const {
    const int n = size();
    std::vector<int> diff(n + 2, 0);
    for (int i = 0; i < n; ++i) {
      for (const Value& v : graph_.nodes(i).outputs()) {
        const int last = last_use(v.name());
        if (last <= i) continue;
        ++diff[i + 1];
        --diff[last + 1];
      }
    }
    std::vector<int> live(n + 1, 0);
    int running = 0;
    for (int c = 0; c <= n; ++c) {
      running += diff[c];
      live[c] = running;
    }
    return live;
  }

 private:
  const Graph& graph_;
  absl::flat_hash_map<std::string, Producer> producer_;
  absl::flat_hash_map<std::string, const TensorType*> type_;
  absl::flat_hash_map<std::string, int> last_use_;
  absl::flat_hash_set<std::string> outputs_;
};

std::string AttrKey(const Attribute& a) {
  switch (a.value_case()) {
    case Attribute::kF:
      return absl::StrFormat("f%.17g", a.f());
    case Attribute::kI:
      return absl::StrCat("i", a.i());
    case Attribute::kS:
      return absl::StrCat("s", a.s());
    case Attribute::kB:
      return a.b() ? "b1" : "b0";
    default:
      return "?";
  }
}

// A node's op, attributes and the types it reads and writes, as one string:
// equal for nodes that would be the same node in two repeats of a block.
std::string NodeSignature(const GraphIndex& index, const Node& node) {
  std::string key = node.op();
  std::map<std::string, std::string> attrs;  // sorted: map order is not
  for (const auto& [name, attr] : node.attrs()) attrs[name] = AttrKey(attr);
  for (const auto& [name, value] : attrs) absl::StrAppend(&key, ";", name, "=", value);
  for (const std::string& in : node.inputs()) {
    absl::StrAppend(&key, ";<", TypeToText(index.type(in)));
  }
  for (const Value& out : node.outputs()) {
    absl::StrAppend(&key, ";>", TypeToText(out.type()));
  }
  return key;
}

// The nodes [begin, end) of the parent as a graph with canonical names and
// no outputs yet. `inputs` gets the parent values behind its inputs,
// `names` the canonical name of every parent value it defines or reads.
Graph SegmentBody(const GraphIndex& index, int begin, int end,
                  std::vector<std::string>* inputs,
                  absl::flat_hash_map<std::string, std::string>* names) {
  Graph body;
  int next_value = 0;
  for (int i = begin; i < end; ++i) {
    const Node& node = index.graph().nodes(i);
    Node* copy = body.add_nodes();
    copy->set_op(node.op());
    *copy->mutable_attrs() = node.attrs();
    for (const std::string& in : node.inputs()) {
      auto it = names->find(in);
      if (it == names->end()) {
        const std::string name = absl::StrCat("a", body.inputs_size());
        Value* v = body.add_inputs();
        v->set_name(name);
        *v->mutable_type() = index.type(in);
        inputs->push_back(in);
        it = names->emplace(in, name).first;
      }
      copy->add_inputs(it->second);
    }
    for (const Value& out : node.outputs()) {
      const std::string name = absl::StrCat("v", next_value++);
      (*names)[out.name()] = name;
      Value* v = copy->add_outputs();
      v->set_name(name);
      *v->mutable_type() = out.type();
    }
  }
  return body;
}

std::string BodyBytes(const GraphIndex& index, int begin, int end) {
  std::vector<std::string> inputs;
  absl::flat_hash_map<std::string, std::string> names;
  return DeterministicBytes(SegmentBody(index, begin, end, &inputs, &names));
}

int WorkOf(const std::vector<int>& prefix_work, int begin, int end) {
  return prefix_work[end] - prefix_work[begin];
}

// A run of `repeats` equal blocks of `nodes` nodes starting at `first`.
struct Repeat {
  int first = 0;
  int nodes = 0;
  int repeats = 0;
  int64_t saved = 0;  // work not compiled again
};

// Candidate repeats by the saved work, largest first: for every period P,
// the maximal runs where node i and node i + P have the same signature.
std::vector<Repeat> RepeatCandidates(const std::vector<int>& signature,
                                     const std::vector<int>& prefix_work,
                                     int min_block_nodes) {
  const int n = static_cast<int>(signature.size());
  std::vector<Repeat> found;
  for (int period = std::max(1, min_block_nodes); 2 * period <= n; ++period) {
    int i = 0;
    while (i + period < n) {
      if (signature[i] != signature[i + period]) {
        ++i;
        continue;
      }
      const int a = i;
      while (i + period < n && signature[i] == signature[i + period]) ++i;
      // Nodes [a, i + period) repeat with this period.
      const int repeats = (i + period - a) / period;
      if (repeats < 2) continue;
      const int64_t block_work = WorkOf(prefix_work, a, a + period);
      if (block_work == 0) continue;
      found.push_back(Repeat{a, period, repeats, block_work * (repeats - 1)});
    }
  }
  std::stable_sort(found.begin(), found.end(), [](const Repeat& x, const Repeat& y) {
    if (x.saved != y.saved) return x.saved > y.saved;
    return x.nodes < y.nodes;
  });
  return found;
}

// Places `parts - 1` cuts in [begin, end) at about equal work, each at the
// position nearby that the fewest values cross. Positions are absolute.
std::vector<int> BalancedCuts(int begin, int end, int parts,
                              const std::vector<int>& prefix_work,
                              const std::vector<int>& live) {
  std::vector<int> cuts;
  const int work = WorkOf(prefix_work, begin, end);
  if (parts <= 1 || work == 0) return cuts;
  const double share = static_cast<double>(work) / parts;
  int previous = begin;
  for (int j = 1; j < parts; ++j) {
    const double ideal = prefix_work[begin] + share * j;
    int best = -1;
    double best_distance = 0;
    for (int c = previous + 1; c < end; ++c) {
      const double distance = std::abs(prefix_work[c] - ideal);
      if (distance > share / 4) continue;
      if (best < 0 || live[c] < live[best] ||
          (live[c] == live[best] && distance < best_distance)) {
        best = c;
        best_distance = distance;
      }
    }
    if (best < 0) continue;
    cuts.push_back(best);
    previous = best;
  }
  return cuts;
}

int PiecesFor(int work, int target) {
  return std::max(1, static_cast<int>(static_cast<double>(work) / target + 0.5));
}

}  // namespace

SegmentPlan PlanSegments(const Graph& graph, const SegmentOptions& options) {
  SegmentPlan plan;
  plan.starts = {0};
  const int n = graph.nodes_size();
  if (!Validate(graph).ok()) return plan;
  GraphIndex index(graph);
  std::vector<int> prefix_work(n + 1, 0);
  std::vector<int> signature(n);
  absl::flat_hash_map<std::string, int> interned;
  for (int i = 0; i < n; ++i) {
    const Node& node = graph.nodes(i);
    prefix_work[i + 1] = prefix_work[i] + (IsPureView(node.op()) ? 0 : 1);
    signature[i] = interned.emplace(NodeSignature(index, node), interned.size())
                       .first->second;
  }
  if (prefix_work[n] < options.min_work) return plan;
  const std::vector<int> live = index.LiveAcrossCuts();

  // The repeated block: the candidate that saves the most work whose
  // repeats really are equal segments (the signatures do not see wiring).
  // Among rotations of the block that keep every repeat, the one whose
  // boundary the fewest values cross.
  Repeat repeat;
  int checked = 0;
  for (const Repeat& candidate :
       RepeatCandidates(signature, prefix_work, options.min_block_nodes)) {
    if (++checked > 8) break;
    const int span = candidate.nodes * candidate.repeats;
    int slack = 0;
    while (candidate.first + span + slack < n &&
           signature[candidate.first + span + slack] == signature[candidate.first + slack]) {
      ++slack;
    }
    slack = std::min(slack, candidate.nodes - 1);
    int first = candidate.first;
    for (int s = candidate.first; s <= candidate.first + slack; ++s) {
      if (live[s] < live[first]) first = s;
    }
    // The longest run of equal consecutive repeats.
    std::vector<std::string> bytes;
    for (int r = 0; r < candidate.repeats; ++r) {
      const int begin = first + r * candidate.nodes;
      bytes.push_back(BodyBytes(index, begin, begin + candidate.nodes));
    }
    int best_start = 0, best_len = 1;
    for (int r = 0, start = 0; r < candidate.repeats; ++r) {
      if (r > 0 && bytes[r] != bytes[r - 1]) start = r;
      if (r - start + 1 > best_len) {
        best_len = r - start + 1;
        best_start = start;
      }
    }
    if (best_len < 2) continue;
    repeat = Repeat{first + best_start * candidate.nodes, candidate.nodes, best_len, 0};
    break;
  }

  // Regions of unique work, and the cuts that split them into pieces.
  std::vector<int> starts;
  const int total_unique =
      repeat.repeats > 0
          ? prefix_work[n] - WorkOf(prefix_work, repeat.first,
                                    repeat.first + repeat.nodes * (repeat.repeats - 1))
          : prefix_work[n];
  const int target =
      std::max(options.min_piece_work,
               (total_unique + std::max(1, options.pieces) - 1) / std::max(1, options.pieces));
  auto split_region = [&](int begin, int end) {
    if (begin >= end) return;
    starts.push_back(begin);
    const int parts = PiecesFor(WorkOf(prefix_work, begin, end), target);
    for (int c : BalancedCuts(begin, end, parts, prefix_work, live)) starts.push_back(c);
  };
  if (repeat.repeats > 0) {
    split_region(0, repeat.first);
    std::vector<int> block_cuts;
    const int block_end = repeat.first + repeat.nodes;
    const int parts = PiecesFor(WorkOf(prefix_work, repeat.first, block_end), target);
    for (int c : BalancedCuts(repeat.first, block_end, parts, prefix_work, live)) {
      block_cuts.push_back(c - repeat.first);
    }
    for (int r = 0; r < repeat.repeats; ++r) {
      const int begin = repeat.first + r * repeat.nodes;
      starts.push_back(begin);
      for (int offset : block_cuts) starts.push_back(begin + offset);
    }
    split_region(repeat.first + repeat.nodes * repeat.repeats, n);
    plan.block_nodes = repeat.nodes;
    plan.block_repeats = repeat.repeats;
    plan.first_block = repeat.first;
  } else {
    split_region(0, n);
  }
  std::sort(starts.begin(), starts.end());
  starts.erase(std::unique(starts.begin(), starts.end()), starts.end());
  if (starts.empty() || starts[0] != 0) starts.insert(starts.begin(), 0);
  if (graph.updates_size() > 0 && starts.size() > 1 && !SplitGraph(graph, starts).ok()) {
    plan.block_nodes = plan.block_repeats = plan.first_block = 0;
    return plan;  // An update no segment can apply: one segment (starts {0}).
  }
  plan.starts = std::move(starts);
  return plan;
}

absl::StatusOr<std::vector<Segment>> SplitGraph(const Graph& graph,
                                                absl::Span<const int> starts) {
  if (absl::Status s = Validate(graph); !s.ok()) return s;
  const int n = graph.nodes_size();
  if (starts.empty() || starts[0] != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "graph %s: segment starts must begin at node 0", graph.name()));
  }
  for (size_t k = 1; k < starts.size(); ++k) {
    if (starts[k] <= starts[k - 1] || starts[k] >= n) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "graph %s: segment start %d is not ascending within [1, %d)", graph.name(),
          starts[k], n));
    }
  }
  GraphIndex index(graph);
  const int count = static_cast<int>(starts.size());
  std::vector<Segment> segments(count);
  std::vector<absl::flat_hash_map<std::string, std::string>> names(count);
  std::vector<std::string> body_bytes(count);
  auto segment_of = [&](int node) {
    return static_cast<int>(std::upper_bound(starts.begin(), starts.end(), node) -
                            starts.begin()) - 1;
  };
  for (int k = 0; k < count; ++k) {
    const int end = k + 1 < count ? starts[k + 1] : n;
    segments[k].graph = SegmentBody(index, starts[k], end, &segments[k].inputs, &names[k]);
  }
  // Each update goes to the segment defining its value (see Segment).
  absl::flat_hash_set<std::string> applied;
  for (const Update& u : graph.updates()) {
    const Producer p = index.producer(u.value());
    const int k = p.node < 0 ? -1 : segment_of(p.node);
    auto reads = [&](int s) {
      const std::vector<std::string>& in = segments[s].inputs;
      return std::find(in.begin(), in.end(), u.input()) != in.end();
    };
    bool read_later = false;
    for (int s = k + 1; k >= 0 && s < count; ++s) read_later |= reads(s);
    if (k < 0 || !reads(k) || read_later) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "graph %s: no segment can update %%%s with %%%s in place (%s)", graph.name(),
          u.input(), u.value(),
          k < 0 ? "the value is a graph input"
                : read_later ? "a later segment reads the input"
                             : "the segment defining the value does not read the input"));
    }
    Update* local = segments[k].graph.add_updates();
    local->set_input(names[k].at(u.input()));
    local->set_value(names[k].at(u.value()));
    segments[k].updates.push_back(u);
    applied.insert(u.value());
  }
  // Which (node, slot) of each segment later segments or the graph read.
  std::vector<std::vector<std::pair<int, int>>> needed(count);
  for (int k = 0; k < count; ++k) {
    const int begin = starts[k];
    const int end = k + 1 < count ? starts[k + 1] : n;
    Segment& segment = segments[k];
    body_bytes[k] = DeterministicBytes(segment.graph);
    for (int i = begin; i < end; ++i) {
      segment.nodes.push_back(i);
      const Node& node = graph.nodes(i);
      for (int s = 0; s < node.outputs_size(); ++s) {
        const std::string& value = node.outputs(s).name();
        if (!applied.contains(value) &&
            (index.last_use(value) >= end || index.is_output(value))) {
          needed[k].emplace_back(i - begin, s);
        }
      }
    }
  }
  // Equal bodies get the union of their outputs, in definition order.
  absl::flat_hash_map<std::string, std::vector<std::pair<int, int>>> by_body;
  for (int k = 0; k < count; ++k) {
    std::vector<std::pair<int, int>>& all = by_body[body_bytes[k]];
    all.insert(all.end(), needed[k].begin(), needed[k].end());
  }
  for (auto& [bytes, all] : by_body) {
    std::sort(all.begin(), all.end());
    all.erase(std::unique(all.begin(), all.end()), all.end());
  }
  for (int k = 0; k < count; ++k) {
    Segment& segment = segments[k];
    for (const auto& [local, slot] : by_body[body_bytes[k]]) {
      const std::string& parent = graph.nodes(starts[k] + local).outputs(slot).name();
      segment.outputs.push_back(parent);
      segment.graph.add_outputs(names[k].at(parent));
    }
    segment.graph.set_name(absl::StrFormat(
        "segment_%016x", StableHash(DeterministicBytes(segment.graph))));
  }
  return segments;
}

}  // namespace rbln::compiler::ir
