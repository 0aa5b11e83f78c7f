// Skinny bf16 GEMMs (a few rows of A against a large B, as a decode step's
// linear layers). For CPUs whose oneDNN has no bf16 matmul (below
// avx512_core) B is read as stored, each bf16 widened to f32 in registers
// (its bits moved into a float's high half: exact), with f32 accumulation:
// such a GEMM streams B from memory, so reading its 2 bytes per element
// instead of a widened f32 copy's 4 halves the time of a memory-bound step.
// With AVX-512 BF16 (AMD Zen 4, Intel from Cooper Lake) a Linear weight
// (B stored [n, k]) is read as stored by vdpbf16ps: on Zen 4 a batch-1
// decode step streamed its weights at 74% of the read bandwidth this way
// against 60% through oneDNN 2.6's brgemm on its packed copies
// (docs/benchmarks.md).
//
// Every element of C is a sum over k in an order fixed by k alone (not by
// n, the column it is in, or the range of columns a call computes): a
// problem cut into column blocks over workers gives the same bits as one
// call. Single-threaded: the callers' workers are the parallelism.
#ifndef RBLN_COMPILER_KERNELS_BF16_SKINNY_GEMM_H_
#define RBLN_COMPILER_KERNELS_BF16_SKINNY_GEMM_H_

#include <cstdint>

#include "rbln/compiler/abi/gemm_problem.h"

namespace rbln::compiler {

// The instruction sets SkinnyBf16Gemm can use, each a superset of the one
// before. Each sums in an order of its own (kPortable sequentially,
// kAvx512Bf16 by pairs): the same error bound, not the same bits; one
// process uses one of them (BestSkinnyIsa()). kAvx512Bf16 runs B stored
// [k, n] as kAvx2 does.
enum class SkinnyIsa { kPortable = 0, kAvx2 = 1, kAvx512Bf16 = 2 };

// The fastest one this CPU has (checked once, at run time).
SkinnyIsa BestSkinnyIsa();
const char* SkinnyIsaName(SkinnyIsa isa);

// The most rows of A (per batch) the kernel takes: decode batches of up to
// 16 sequences. On Zen 3 it stays at least as fast as oneDNN's f32 matmul
// on an f32 copy of B up to about 24 rows (docs/benchmarks.md, "Skinny bf16
// GEMM"); beyond, both are compute-bound and oneDNN blocks better.
constexpr int64_t kSkinnyBf16MaxRows = 16;

// Whether SkinnyBf16Gemm computes `q` (its operand type, shape): kBF16 A
// and B, 1 <= m <= kSkinnyBf16MaxRows, nonempty.
bool SkinnyBf16Applies(const GemmProblem& q);

// Where oneDNN has bf16 kernels, the most rows the kernel takes from it (B
// stored [n, k], AVX-512 BF16): on Zen 4 it streams a weight at 1.4-2x
// oneDNN's rate up to 4 rows; at 8 oneDNN's brgemm on its packed copy is
// ~15% faster (its packed panels stream as one sequence, the kernel's rows
// as many short ones; docs/benchmarks.md, "Skinny bf16 GEMM").
constexpr int64_t kSkinnyBf16MaxRowsBesideOnednn = 4;

// Whether a GEMM that SkinnyBf16Applies to should take the kernel rather
// than oneDNN: always where oneDNN has no bf16 kernels
// (`onednn_has_bf16` false); where it has, for B stored [n, k] of up to
// kSkinnyBf16MaxRowsBesideOnednn rows on CPUs with AVX-512 BF16. Decided by
// the whole problem's shape, so every column block of it takes the same
// route.
bool SkinnyBf16Preferred(const GemmProblem& q, bool onednn_has_bf16);

// c_dense[(b * q.m + i) * q.n + j] = sum over l of A[b][i][l] * op(B[b])[l][j]
// for b < q.batch, i < q.m, j < q.n, in f32: A (bf16) at `a` with q.lda,
// q.stride_a; B (bf16) at `b`, stored [n, k] when q.trans_b, else [k, n],
// with q.ldb, q.stride_b. q.ldc, q.stride_c, q.accumulate and q.epilogue are
// not read: the caller applies them to c_dense. Requires SkinnyBf16Applies.
void SkinnyBf16Gemm(const GemmProblem& q, const void* a, const void* b,
                    float* c_dense);
// The same with `isa`, which must not exceed BestSkinnyIsa() (for tests).
void SkinnyBf16Gemm(const GemmProblem& q, const void* a, const void* b,
                    float* c_dense, SkinnyIsa isa);

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_KERNELS_BF16_SKINNY_GEMM_H_
