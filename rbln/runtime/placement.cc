#include "rbln/runtime/placement.h"

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace rbln::runtime {

absl::StatusOr<std::vector<ComputeUnit>> PlaceWorkers(
    const std::string& program, int workers, absl::Span<const int> group,
    int chiplets_per_npu) {
  if (workers < 1 || chiplets_per_npu < 1 || group.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "rbln: cannot place program %s: %d worker(s) on %d NPU(s) of %d "
        "chiplet(s)",
        program, workers, group.size(), chiplets_per_npu));
  }
  const int64_t units = static_cast<int64_t>(group.size()) * chiplets_per_npu;
  if (workers > units) {
    const int64_t npus_needed = (workers + chiplets_per_npu - 1) / chiplets_per_npu;
    return absl::FailedPreconditionError(absl::StrFormat(
        "rbln: program %s is split over %d workers, but the NPU group [%s] "
        "has %d NPU(s) x %d chiplet(s) = %d compute units; run it on a "
        "logical device of %d NPUs (RBLN_NPUS_PER_DEVICE / RBLN_DEVICE_MAP) "
        "or compile it for this group (torch.compile options num_devices=%d)",
        program, workers, absl::StrJoin(group, ","), group.size(),
        chiplets_per_npu, units, npus_needed, group.size()));
  }
  std::vector<ComputeUnit> placed(workers);
  for (int w = 0; w < workers; ++w) {
    placed[w] = ComputeUnit{group[w / chiplets_per_npu], w % chiplets_per_npu};
  }
  return placed;
}

std::string ComputeUnitName(const ComputeUnit& unit) {
  return absl::StrFormat("npu.%d.chiplet.%d", unit.npu, unit.chiplet);
}

}  // namespace rbln::runtime
