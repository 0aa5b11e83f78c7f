// Chiplet partitioning (SPEC A2): on Rebel100 every program runs on the card's
// 4 chiplets at once.
//
// The pass runs on buffers (after bufferization and the BLAS rewrite) and
// turns `@kernel` into an SPMD function that every chiplet worker calls with
// its own slice index, its last argument. Each top-level op becomes one of:
//  - split: a linalg op with a parallel loop dimension d (the outermost one
//    that every output indexes directly and whose extent is >= 2) runs on
//    rows [i*T, min(N, (i+1)*T)) of d, T = ceil(N/k), as a clone of the op on
//    subviews. Static sizes: full slices have extent T, the one partial slice
//    its own extent (two static variants, so the vectorizer still sees
//    static shapes). Every element is computed by the
//    same code as unpartitioned, so results are bit-identical.
//  - chiplet 0: anything else with side effects (a reduction-only loop nest,
//    memref.copy, an op whose input overlaps its output with another access
//    pattern, calls such as the BLAS rewrite's cblas_sgemm) runs on worker 0
//    only.
//  - replicated: pure and view ops (constants, subviews, reshapes) run on
//    every worker, and so do reads whose values they all use (a memref.load
//    of an index: a KV cache's write position), after the barrier that
//    follows the buffer's writer.
// Internal buffers (top-level memref.alloc) must be shared by the team, so
// they become kernel arguments (after the outputs, before the slice index)
// that the caller places in the program's workspace; their deallocs are
// dropped. The workspace is one segment per worker, homed in the memory of
// the chiplet that worker runs on: a buffer only worker 0 touches (written
// and read by chiplet-0 ops) lives in worker 0's segment, a buffer that split
// slices share goes to the least-filled segment. The access table (each
// buffer's home and the workers that touch it) is recorded with the layout.
// Between two top-level ops that touch the same buffer (read after write,
// write after read or write; all kernel arguments are treated as one
// buffer) every worker calls rbln_chiplet_barrier().
//
// Programs whose total work (iterations of their top-level linalg ops) is
// below `min_work` are left unpartitioned: waking the team costs more than
// the kernel (see docs/benchmarks.md). The module records the outcome in
// kPartitionsAttr (1: unchanged signature) and kScratchBytesAttr.
#ifndef RBLN_COMPILER_PARTITION_PASS_H_
#define RBLN_COMPILER_PARTITION_PASS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace rbln::compiler {

inline constexpr char kPartitionsAttr[] = "rbln.partitions";
inline constexpr char kScratchBytesAttr[] = "rbln.scratch_bytes";
inline constexpr char kScratchBuffersAttr[] = "rbln.scratch_buffers";
inline constexpr char kWorkspaceSegmentsAttr[] = "rbln.workspace_segments";
inline constexpr char kChipletBarrierSymbol[] = "rbln_chiplet_barrier";
// On a top-level scf.for with constant bounds: its iterations are
// independent, so workers may run disjoint ranges of them (the GEMM blocks
// of blas_rewrite_pass.h).
inline constexpr char kParallelIterationsAttr[] = "rbln.parallel_iterations";
// On a top-level op that is not a linalg op: its work in loop iterations,
// counted towards the partitioning threshold.
inline constexpr char kWorkAttr[] = "rbln.work";

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

// A module pass (it declares the barrier function).
std::unique_ptr<mlir::Pass> CreatePartitionPass(PartitionOptions options);

// What the pass recorded on `module` (partitions 1 if it did not run).
PartitionLayout ReadPartitionLayout(mlir::ModuleOp module);

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_PARTITION_PASS_H_
