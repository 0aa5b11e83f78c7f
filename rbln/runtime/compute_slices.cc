#include "rbln/runtime/compute_slices.h"

#include <algorithm>
#include <tuple>
#include <utility>

namespace rbln::runtime {
namespace {

// By phase, worker, then start time.
bool InOrder(const ComputeSlice& a, const ComputeSlice& b) {
  return std::tie(a.phase, a.worker, a.start_ns) < std::tie(b.phase, b.worker, b.start_ns);
}

}  // namespace

void ComputeSliceSink::Report(int worker, int phase, int64_t start_ns, int64_t end_ns) {
  absl::MutexLock lock(&mu_);
  slices_.push_back({worker, phase, start_ns, end_ns});
}

std::vector<ComputeSlice> ComputeSliceSink::Take() {
  std::vector<ComputeSlice> out;
  {
    absl::MutexLock lock(&mu_);
    out.swap(slices_);
  }
  std::sort(out.begin(), out.end(), InOrder);
  return out;
}

std::vector<ComputePhase> GroupIntoPhases(std::vector<ComputeSlice> slices) {
  std::sort(slices.begin(), slices.end(), InOrder);
  std::vector<ComputePhase> phases;
  for (ComputeSlice& slice : slices) {
    if (phases.empty() || phases.back().phase != slice.phase) {
      phases.push_back({slice.phase, slice.start_ns, slice.end_ns, {}});
    }
    ComputePhase& phase = phases.back();
    phase.start_ns = std::min(phase.start_ns, slice.start_ns);
    phase.end_ns = std::max(phase.end_ns, slice.end_ns);
    phase.slices.push_back(std::move(slice));
  }
  return phases;
}

}  // namespace rbln::runtime
