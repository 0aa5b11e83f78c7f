// What a compiled kernel and the code around it agree on, by name: the
// kernel's function, the attributes the passes record on its module for the
// code that runs it, and the runtime functions it calls. Names only: the
// values behind them are documented where they are produced
// (transforms/passes.h) and where they are implemented (kernels/,
// execution/). No MLIR.
#ifndef RBLN_COMPILER_ABI_KERNEL_ABI_H_
#define RBLN_COMPILER_ABI_KERNEL_ABI_H_

namespace rbln::compiler {

// The function every compiled module exports (frontend/frontend.h).
inline constexpr char kKernelName[] = "kernel";

// --- Attributes of the module and its top-level ops ---
// Set by the partition pass (transforms/passes.h), read back with the
// layout (PartitionLayout, partition_layout.h).
inline constexpr char kPartitionsAttr[] = "rbln.partitions";
inline constexpr char kScratchBytesAttr[] = "rbln.scratch_bytes";
inline constexpr char kScratchBuffersAttr[] = "rbln.scratch_buffers";
inline constexpr char kWorkspaceSegmentsAttr[] = "rbln.workspace_segments";
// On a top-level scf.for with constant bounds: its iterations are
// independent, so workers may run disjoint ranges of them (the GEMM and
// convolution blocks of the library rewrites).
inline constexpr char kParallelIterationsAttr[] = "rbln.parallel_iterations";
// On a top-level op that is not a linalg op: its work in loop iterations,
// counted towards the partitioning threshold.
inline constexpr char kWorkAttr[] = "rbln.work";
// On the scf.for over groups that the frontend emits for a grouped GEMM
// (frontend/ops/grouped_matmul_ops.cc) and on the product generic in its
// body: the grouped GEMM rewrite (transforms/library/) replaces the loop
// with kGroupedGemmSymbol calls.
inline constexpr char kGroupedGemmAttr[] = "rbln.grouped_gemm";
// Beside kGroupedGemmAttr when the weights are MXFP4 (blocks and scales
// read by the product's body): the rewrite calls kGroupedGemmMxfp4Symbol.
inline constexpr char kGroupedGemmMxfp4Attr[] = "rbln.grouped_gemm_mxfp4";
// On the linalg.generic the frontend emits for paged attention
// (frontend/ops/paged_attention_ops.cc), a dictionary of its block_size,
// scale, sliding_window (0: none), soft_cap (0: none) and sinks (bool:
// whether the body reads per-head sink logits): the paged attention rewrite
// (transforms/library/) replaces it with kPagedAttentionSymbol calls.
inline constexpr char kPagedAttentionAttr[] = "rbln.paged_attention";
// On the module: how many paged attention generics the frontend marked. The
// rewrite checks that each of them reached it, and fails the compile if one
// did not (a pass before it dropped the marker, e.g. by fusing the op into
// another): the generic's loops would compute it ~100x slower. The rewrite
// removes the attribute.
inline constexpr char kPagedAttentionCountAttr[] = "rbln.paged_attention_count";
// On the linalg.generic the frontend emits for scaled dot-product attention
// (frontend/ops/masked_attention_ops.h): a dictionary with scale (f32),
// causal and mask (bool: whether the body reads a mask); the masked
// attention rewrite replaces it with kMaskedAttentionSymbol calls.
inline constexpr char kMaskedAttentionAttr[] = "rbln.masked_attention";
// On the key loop (scf.for) in that generic's body: a key loop whose
// generic lost kMaskedAttentionAttr (merged into another op) fails the
// rewrite instead of running ~100x slower.
inline constexpr char kMaskedAttentionKeysAttr[] = "rbln.masked_attention_keys";
// On an argument of @kernel that is a graph input the graph updates
// (graph.proto's Update): the index of the result whose value is written
// into it. Set by the graph importer, read by the output binding pass
// (transforms/passes.h), which computes that result in the input's buffer.
inline constexpr char kUpdatedByResultAttr[] = "rbln.updated_by_result";

// --- Runtime functions kernels call (resolved by the JIT by name) ---
// Between dependent ops of a partitioned kernel (execution/chiplet_team.h).
inline constexpr char kChipletBarrierSymbol[] = "rbln_chiplet_barrier";
// Run-time errors of kernels (SPEC P8; execution/kernel_errors.h).
inline constexpr char kReportIndexErrorSymbol[] = "rbln_report_index_error";
inline constexpr char kReportZeroDivisionSymbol[] =
    "rbln_report_zero_division";
// GEMM blocks through oneDNN: the problem as arguments (no epilogue), or as
// GemmProblem::Encode()d words (gemm_problem.h; kernels/onednn_gemm.h).
inline constexpr char kOnednnGemmSymbol[] = "rbln_gemm";
inline constexpr char kOnednnGemmProblemSymbol[] = "rbln_gemm_problem";
// Convolution blocks through oneDNN (conv_problem.h; kernels/onednn_conv.h).
inline constexpr char kOnednnConvSymbol[] = "rbln_conv";
// Grouped GEMMs (torch._grouped_mm's 2-D x 3-D form, MoE experts) through
// oneDNN, one GEMM per group of rows (kernels/grouped_gemm.h).
inline constexpr char kGroupedGemmSymbol[] = "rbln_grouped_gemm";
// The same on MXFP4 weights, dequantized on the way (kernels/mxfp4_grouped_gemm.h).
inline constexpr char kGroupedGemmMxfp4Symbol[] = "rbln_grouped_gemm_mxfp4";
// Paged attention over a KV cache read in place, one request x kv head a
// work item (kernels/paged_attention.h).
inline constexpr char kPagedAttentionSymbol[] = "rbln_paged_attention";
// Attention over dense keys and values with a mask, visiting only the keys
// a query sees (kernels/masked_attention.h).
inline constexpr char kMaskedAttentionSymbol[] = "rbln_masked_attention";
// OpenBLAS's GEMM (kernels/blas_loader.h).
inline constexpr char kSgemmName[] = "cblas_sgemm";

// The GEMM library a kernel's GEMMs call.
enum class GemmLibrary { kOpenBlas, kOnednn };

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_ABI_KERNEL_ABI_H_
