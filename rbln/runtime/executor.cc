#include "rbln/runtime/executor.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "rbln/core/status_macros.h"
#include "rbln/runtime/compute_slices.h"
#include "rbln/runtime/profiler.h"
#include "rbln/runtime/strided_span.h"

namespace rbln::runtime {

Executor::Executor(StorageManager* storage)
    : storage_(storage),
      executions_(CounterRegistry::Global().Get("runtime/executions")) {}

absl::Status Executor::Run(const Executable& program,
                           absl::Span<const DeviceBuffer> args) {
  const size_t expected = program.num_inputs() + program.num_outputs();
  if (args.size() != expected) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "rbln: program %s takes %d buffers, got %d", program.DebugName(),
        expected, args.size()));
  }
  // RBLN_PROFILER=1: record this run's stages (SPEC O4).
  ProfileRecorder* const profiler = ProfileRecorder::Global();
  profile::Execution record;
  if (profiler) {
    record.set_program(program.DebugName());
    absl::StatusOr<StorageInfo> first =
        args.empty() ? absl::NotFoundError("") : storage_->Info(args[0].address);
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
    const DeviceAccess access = static_cast<int>(i) < program.num_inputs()
                                    ? DeviceAccess::kRead
                                    : DeviceAccess::kWrite;
    const int64_t map_start = profiler ? ProfileRecorder::NowNs() : 0;
    if (nbytes == 0) {
      // An empty tensor has no storage to map (its address may be null);
      // the kernel never dereferences it.
      views[i].data = nullptr;
    } else {
      RBLN_ASSIGN_OR_RETURN(views[i].data,
                            storage_->MapForDevice(arg.address, nbytes, access));
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
  // Time inside the program (explain()'s "in librbln"), without mapping.
  static Counter* const execution_ns =
      CounterRegistry::Global().Get("runtime/execution_ns");
  const int64_t start = ProfileRecorder::NowNs();
  ComputeSliceSink slices;
  RBLN_RETURN_IF_ERROR(profiler ? program.ExecuteProfiled(views, &slices)
                                : program.Execute(views));
  const int64_t end = ProfileRecorder::NowNs();
  execution_ns->Add(end - start);
  executions_->Increment();
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
