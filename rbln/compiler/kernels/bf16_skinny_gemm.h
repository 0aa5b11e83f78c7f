// Skinny bf16 GEMMs (a few rows of A against a large B, as a decode step's
// linear layers) for CPUs whose oneDNN has no bf16 matmul (below
// avx512_core): B is read as stored, each bf16 widened to f32 in registers
// (its bits moved into a float's high half: exact), with f32 accumulation.
// Such a GEMM streams B from memory, so reading its 2 bytes per element
// instead of a widened f32 copy's 4 halves the time of a memory-bound step.
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

// The instruction sets SkinnyBf16Gemm can use. kPortable sums in a
// different (sequential) order than kAvx2: the same error bound, not the
// same bits; one process uses one of them (BestSkinnyIsa()).
enum class SkinnyIsa { kPortable = 0, kAvx2 = 1 };

// The fastest one this CPU has (AVX2 and FMA; checked once, at run time).
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
