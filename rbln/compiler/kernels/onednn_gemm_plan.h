// The planning half of the oneDNN GEMM (onednn_gemm.h): which matmul
// primitive, on which operand types and layouts, a block problem runs as --
// the primitives kept per problem, the f16 routes (widened to f32 or split
// into bf16x3 products) and the problems of their steps. onednn_gemm.cc
// runs the plan. Internal to kernels/.
#ifndef RBLN_COMPILER_KERNELS_ONEDNN_GEMM_PLAN_H_
#define RBLN_COMPILER_KERNELS_ONEDNN_GEMM_PLAN_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "oneapi/dnnl/dnnl.h"
#include "rbln/compiler/abi/gemm_problem.h"
#include "rbln/compiler/kernels/onednn_library.h"

namespace rbln::compiler::gemm_plan {

// One cached primitive: a matmul for one block problem.
struct Primitive {
  dnnl_primitive_t primitive = nullptr;
  dnnl_memory_desc_t a, b, c, bias, scratchpad;
  size_t scratchpad_bytes = 0;
  // oneDNN rejected the epilogue as post-ops: the primitive writes f32 to a
  // contiguous buffer and the epilogue runs after it (same result).
  bool epilogue_after = false;
  std::string implementation;
  // Created for packed weights (B in the layout oneDNN picks, packed once
  // per weight version by PackedWeightCache): that layout and the reorder
  // from B's plain one into it; `pack` null when oneDNN picked the plain
  // layout (then B is read in place).
  dnnl_memory_desc_t plain_b;
  dnnl_primitive_t pack = nullptr;
  size_t packed_b_bytes = 0;
  // The blocked layout of `b` (dnnl_format_tag_undef: as stored). It
  // depends on B's shape and type only, never on M: the packed copy of a
  // weight serves every M (prefill of any length, decode).
  dnnl_format_tag_t packed_layout = dnnl_format_tag_undef;
};

// `p` in words, for error messages.
std::string Describe(const GemmProblem& p);

// Primitives by block problem, created on first use and kept for the
// process (a program's shapes are few, and creating one JIT-compiles
// oneDNN's kernels: far slower than a call). With `packed_weights` (2-D
// problems), B in a blocked layout if brgemm takes one (`pack` set), else
// as stored. Fails (aborts) if oneDNN has no primitive for `p`.
const Primitive& PrimitiveFor(const onednn::Api& d, const GemmProblem& p,
                              bool packed_weights = false);

// The words naming the packed copy of weight block `q`'s B that `prim`
// (created with packed weights) reads, made by `route` (0 for B as it is,
// else an F16GemmRoute): B's type, orientation, shape, row stride and the
// packed layout -- not M, A's or C's strides or the epilogue, so that GEMMs
// of any M over one weight share one copy (PackedWeightCache).
std::vector<int64_t> PackedWeightKey(const GemmProblem& q,
                                     const Primitive& prim, int64_t route);

// Bytes of an A or B element, and of a stored C element.
int64_t OperandBytes(GemmOperandType type);
int64_t StoreBytes(StoreType type);

// The bf16 problem a kF16 block `q` runs as on the bf16x3 route: A and B
// split into dense K-tripled buffers (bf16_split.h), B in its stored
// layout.
GemmProblem TripledProblem(const GemmProblem& q);

// The f32 problem a kF16 block `q` runs as: its operands widened into
// dense buffers, B in its stored layout (still read transposed when
// trans_b: a transposing copy would cost more than the strided reads).
GemmProblem WidenedProblem(const GemmProblem& q);

// The problem `q` as Multiply runs it: a column block of a wider C (rows
// with gaps) gets a dense C of its own. oneDNN 2.6 runs a matmul with gaps
// between C's rows with gemm:jit rather than brgemm, so without AMX and
// without B in a packed layout; staging C costs far less (decoder GEMMs are
// column blocks).
GemmProblem WithDenseC(GemmProblem q);

// Whether kF16 block `q` runs as bf16x3 products (F16GemmRoute), B a weight
// or not. By its shape and B's kind: the same for every block distribution
// (SPEC A2).
bool UseBf16x3(const onednn::Api& d, const GemmProblem& q,
               bool weight = false);

// Columns of B widened at a time for a kF16 block: about 2 MB of f32 (in
// the caches while the primitive reads it, instead of a whole block's B
// written to and read back from memory), whole 16-float vectors.
int64_t WidenedColumns(const GemmProblem& q);

// --- The bf16x3 route of a kF16 weight, B split and packed once as Bh and
// Bl (onednn_gemm.cc, MultiplyPairedWeight) ---

// Columns per chunk: D (2m rows of f32) about 256 KB, whole 64-column
// blocks of the packed layout.
int64_t PairedColumns(const GemmProblem& q);

// The two bf16 products of `n` columns of weight block `q` (batch 1), B as
// SplitB writes it: op(B) rows [Bh ; Bh ; Bl]: the stacked [Ah ; Al] x Bh,
// and Ah x Bl with the block's epilogue.
GemmProblem StackedProblem(const GemmProblem& q, int64_t n);
GemmProblem LowProblem(const GemmProblem& q, int64_t n);

// Whether a primitive of the route runs as it must: AMX brgemm with B
// packed and the post-ops fused.
bool PairedPrimitiveUsable(const Primitive& prim);

}  // namespace rbln::compiler::gemm_plan

#endif  // RBLN_COMPILER_KERNELS_ONEDNN_GEMM_PLAN_H_
