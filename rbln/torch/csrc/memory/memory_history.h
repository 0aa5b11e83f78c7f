// torch.rbln.memory._record_memory_history: what the device memory of this
// process did, for snapshots in the format of torch.cuda.memory._snapshot()
// (memory_snapshot_bindings.h builds them), which PyTorch's memory visualizer
// (torch/cuda/_memory_viz.py, pytorch.org/memory_viz) reads.
//
// Who records what. The runtime's caching allocators report every block and
// segment event (runtime/allocation_observer.h); they know nothing of Python.
// This layer gathers the Python stack (torch's CapturedTraceback, as CUDA's
// allocator does) where a tensor's storage is created -- outside every
// runtime lock, so taking the GIL there cannot deadlock -- and hands it to the
// runtime as the storage's opaque AllocationContext. The runtime keeps it
// with the storage's physical block, acquired later at the first device use
// (SPEC D1), and gives it back in that block's events and in snapshots. So a
// block's frames say which tensor it holds and where that tensor was made.
// The trace (enabled="all") is kept here, a ring of max_entries per chiplet.
// Blocks the runtime allocates for itself (program workspaces) have none.
//
// A "device" of the history is a chiplet: device i is chiplet i % C of the
// runtime's NPU i / C (C chiplets per NPU), so the visualizer shows one
// memory per chiplet.
#ifndef RBLN_TORCH_CSRC_MEMORY_HISTORY_H_
#define RBLN_TORCH_CSRC_MEMORY_HISTORY_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "rbln/runtime/allocation_observer.h"

namespace rbln::torch_backend {

struct MemoryHistoryOptions {
  // torch.cuda.memory._record_memory_history's arguments.
  std::string enabled = "all";  // "" (off), "state" or "all".
  std::string context = "all";  // "" (none), "state", "alloc" or "all".
  std::string stacks = "all";   // "python" or "all" (adds C++ frames).
  size_t max_entries = 0;       // Per chiplet; 0: unbounded.
  bool clear_history = false;
  std::vector<std::string> skip_actions;
};

// InvalidArgument naming the bad option. Takes effect at once, or at the
// runtime's commit if that has not happened yet (nothing is committed here).
absl::Status RecordMemoryHistory(const MemoryHistoryOptions& options);

// The context of a storage about to be created: its creation stack while
// recording with a context, else null. Call outside runtime locks.
runtime::AllocationContext GatherAllocationContext();

// While it lives, free events of this thread carry the stack gathered at its
// construction (context="all"); put it around a storage's release.
class FreeContextScope {
 public:
  FreeContextScope();
  ~FreeContextScope();
  FreeContextScope(const FreeContextScope&) = delete;
  FreeContextScope& operator=(const FreeContextScope&) = delete;

 private:
  bool active_ = false;
};

// One event of the trace, as torch.cuda.memory._snapshot()'s TraceEntry.
struct MemoryTraceEntry {
  const char* action;  // "alloc", "free_requested", "free_completed",
                       // "segment_alloc", "segment_free", "oom".
  uint64_t address = 0;
  uint64_t size = 0;
  uint64_t device_free = 0;  // "oom" only.
  int64_t time_us = 0;
  runtime::AllocationContext context;  // A torch::CapturedTraceback, or null.
};

// The trace of each chiplet (index: the history's device), oldest first.
std::vector<std::vector<MemoryTraceEntry>> MemoryTraces();

}  // namespace rbln::torch_backend

#endif  // RBLN_TORCH_CSRC_MEMORY_HISTORY_H_
