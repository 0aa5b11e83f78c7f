#include "rbln/torch/csrc/memory/memory_snapshot_bindings.h"

#include <Python.h>
#include <pybind11/stl.h>
#include <torch/csrc/profiler/combined_traceback.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "rbln/runtime/runtime.h"
#include "rbln/torch/csrc/device_state.h"
#include "rbln/torch/csrc/memory/memory_history.h"

namespace py = pybind11;

namespace rbln::torch_backend {
namespace {

// The frames of many contexts, symbolized in one batch (stacks share frames).
class FrameTable {
 public:
  // An index for Frames(), -1 for no context.
  int Add(const runtime::AllocationContext& context) {
    if (context == nullptr) return -1;
    // Only memory_history.cc makes contexts, and they are CapturedTracebacks.
    tracebacks_.push_back(
        static_cast<torch::CapturedTraceback*>(const_cast<void*>(context.get())));
    keep_.push_back(context);
    return static_cast<int>(tracebacks_.size()) - 1;
  }
  // Needs the GIL (Python frames are read from their code objects).
  void Symbolize() {
    const torch::SymbolizedTracebacks s = torch::symbolize(tracebacks_);
    std::vector<py::dict> frames;
    frames.reserve(s.all_frames.size());
    for (const auto& f : s.all_frames) {
      py::dict d;
      d["filename"] = f.filename;
      d["line"] = f.lineno;
      d["name"] = f.funcname;
      frames.push_back(std::move(d));
    }
    for (const std::vector<uint64_t>& traceback : s.tracebacks) {
      py::list l;
      for (uint64_t i : traceback) l.append(frames.at(i));
      frames_.push_back(std::move(l));
    }
  }
  // A fresh list each time: the snapshot's users may edit it.
  py::object Frames(int index) const {
    return index < 0 ? py::list() : py::list(frames_[index]);
  }

 private:
  std::vector<torch::CapturedTraceback*> tracebacks_;
  std::vector<runtime::AllocationContext> keep_;
  std::vector<py::list> frames_;
};

struct BlockRow {
  uint64_t address;
  uint64_t size;
  uint64_t requested;
  bool allocated;
  bool program_owned;
  int frames;
};

struct SegmentRow {
  int device;
  int npu;
  int chiplet;
  uint64_t address;
  uint64_t total;
  bool small;
  std::vector<BlockRow> blocks;
};

py::dict MemorySnapshot() {
  FrameTable table;
  std::vector<SegmentRow> segments;
  size_t num_devices = 0;
  if (RuntimeCommitted()) {
    runtime::Runtime& rt = RuntimeOrThrow();
    const int chiplets = rt.profile().chiplets_per_npu;
    num_devices = static_cast<size_t>(rt.num_npus() * chiplets);
    for (int npu = 0; npu < rt.num_npus(); ++npu) {
      for (int c = 0; c < chiplets; ++c) {
        const uintptr_t base = rt.ChipletBase(npu, c);
        for (const runtime::SegmentInfo& seg : rt.ChipletSnapshot(npu, c)) {
          SegmentRow row{npu * chiplets + c, npu, c, base + seg.offset, seg.size,
                         seg.small_pool, {}};
          for (const runtime::BlockInfo& b : seg.blocks) {
            row.blocks.push_back({base + b.offset, b.size, b.requested, b.allocated,
                                  b.program_owned, table.Add(b.context)});
          }
          segments.push_back(std::move(row));
        }
      }
    }
  }
  std::vector<std::vector<MemoryTraceEntry>> traces = MemoryTraces();
  num_devices = std::max(num_devices, traces.size());
  std::vector<std::vector<int>> trace_frames(traces.size());
  for (size_t d = 0; d < traces.size(); ++d) {
    for (const MemoryTraceEntry& e : traces[d]) trace_frames[d].push_back(table.Add(e.context));
  }
  table.Symbolize();

  py::list py_segments;
  for (const SegmentRow& seg : segments) {
    py::list blocks;
    uint64_t allocated = 0, requested = 0;
    for (const BlockRow& b : seg.blocks) {
      py::dict block;
      block["address"] = b.address;
      block["size"] = b.size;
      block["requested_size"] = b.allocated ? b.requested : b.size;
      block["state"] = b.allocated ? "active_allocated" : "inactive";
      block["frames"] = table.Frames(b.frames);
      // Buffers of cached compiled programs (SPEC E2): live, but counted as
      // reserved by memory_stats().
      block["program_owned"] = b.program_owned;
      if (b.allocated) {
        allocated += b.size;
        requested += b.requested;
      }
      blocks.append(block);
    }
    py::dict d;
    d["device"] = seg.device;
    d["npu"] = seg.npu;
    d["chiplet"] = seg.chiplet;
    d["address"] = seg.address;
    d["total_size"] = seg.total;
    d["allocated_size"] = allocated;
    d["active_size"] = allocated;  // No frees wait for other streams here.
    d["requested_size"] = requested;
    d["stream"] = 0;
    d["segment_type"] = seg.small ? "small" : "large";
    d["segment_pool_id"] = py::make_tuple(0, 0);
    d["is_expandable"] = false;
    d["frames"] = py::list();
    d["blocks"] = blocks;
    py_segments.append(d);
  }
  py::list device_traces;
  for (size_t d = 0; d < num_devices; ++d) {
    py::list entries;
    if (d < traces.size()) {
      for (size_t i = 0; i < traces[d].size(); ++i) {
        const MemoryTraceEntry& e = traces[d][i];
        py::dict entry;
        entry["action"] = e.action;
        entry["addr"] = e.address;
        entry["size"] = e.size;
        entry["stream"] = 0;
        entry["time_us"] = e.time_us;
        entry["frames"] = table.Frames(trace_frames[d][i]);
        if (std::string(e.action) == "oom") entry["device_free"] = e.device_free;
        entries.append(entry);
      }
    }
    device_traces.append(entries);
  }
  py::dict out;
  out["segments"] = py_segments;
  out["device_traces"] = device_traces;
  out["allocator_settings"] = py::dict();
  return out;
}

}  // namespace

void RegisterMemorySnapshotBindings(py::module_& m) {
  m.def("_record_memory_history",
        [](const std::string& enabled, const std::string& context, const std::string& stacks,
           size_t max_entries, bool clear_history, std::vector<std::string> skip_actions) {
          MemoryHistoryOptions options;
          options.enabled = enabled;
          options.context = context;
          options.stacks = stacks;
          options.max_entries = max_entries;
          options.clear_history = clear_history;
          options.skip_actions = std::move(skip_actions);
          const absl::Status status = RecordMemoryHistory(options);
          if (!status.ok()) throw py::value_error(std::string(status.message()));
        });
  m.def("_memory_history_snapshot", &MemorySnapshot);
  // `fn(message)` runs when an rbln out-of-memory error is about to be
  // raised; a string it returns is appended to the error's message. Only in
  // threads Python knows (taking the GIL in a runtime worker thread could
  // wait for a thread that waits for that worker). None removes it.
  m.def("_set_oom_observer", [](py::object fn) {
    if (fn.is_none()) {
      SetOutOfMemoryObserver(nullptr);
      return;
    }
    auto holder = std::shared_ptr<py::object>(new py::object(std::move(fn)), [](py::object* p) {
      py::gil_scoped_acquire gil;
      delete p;
    });
    SetOutOfMemoryObserver([holder](const std::string& message) -> std::string {
      if (!Py_IsInitialized() ||
          (PyGILState_Check() == 0 && PyGILState_GetThisThreadState() == nullptr)) {
        return "";
      }
      py::gil_scoped_acquire gil;
      try {
        py::object note = (*holder)(message);
        return note.is_none() ? "" : note.cast<std::string>();
      } catch (const py::error_already_set&) {
        return "";
      }
    });
  });
}

}  // namespace rbln::torch_backend
