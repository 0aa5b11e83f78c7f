// Scaled dot-product attention over dense keys and values with a mask, one
// batch x kv head a work item, visiting only the keys a query can see (the
// compiled attention's kernel, frontend/ops/masked_attention_ops.cc).
//
// Query [B, H, L, E], keys [B, Hkv, S, E], values [B, Hkv, S, Ev], output
// [B, H, L, Ev] (strides in elements, unit along E and Ev); query head h
// reads kv head h / (H / Hkv) (GQA). The mask (optional) broadcasts to
// [B, H, L, S] by its strides (0 along a broadcast dim): bool keeps true
// positions, a float mask is added to the scores (-inf hides). `causal`
// hides key j from query i when j > i (top-left aligned, as PyTorch's
// is_causal). A score is q.k * scale in f32 (half inputs widened exactly),
// the softmax f32 and online, the output rounded once to its type. With
// half keys and values each weight is rounded to their type before it
// meets its value (the sums stay f32), as PyTorch's CPU flash attention.
//
// Each query row first finds the range [first, last] of keys its mask and
// causality leave visible (a static KV cache's empty slots past the last
// filled position are never read); keys inside the range it does not see
// get weight exactly 0. A row that sees no key gives zeros (PyTorch's safe
// softmax), and logsumexp -inf. Arithmetic does not depend on how items are
// cut into blocks (SPEC A2); the ISA paths differ by f32 rounding only (the
// AVX-512 path scores items of >= 16 query rows 4 rows at a time against
// keys transposed in groups of 16, attention_score_tiles.h, and reads the
// bf16 keys and values of items of fewer rows in place, up to 4 rows that
// see the same keys at a time, attention_bf16_rows.h).
#ifndef RBLN_COMPILER_KERNELS_MASKED_ATTENTION_H_
#define RBLN_COMPILER_KERNELS_MASKED_ATTENTION_H_

#include <cstdint>

#include "rbln/compiler/abi/attention_problem.h"
#include "rbln/compiler/kernels/paged_attention.h"

namespace rbln::compiler {

// Runs work items [block * items / blocks, (block + 1) * items / blocks)
// of the batch * kv_heads items with `isa` (<= BestAttentionIsa()). `mask`
// may be null when mask_type is kNone; `logsumexp` ([B, H, L] f32,
// contiguous) may be null.
void RunMaskedAttentionBlock(const MaskedAttentionProblem& p, const void* query,
                             const void* keys, const void* values, const void* mask, void* out,
                             float* logsumexp, int64_t block, int64_t blocks,
                             AttentionIsa isa = BestAttentionIsa());

}  // namespace rbln::compiler

// The entry point compiled kernels call: the address of the problem's
// words (MaskedAttentionProblem::Encode()), then of the query, keys,
// values, mask (0: none), output and logsumexp (0: none), then the block
// and block count.
extern "C" void rbln_masked_attention(int64_t problem, int64_t query, int64_t keys,
                                      int64_t values, int64_t mask, int64_t out,
                                      int64_t logsumexp, int64_t block, int64_t blocks);

#endif  // RBLN_COMPILER_KERNELS_MASKED_ATTENTION_H_
