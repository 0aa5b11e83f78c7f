#include "rbln/torch/csrc/memory/memory_history.h"

#include <torch/csrc/profiler/combined_traceback.h>

#include <atomic>
#include <memory>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "rbln/runtime/runtime.h"
#include "rbln/torch/csrc/device_state.h"

namespace rbln::torch_backend {
namespace {

using Action = runtime::AllocationEvent::Action;

// How much context to keep, as torch.cuda's `context` argument.
enum ContextLevel { kNoContext = 0, kState = 1, kAlloc = 2, kAll = 3 };

thread_local runtime::AllocationContext t_free_context;

class History final : public runtime::AllocationObserver {
 public:
  static History& Get() {
    static auto* history = new History();
    return *history;
  }

  absl::Status Configure(const MemoryHistoryOptions& options) ABSL_LOCKS_EXCLUDED(mu_) {
    int context = kNoContext;
    if (options.context == "state") {
      context = kState;
    } else if (options.context == "alloc") {
      context = kAlloc;
    } else if (options.context == "all") {
      context = kAll;
    } else if (!options.context.empty()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "rbln: _record_memory_history: context must be None, 'state', 'alloc' or "
          "'all', got '%s'",
          options.context));
    }
    if (!options.enabled.empty() && options.enabled != "state" && options.enabled != "all") {
      return absl::InvalidArgumentError(absl::StrFormat(
          "rbln: _record_memory_history: enabled must be None, 'state' or 'all', got '%s'",
          options.enabled));
    }
    if (options.stacks != "python" && options.stacks != "all") {
      return absl::InvalidArgumentError(absl::StrFormat(
          "rbln: _record_memory_history: stacks must be 'python' or 'all', got '%s'",
          options.stacks));
    }
    absl::flat_hash_set<Action> skip;
    bool skip_free_requested = false, skip_free_completed = false;
    for (const std::string& action : options.skip_actions) {
      if (action == "alloc") {
        skip.insert(Action::kAlloc);
      } else if (action == "free_requested") {
        skip_free_requested = true;
      } else if (action == "free_completed") {
        skip_free_completed = true;
      } else if (action == "segment_alloc") {
        skip.insert(Action::kSegmentAlloc);
      } else if (action == "segment_free") {
        skip.insert(Action::kSegmentFree);
      } else if (action == "oom") {
        skip.insert(Action::kOom);
      } else if (action != "snapshot") {  // Snapshots add no trace entry here.
        return absl::InvalidArgumentError(absl::StrFormat(
            "rbln: _record_memory_history: unknown action '%s' in skip_actions; valid: "
            "alloc, free_requested, free_completed, segment_alloc, segment_free, oom, "
            "snapshot",
            action));
      }
    }
    const bool on = !options.enabled.empty();
    {
      absl::MutexLock lock(&mu_);
      max_entries_ = options.max_entries;
      skip_ = std::move(skip);
      skip_free_requested_ = skip_free_requested;
      skip_free_completed_ = skip_free_completed;
      if (options.clear_history) rings_.clear();
    }
    cpp_stacks_.store(options.stacks == "all");
    context_.store(on ? context : kNoContext);
    trace_.store(options.enabled == "all");
    if (on && !installed_.exchange(true)) {
      // Once, for the process: the observer does nothing while trace_ is off.
      OnCommit([this](runtime::Runtime& rt) {
        chiplets_per_npu_.store(rt.profile().chiplets_per_npu);
        rt.SetAllocationObserver(this);
      });
    }
    return absl::OkStatus();
  }

  int context() const { return context_.load(std::memory_order_relaxed); }
  bool cpp_stacks() const { return cpp_stacks_.load(std::memory_order_relaxed); }

  // Runs under the chiplet allocator's lock: only this object's own lock.
  void OnAllocationEvent(const runtime::AllocationEvent& e) override ABSL_LOCKS_EXCLUDED(mu_) {
    if (!trace_.load(std::memory_order_relaxed)) return;
    const int device = e.npu * chiplets_per_npu_.load() + e.chiplet;
    MemoryTraceEntry entry{nullptr, e.address, e.size, 0, absl::ToUnixMicros(absl::Now()), nullptr};
    const int level = context();
    absl::MutexLock lock(&mu_);
    if (skip_.contains(e.action)) return;
    switch (e.action) {
      case Action::kAlloc:
        entry.action = "alloc";
        if (level >= kAlloc && e.context != nullptr) entry.context = *e.context;
        break;
      case Action::kFree:
        if (level >= kAll) entry.context = t_free_context;
        // Freed blocks are reusable at once (no cross-stream frees here).
        if (!skip_free_requested_) Push(device, {"free_requested", e.address, e.size, 0,
                                                 entry.time_us, entry.context});
        if (skip_free_completed_) return;
        entry.action = "free_completed";
        break;
      case Action::kSegmentAlloc:
        entry.action = "segment_alloc";
        break;
      case Action::kSegmentFree:
        entry.action = "segment_free";
        break;
      case Action::kOom:
        entry.action = "oom";
        entry.device_free = e.device_free;
        break;
    }
    Push(device, std::move(entry));
  }

  std::vector<std::vector<MemoryTraceEntry>> Traces() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    std::vector<std::vector<MemoryTraceEntry>> out(rings_.size());
    for (size_t d = 0; d < rings_.size(); ++d) {
      const Ring& ring = rings_[d];
      // A full ring's oldest entry is the next one to be overwritten.
      for (size_t i = 0; i < ring.entries.size(); ++i) {
        out[d].push_back(ring.entries[(ring.next + i) % ring.entries.size()]);
      }
    }
    return out;
  }

 private:
  struct Ring {
    std::vector<MemoryTraceEntry> entries;
    size_t next = 0;  // Where the next entry goes once the ring is full.
  };

  void Push(int device, MemoryTraceEntry entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (static_cast<int>(rings_.size()) <= device) rings_.resize(device + 1);
    Ring& ring = rings_[device];
    if (max_entries_ == 0 || ring.entries.size() < max_entries_) {
      ring.entries.push_back(std::move(entry));
      return;
    }
    ring.entries[ring.next] = std::move(entry);
    ring.next = (ring.next + 1) % ring.entries.size();
  }

  std::atomic<int> context_{kNoContext};
  std::atomic<bool> trace_{false};
  std::atomic<bool> cpp_stacks_{false};
  std::atomic<bool> installed_{false};
  std::atomic<int> chiplets_per_npu_{1};
  absl::Mutex mu_;
  size_t max_entries_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_set<Action> skip_ ABSL_GUARDED_BY(mu_);
  bool skip_free_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool skip_free_completed_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<Ring> rings_ ABSL_GUARDED_BY(mu_);
};

runtime::AllocationContext Gather() {
  // Python frames (the GIL is taken if this thread has a Python state;
  // threads without one give none), C++ frames with stacks="all".
  return torch::CapturedTraceback::gather(/*python=*/true, /*script=*/false,
                                          History::Get().cpp_stacks());
}

}  // namespace

absl::Status RecordMemoryHistory(const MemoryHistoryOptions& options) {
  return History::Get().Configure(options);
}

runtime::AllocationContext GatherAllocationContext() {
  if (History::Get().context() == kNoContext) return nullptr;
  return Gather();
}

FreeContextScope::FreeContextScope() {
  if (History::Get().context() < kAll) return;
  active_ = true;
  t_free_context = Gather();
}

FreeContextScope::~FreeContextScope() {
  if (active_) t_free_context.reset();
}

std::vector<std::vector<MemoryTraceEntry>> MemoryTraces() { return History::Get().Traces(); }

}  // namespace rbln::torch_backend
