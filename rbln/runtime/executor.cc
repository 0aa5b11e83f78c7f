#include "rbln/runtime/executor.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "rbln/core/status_macros.h"
#include "rbln/runtime/compute_slices.h"
#include "rbln/runtime/placement.h"
#include "rbln/runtime/profiler.h"
#include "rbln/runtime/strided_span.h"

namespace rbln::runtime {

namespace {

// The workspace segments of one run, freed when it ends.
class RunWorkspace {
 public:
  explicit RunWorkspace(PhysicalMemory* physical) : physical_(physical) {}
  ~RunWorkspace() {
    for (const DeviceAllocation& block : blocks_) {
      physical_->SetProgramOwned(block, false).IgnoreError();
      physical_->FreePhysical(block).IgnoreError();
    }
  }
  RunWorkspace(const RunWorkspace&) = delete;
  RunWorkspace& operator=(const RunWorkspace&) = delete;

  // `bytes` on the unit's own chiplet, counted as the program's memory
  // (reserved, not allocated: SPEC E2); cached on that chiplet after the run.
  absl::StatusOr<void*> Allocate(const ComputeUnit& unit, int64_t bytes) {
    RBLN_ASSIGN_OR_RETURN(
        DeviceAllocation block,
        physical_->AllocatePhysical(unit.npu, static_cast<uint64_t>(bytes),
                                    unit.chiplet, /*context=*/nullptr));
    blocks_.push_back(block);
    RBLN_RETURN_IF_ERROR(physical_->SetProgramOwned(block, true));
    return physical_->HostView(block);
  }

 private:
  PhysicalMemory* const physical_;
  std::vector<DeviceAllocation> blocks_;
};

}  // namespace

Executor::Executor(StorageManager* storage, PhysicalMemory* physical,
                   int chiplets_per_npu)
    : storage_(storage),
      physical_(physical),
      chiplets_per_npu_(chiplets_per_npu < 1 ? 1 : chiplets_per_npu),
      executions_(CounterRegistry::Global().Get("runtime/executions")),
      multi_npu_executions_(
          CounterRegistry::Global().Get("runtime/multi_npu_executions")),
      workspace_bytes_(CounterRegistry::Global().Get("runtime/workspace_bytes")) {}

Counter* Executor::UnitCounter(const ComputeUnit& unit) {
  absl::MutexLock lock(&mu_);
  Counter*& counter =
      unit_counters_[int64_t{unit.npu} * chiplets_per_npu_ + unit.chiplet];
  if (counter == nullptr) {
    counter = CounterRegistry::Global().Get(
        absl::StrCat("runtime/slices/", ComputeUnitName(unit)));
  }
  return counter;
}

absl::Status Executor::Run(const Executable& program,
                           absl::Span<const DeviceBuffer> args,
                           absl::Span<const int> group) {
  const size_t expected = program.num_inputs() + program.num_outputs();
  if (args.size() != expected) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "rbln: program %s takes %d buffers, got %d", program.DebugName(),
        expected, args.size()));
  }
  // RBLN_PROFILER=1: record this run's stages (SPEC O4).
  ProfileRecorder* const profiler = ProfileRecorder::Global();
  profile::Execution record;
  absl::StatusOr<StorageInfo> first =
      args.empty() ? absl::NotFoundError("") : storage_->Info(args[0].address);
  const int home_npu = first.ok() ? first->npu : 0;
  std::vector<int> own_npu = {home_npu};
  if (group.empty()) group = own_npu;
  RBLN_ASSIGN_OR_RETURN(
      std::vector<ComputeUnit> units,
      PlaceWorkers(program.DebugName(), program.num_workers(), group,
                   chiplets_per_npu_));
  if (profiler) {
    record.set_program(program.DebugName());
    record.set_npu(first.ok() ? first->npu : -1);
    record.set_correlation_id(ProfileRecorder::CurrentCorrelationId());
    record.set_start_ns(ProfileRecorder::NowNs());
  }
  std::vector<BufferView> views(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    const DeviceBuffer& arg = args[i];
    if (arg.sizes.size() != arg.strides.size()) {
      return absl::InvalidArgumentError("rbln: sizes and strides differ in rank");
    }
    for (int64_t stride : arg.strides) {
      if (stride < 0) {
        return absl::InvalidArgumentError("rbln: negative strides are not supported");
      }
    }
    const uint64_t nbytes = StridedSpanBytes(arg.sizes, arg.strides, DTypeSize(arg.dtype));
    const bool input = static_cast<int>(i) < program.num_inputs();
    const DeviceAccess access = !input ? DeviceAccess::kWrite
                                : program.WritesInput(static_cast<int>(i))
                                    ? DeviceAccess::kReadWrite
                                    : DeviceAccess::kRead;
    const int64_t map_start = profiler ? ProfileRecorder::NowNs() : 0;
    if (nbytes == 0) {
      // An empty tensor has no storage to map (its address may be null);
      // the kernel never dereferences it.
      views[i].data = nullptr;
    } else {
      RBLN_ASSIGN_OR_RETURN(
          views[i].data,
          storage_->MapForDevice(arg.address, nbytes, access,
                                 input ? &views[i].content_version : nullptr));
      views[i].content_address = arg.address;
    }
    if (profiler) {
      // The argument transfer stage: memory acquired, host-latest bytes uploaded.
      profile::Stage* stage = record.add_stages();
      stage->set_name(absl::StrCat("args_", i));
      stage->set_kind(profile::ARGS);
      stage->set_start_ns(map_start);
      stage->set_end_ns(ProfileRecorder::NowNs());
      stage->set_bytes(nbytes);
    }
    views[i].dtype = arg.dtype;
    views[i].sizes = arg.sizes;
    views[i].strides = arg.strides;
  }
  // Each worker's workspace segment, in its own chiplet's memory.
  const std::vector<int64_t> workspace = program.WorkspaceBytes();
  ExecutionContext context;
  context.workers.resize(units.size());
  RunWorkspace segments(physical_);
  for (size_t w = 0; w < units.size(); ++w) {
    WorkerContext& worker = context.workers[w];
    worker.unit = units[w];
    worker.workspace_bytes = w < workspace.size() ? workspace[w] : 0;
    if (worker.workspace_bytes == 0) continue;
    if (physical_ == nullptr) {
      return absl::InternalError(absl::StrFormat(
          "rbln: program %s needs workspace, but this executor has no device "
          "memory to place it in",
          program.DebugName()));
    }
    absl::StatusOr<void*> segment =
        segments.Allocate(worker.unit, worker.workspace_bytes);
    if (!segment.ok()) {
      // The allocator's message first (an out-of-memory error reads as an
      // eager one: NPU, chiplet, requested, free, cached, allocation unit),
      // then what the memory was for; the code stays (ResourceExhausted is
      // torch.OutOfMemoryError).
      absl::string_view detail = segment.status().message();
      absl::ConsumePrefix(&detail, "rbln: ");
      return absl::Status(
          segment.status().code(),
          absl::StrFormat("rbln: %s; while allocating the workspace of worker %d of "
                          "program %s (%d bytes of intermediate buffers on %s)",
                          detail, w, program.DebugName(), worker.workspace_bytes,
                          ComputeUnitName(worker.unit)));
    }
    worker.workspace = *segment;
    workspace_bytes_->Add(worker.workspace_bytes);
  }
  // Time inside the program (explain()'s "in librbln"), without mapping.
  static Counter* const execution_ns =
      CounterRegistry::Global().Get("runtime/execution_ns");
  const int64_t start = ProfileRecorder::NowNs();
  ComputeSliceSink slices;
  context.slices = profiler ? &slices : nullptr;
  RBLN_RETURN_IF_ERROR(program.ExecutePlaced(views, context));
  const int64_t end = ProfileRecorder::NowNs();
  execution_ns->Add(end - start);
  executions_->Increment();
  for (const ComputeUnit& unit : units) {
    UnitCounter(unit)->Increment();
    if (busy_observer_) busy_observer_(unit, end - start);
  }
  if (units.back().npu != units.front().npu) multi_npu_executions_->Increment();
  if (profiler) {
    // One compute stage per phase, with its worker slices (SPEC O2); an
    // unpartitioned program's run is one phase of worker 0.
    std::vector<ComputePhase> phases = GroupIntoPhases(slices.Take());
    if (phases.empty()) phases.push_back({0, start, end, {{0, 0, start, end}}});
    for (const ComputePhase& phase : phases) {
      profile::Stage* stage = record.add_stages();
      stage->set_name(absl::StrCat("compute_", phase.phase));
      stage->set_kind(profile::COMPUTE);
      stage->set_worker(phase.slices.front().worker);
      stage->set_phase(phase.phase);
      stage->set_start_ns(phase.start_ns);
      stage->set_end_ns(phase.end_ns);
      for (const ComputeSlice& slice : phase.slices) {
        profile::WorkerSlice* detail = stage->add_workers();
        detail->set_worker(slice.worker);
        if (slice.worker >= 0 && slice.worker < static_cast<int>(units.size())) {
          detail->set_npu(units[slice.worker].npu);
          detail->set_chiplet(units[slice.worker].chiplet);
        }
        detail->set_start_ns(slice.start_ns);
        detail->set_end_ns(slice.end_ns);
      }
    }
    record.set_end_ns(end);
    profiler->Record(std::move(record));
  }
  return absl::OkStatus();
}

}  // namespace rbln::runtime
