// Placing a program's workers on compute units (SPEC A2, A7): a program
// split over W workers runs worker w on chiplet w % C of NPU group[w / C],
// for an RSD group of NPUs with C chiplets each -- the 4 chiplets of a
// Rebel100 card, or one compute unit per ATOM NPU of a multi-NPU group.
#ifndef RBLN_RUNTIME_PLACEMENT_H_
#define RBLN_RUNTIME_PLACEMENT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "rbln/runtime/executable.h"

namespace rbln::runtime {

// The compute unit of each of `workers` workers of `program` on the NPUs
// `group` (physical indices, in group order). FailedPrecondition, naming
// the program, the group and the fix, when the group has fewer compute
// units than the program has workers.
absl::StatusOr<std::vector<ComputeUnit>> PlaceWorkers(
    const std::string& program, int workers, absl::Span<const int> group,
    int chiplets_per_npu);

// "npu.N.chiplet.C", as counters, profiles and inspect() name a unit.
std::string ComputeUnitName(const ComputeUnit& unit);

}  // namespace rbln::runtime

#endif  // RBLN_RUNTIME_PLACEMENT_H_
