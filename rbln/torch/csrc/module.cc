// torch_rbln._C: the Python entry points of the backend. Loading this module
// also runs the static registrations of the guard, allocator, hooks and
// kernels that live in the same shared object.
#include <pybind11/pybind11.h>
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <c10/util/Exception.h>
#include <torch/csrc/utils/pybind.h>  // at::Generator <-> torch.Generator

#include <map>
#include <memory>
#include <tuple>
#include <vector>
#include <string>

#include "absl/synchronization/mutex.h"
#include "rbln/compiler/compiler.h"
#include "rbln/core/counters.h"
#include "rbln/core/device_profile.h"
#include "rbln/runtime/device_event.h"
#include "rbln/torch/csrc/device_state.h"
#include "rbln/torch/csrc/dispatch/device_dtypes.h"
#include "rbln/torch/csrc/dynamo/graph_program.h"
#include "rbln/torch/csrc/fallback_policy.h"
#include "rbln/torch/csrc/memory/device_allocator.h"
#include "rbln/torch/csrc/memory/memory_snapshot_bindings.h"
#include "rbln/torch/csrc/memory/pinned_host_allocator.h"
#include "rbln/torch/csrc/profiler/explain_bindings.h"
#include "rbln/torch/csrc/python_errors.h"
#include "rbln/torch/csrc/rng/generator.h"
#include "rbln/torch/csrc/streams/streams.h"
#include "rbln/torch/csrc/streams/sync_debug.h"

namespace py = pybind11;

namespace rbln::torch_backend {
namespace {

// A SyncOpScope for the duration of a Python `with` block.
class SyncOpScopeHolder {
 public:
  explicit SyncOpScopeHolder(std::string op) : op_(std::move(op)) {}
  void Enter() { scope_ = std::make_unique<SyncOpScope>(op_); }
  void Exit() { scope_.reset(); }

 private:
  std::string op_;
  std::unique_ptr<SyncOpScope> scope_;
};

// Wraps `fn` so that c10 errors become the matching Python exceptions
// (python_errors.h). Pass captureless lambdas with a unary +.
template <typename R, typename... Args>
std::function<R(Args...)> Translated(R (*fn)(Args...)) {
  return [fn](Args... args) -> R { return CallWithPythonErrors([&] { return fn(args...); }); };
}

// torch.cuda.memory_stats()-style keys: "<stat>.all.<current|peak|...>".
py::dict StatsDict(const runtime::AllocatorStats& s) {
  py::dict d;
  const std::pair<const char*, const runtime::Stat*> stats[] = {
      {"allocation", &s.allocation},
      {"segment", &s.segment},
      {"active", &s.active},
      {"inactive_split", &s.inactive_split},
      {"allocated_bytes", &s.allocated_bytes},
      {"reserved_bytes", &s.reserved_bytes},
      {"active_bytes", &s.active_bytes},
      {"inactive_split_bytes", &s.inactive_split_bytes},
      {"requested_bytes", &s.requested_bytes},
      // Buffers of cached compiled programs: reserved, not allocated (E2).
      {"program", &s.program},
      {"program_bytes", &s.program_bytes},
  };
  for (const auto& [name, stat] : stats) {
    const std::string prefix = std::string(name) + ".all.";
    d[py::str(prefix + "current")] = stat->current;
    d[py::str(prefix + "peak")] = stat->peak;
    d[py::str(prefix + "allocated")] = stat->allocated;
    d[py::str(prefix + "freed")] = stat->freed;
  }
  d["num_alloc_retries"] = s.num_alloc_retries;
  d["num_ooms"] = s.num_ooms;
  d["num_device_alloc"] = s.num_device_alloc;
  d["num_device_free"] = s.num_device_free;
  return d;
}

DevicePlan PlanOrThrow() {
  absl::StatusOr<DevicePlan> plan = CurrentPlan();
  if (!plan.ok()) ThrowStatus(plan.status());
  return *std::move(plan);
}

py::dict ProfileDict() {
  const DevicePlan plan = PlanOrThrow();
  const DeviceProfile* p = &plan.profile;
  py::dict d;
  d["name"] = p->name;
  d["num_npus"] = p->num_npus;
  d["chiplets_per_npu"] = p->chiplets_per_npu;
  d["memory_per_chiplet"] = p->memory_per_chiplet;
  d["allocation_unit"] = p->allocation_unit;
  return d;
}

PYBIND11_MODULE(_C, m) {
  m.doc() = "torch-rbln: PrivateUse1 backend for the simulated RBLN NPU";
  // Debian's abseil checks every Mutex acquisition for lock-order cycles,
  // about a quarter of an allocator call; the runtime's lock order is fixed.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  m.def("_device_count", Translated(+[] { return static_cast<int>(DeviceCount()); }));
  m.def("_current_device", [] { return static_cast<int>(CurrentDevice()); });
  m.def("_set_device", Translated(+[](int index) {
          SetCurrentDevice(static_cast<c10::DeviceIndex>(index));
        }));
  m.def("_check_device_index", Translated(+[](int index) {
          CheckDeviceIndex(static_cast<c10::DeviceIndex>(index));
        }));
  m.def("_synchronize", Translated(+[](int index) {
          // Waits for every stream of the device: pending asynchronous
          // transfers, fences, event markers (SPEC M3). Commits the runtime.
          CheckSynchronize("torch.rbln.synchronize()",
                           c10::Device(c10::DeviceType::PrivateUse1,
                                       static_cast<c10::DeviceIndex>(index)));
          SynchronizeDeviceStreams(static_cast<c10::DeviceIndex>(index));
        }));
  // Streams (SPEC M1): this thread's current stream id on a device, and
  // making one current; torch_rbln.streams wraps them as torch.Stream.
  m.def("_current_stream_id", Translated(+[](int index) {
          CheckDeviceIndex(static_cast<c10::DeviceIndex>(index));
          return static_cast<int64_t>(
              CurrentStream(static_cast<c10::DeviceIndex>(index)).id());
        }));
  m.def("_set_stream", Translated(+[](int64_t id, int index) {
          ExchangeStream(c10::Stream(c10::Stream::UNSAFE,
                                     c10::Device(c10::DeviceType::PrivateUse1,
                                                 static_cast<c10::DeviceIndex>(index)),
                                     id));
        }));
  // Event.elapsed_time between two torch.rbln.Events, by their event_id
  // (the runtime::DeviceEvent the guard made; 0 if never recorded).
  m.def("_event_elapsed_ms", Translated(+[](uintptr_t start, uintptr_t end) {
          TORCH_CHECK(start != 0 && end != 0,
                      "rbln: elapsed_time needs both events recorded; call "
                      "record() on each first");
          absl::StatusOr<double> ms = runtime::DeviceEvent::ElapsedMs(
              *reinterpret_cast<const runtime::DeviceEvent*>(start),
              *reinterpret_cast<const runtime::DeviceEvent*>(end));
          if (!ms.ok()) ThrowStatus(ms.status());
          return *ms;
        }));
  m.def("_is_committed", &RuntimeCommitted);
  // torch.rbln.init(): commits the device mapping (SPEC A6).
  m.def("_init", Translated(+[] { (void)RuntimeOrThrow(); }));
  // torch.rbln.set_sync_debug_mode / get_sync_debug_mode (sync_debug.h).
  m.def("_set_sync_debug_mode",
        [](int mode) { SetSyncDebugMode(static_cast<SyncDebugMode>(mode)); });
  m.def("_get_sync_debug_mode", [] { return static_cast<int>(GetSyncDebugMode()); });
  // `with _SyncOpScope("print(tensor)"):` names Python-level host reads.
  py::class_<SyncOpScopeHolder>(m, "_SyncOpScope")
      .def(py::init<std::string>())
      .def("__enter__", &SyncOpScopeHolder::Enter)
      .def("__exit__", [](SyncOpScopeHolder& self, py::args) { self.Exit(); });
  // torch.rbln.default_generators[index] (generator.h).
  m.def("_default_generator", Translated(+[](int index) -> at::Generator {
          return DefaultGenerator(static_cast<c10::DeviceIndex>(index));
        }));
  // The fallback log's source location comes from this Python callable
  // (returns "file.py:LINE(func)" of the user's frame), called with the GIL.
  m.def("_set_source_location_provider", [](py::object fn) {
    auto holder = std::make_shared<py::object>(std::move(fn));
    SetSourceLocationProvider([holder]() -> std::string {
      py::gil_scoped_acquire gil;
      try {
        return (*holder)().cast<std::string>();
      } catch (const py::error_already_set&) {
        return "";
      }
    });
  });
  m.def("_is_in_bad_fork", &InBadFork);
  m.def("_device_profile", Translated(+[] { return ProfileDict(); }));
  m.def("_device_map", Translated(+[] {
          const DevicePlan plan = PlanOrThrow();
          py::dict d;
          d["profile"] = ProfileDict();
          d["visible_npus"] = plan.map.visible_npus;
          std::vector<std::vector<int>> devices;
          for (const LogicalDevice& dev : plan.map.devices) {
            std::vector<int> physical;
            for (int index : dev.npus) physical.push_back(plan.map.visible_npus[index]);
            devices.push_back(physical);
          }
          d["devices"] = devices;
          d["warnings"] = plan.map.warnings;
          d["committed"] = RuntimeCommitted();
          return d;
        }));
  // Per chiplet of a physical NPU: (used, free, total) bytes of device
  // memory; before the first real use nothing is used (no commit here).
  m.def("_chiplet_memory", Translated(+[](int npu) {
          const DevicePlan plan = PlanOrThrow();
          std::vector<std::tuple<uint64_t, uint64_t, uint64_t>> out;
          for (int c = 0; c < plan.profile.chiplets_per_npu; ++c) {
            const uint64_t total = plan.profile.memory_per_chiplet;
            if (RuntimeCommitted()) {
              runtime::Runtime& rt = RuntimeOrThrow();
              out.emplace_back(rt.UsedBytes(npu, c), rt.FreeBytes(npu, c), total);
            } else {
              out.emplace_back(0, total, total);
            }
          }
          return out;
        }));
  // The compiled-kernel dtypes by PyTorch name ("float16", ...).
  m.def("_compiled_kernel_dtypes", [] {
    std::vector<std::string> names;
    for (c10::ScalarType t : kCompiledKernelDtypes) names.push_back(TorchDtypeName(t));
    return names;
  });
  m.def("_counters", [] {
    std::map<std::string, int64_t> snapshot = CounterRegistry::Global().Snapshot();
    return snapshot;
  });
  // Python-side layers (e.g. the rbln-ccl process group) count their events
  // in the same registry explain() reads.
  m.def("_counter_add", [](const std::string& name, int64_t delta) {
    CounterRegistry::Global().Get(name)->Add(delta);
  });
  m.def("_storage_info", Translated(+[](uintptr_t address) {
          absl::StatusOr<runtime::StorageInfo> info =
              RuntimeOrThrow().storage().Info(address);
          if (!info.ok()) ThrowStatus(info.status());
          py::dict d;
          d["base"] = info->address;
          d["nbytes"] = info->nbytes;
          d["npu"] = info->npu;
          d["state"] = std::string(runtime::DataStateName(info->state));
          d["has_device_memory"] = info->has_device_memory;
          d["bound"] = info->bound;
          d["chiplet"] = info->chiplet;
          d["device_bytes"] = info->device_bytes;
          d["program_owned"] = info->program_owned;
          d["offload_path"] = info->offload_path;
          d["host_bytes"] = info->host_bytes;
          return d;
        }));
  m.def("_release_host_copy", Translated(+[](uintptr_t address) {
          absl::StatusOr<uint64_t> freed = RuntimeOrThrow().storage().ReleaseHostCopy(address);
          if (!freed.ok()) ThrowStatus(freed.status());
          return *freed;
        }));
  m.def("_bind_device_memory", Translated(+[](uintptr_t address, int index) {
          // Errors name the logical device, as an eager op's do.
          ThrowIfErrorOn(c10::Device(c10::DeviceType::PrivateUse1, index),
                         RuntimeOrThrow().storage().Bind(address));
        }));
  // Caching-allocator statistics of a physical NPU: its exact totals and one
  // dict per chiplet, keyed like torch.cuda.memory_stats().
  m.def("_memory_stats", Translated(+[](int npu) {
          py::dict out;
          py::list chiplets;
          const DevicePlan plan = PlanOrThrow();
          if (!RuntimeCommitted()) {
            out["total"] = StatsDict(runtime::AllocatorStats());
            for (int c = 0; c < plan.profile.chiplets_per_npu; ++c) {
              chiplets.append(StatsDict(runtime::AllocatorStats()));
            }
          } else {
            runtime::Runtime& rt = RuntimeOrThrow();
            out["total"] = StatsDict(rt.NpuStats(npu));
            for (int c = 0; c < plan.profile.chiplets_per_npu; ++c) {
              chiplets.append(StatsDict(rt.ChipletStats(npu, c)));
            }
          }
          out["chiplets"] = chiplets;
          return out;
        }));
  m.def("_memory_snapshot", Translated(+[](int npu) {
          py::list segments;
          if (!RuntimeCommitted()) return segments;
          runtime::Runtime& rt = RuntimeOrThrow();
          for (int c = 0; c < rt.profile().chiplets_per_npu; ++c) {
            for (const runtime::SegmentInfo& seg : rt.ChipletSnapshot(npu, c)) {
              py::dict d;
              d["chiplet"] = c;
              d["offset"] = seg.offset;
              d["total_size"] = seg.size;
              d["segment_type"] = seg.small_pool ? "small" : "large";
              py::list blocks;
              uint64_t allocated = 0;
              for (const runtime::BlockInfo& b : seg.blocks) {
                py::dict bd;
                bd["offset"] = b.offset;
                bd["size"] = b.size;
                bd["requested_size"] = b.requested;
                bd["state"] = b.allocated ? "active_allocated" : "inactive";
                if (b.allocated) allocated += b.size;
                blocks.append(bd);
              }
              d["allocated_size"] = allocated;
              d["blocks"] = blocks;
              segments.append(d);
            }
          }
          return segments;
        }));
  // set_per_process_memory_fraction: a real use (commits), as CUDA's inits.
  m.def("_set_memory_fraction", Translated(+[](int npu, double fraction) {
          ThrowIfError(RuntimeOrThrow().SetMemoryFraction(npu, fraction));
        }));
  m.def("_memory_fraction", Translated(+[](int npu) {
          return RuntimeCommitted() ? RuntimeOrThrow().MemoryFraction(npu) : 1.0;
        }));
  // caching_allocator_alloc/_delete: a storage of the device allocator,
  // bound to device memory at once so it counts as allocated.
  m.def("_caching_allocator_alloc", Translated(+[](size_t size, int index) {
          const c10::DeviceGuard guard(
              c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(index)));
          void* ptr = GetDeviceAllocator()->raw_allocate(size);
          if (ptr != nullptr) {
            const absl::Status bound =
                RuntimeOrThrow().storage().Bind(reinterpret_cast<uintptr_t>(ptr));
            if (!bound.ok()) {
              GetDeviceAllocator()->raw_deallocate(ptr);
              ThrowStatus(bound);
            }
          }
          return reinterpret_cast<uintptr_t>(ptr);
        }));
  m.def("_caching_allocator_delete", Translated(+[](uintptr_t ptr) {
          if (ptr == 0) return;
          TORCH_CHECK_VALUE(RuntimeCommitted() &&
                                RuntimeOrThrow().storage().Info(ptr).ok(),
                            "rbln: caching_allocator_delete: 0x", std::hex, ptr,
                            " is not memory from caching_allocator_alloc");
          GetDeviceAllocator()->raw_deallocate(reinterpret_cast<void*>(ptr));
        }));
  // host_memory_stats_as_nested_dict(): torch.cuda's keys.
  m.def("_host_memory_stats", [] {
    const at::HostStats s = PinnedHostStats();
    py::dict d;
    auto stat = [](const c10::CachingAllocator::Stat& st) {
      py::dict x;
      x["current"] = st.current;
      x["peak"] = st.peak;
      x["allocated"] = st.allocated;
      x["freed"] = st.freed;
      return x;
    };
    auto duration = [](const c10::CachingAllocator::DurationStat& st) {
      py::dict x;
      x["total"] = st.total;
      x["max"] = st.max;
      x["min"] = st.min;
      x["count"] = st.count;
      x["avg"] = st.count == 0 ? 0 : st.total / st.count;
      return x;
    };
    d["allocations"] = stat(s.allocations);
    d["allocated_bytes"] = stat(s.allocated_bytes);
    d["active_requests"] = stat(s.active_requests);
    d["active_bytes"] = stat(s.active_bytes);
    d["num_host_alloc"] = s.num_host_alloc;
    d["num_host_free"] = s.num_host_free;
    d["host_alloc_time"] = duration(s.host_alloc_time);
    d["host_free_time"] = duration(s.host_free_time);
    return d;
  });
  m.def("_reset_host_memory_stats", [](bool peak) { ResetPinnedHostStats(peak); });
  m.def("_empty_cache", [] {
    if (RuntimeCommitted()) RuntimeOrThrow().EmptyCache();
  });
  m.def("_reset_peak_memory_stats", Translated(+[](int npu) {
          if (RuntimeCommitted()) RuntimeOrThrow().ResetPeakStats(npu);
        }));
  m.def("_reset_accumulated_memory_stats", Translated(+[](int npu) {
          if (RuntimeCommitted()) RuntimeOrThrow().ResetAccumulatedStats(npu);
        }));
  m.def("_set_layout_like", Translated(+[](uintptr_t target, uintptr_t ref) {
          ThrowIfError(RuntimeOrThrow().storage().AlignLayout(target, ref));
        }));
  m.def("_register_pinned_region", [](uintptr_t address, size_t nbytes) {
    RegisterPinnedRegion(reinterpret_cast<const void*>(address), nbytes);
  });
  m.def("_unregister_pinned_region", [](uintptr_t address) {
    UnregisterPinnedRegion(reinterpret_cast<const void*>(address));
  });
  m.def("_set_offload_dir", [](std::string dir) {
    return runtime::StorageManager::SetThreadOffloadDir(std::move(dir));
  });
  RegisterGraphProgramBindings(m);
  RegisterExplainBindings(m);
  RegisterMemorySnapshotBindings(m);
  m.def("_compiler_cache_size",
        [] { return compiler::Compiler::Global().cache_size(); });
}

}  // namespace
}  // namespace rbln::torch_backend
