#include "rbln/runtime/compute_slices.h"

#include <algorithm>
#include <tuple>
#include <utility>

namespace rbln::runtime {

void ComputeSliceSink::Report(int worker, int64_t start_ns, int64_t end_ns) {
  absl::MutexLock lock(&mu_);
  slices_.push_back({worker, start_ns, end_ns});
}

std::vector<ComputeSlice> ComputeSliceSink::Take() {
  std::vector<ComputeSlice> out;
  {
    absl::MutexLock lock(&mu_);
    out.swap(slices_);
  }
  std::sort(out.begin(), out.end(), [](const ComputeSlice& a, const ComputeSlice& b) {
    return std::tie(a.worker, a.start_ns) < std::tie(b.worker, b.start_ns);
  });
  return out;
}

}  // namespace rbln::runtime
