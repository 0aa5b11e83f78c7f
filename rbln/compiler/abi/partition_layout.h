// How a partitioned kernel expects to be called (SPEC A2): its workers, the
// workspace segment of each and the internal buffers in them. The partition
// pass (transforms/passes.h) decides it and records it on the module
// (kernel_abi.h's attributes); the compiled program (execution/) runs the
// kernel by it and the runtime places the segments. No MLIR.
#ifndef RBLN_COMPILER_ABI_PARTITION_LAYOUT_H_
#define RBLN_COMPILER_ABI_PARTITION_LAYOUT_H_

#include <cstdint>
#include <vector>

namespace rbln::compiler {

// Below this many loop iterations (~1 ms of element-wise work) a program
// runs on one worker: waking the team cost ~50 us per call on the shared
// 2-core host (partition_bench, docs/benchmarks.md), so smaller kernels,
// including every eager op up to 1M elements, would only get slower.
inline constexpr int64_t kDefaultPartitionMinWork = int64_t{1} << 20;

struct PartitionOptions {
  // Workers of the target: NPUs x chiplets per NPU of the group a program
  // is compiled for (any count >= 1; 1: no partitioning).
  int partitions = 1;
  int64_t min_work = kDefaultPartitionMinWork;
};

// Accessor mask of a buffer every worker may touch.
inline constexpr int64_t kAllWorkers = -1;

// An internal buffer of the workspace: contiguous, at `offset` bytes into
// the segment of worker `home`; `accessors` is a bit mask of the workers
// whose slices touch it (kAllWorkers: any).
struct ScratchBuffer {
  int home = 0;
  int64_t offset = 0;
  std::vector<int64_t> shape;
  int64_t accessors = kAllWorkers;

  bool TouchedOnlyByHome() const { return accessors == (int64_t{1} << home); }
};

// How a compiled module expects to be called.
struct PartitionLayout {
  int partitions = 1;
  int64_t scratch_bytes = 0;  // all segments
  std::vector<int64_t> segment_bytes;  // per worker (empty: no workspace)
  std::vector<ScratchBuffer> scratch;  // one kernel argument each
};

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_ABI_PARTITION_LAYOUT_H_
