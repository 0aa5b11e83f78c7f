// Paged attention over a vLLM-style KV cache, read in place (the serving
// path's attention, vllm_rbln/paged_attention.py and
// frontend/ops/paged_attention_ops.cc).
//
// The cache of one layer is [2, num_kv_heads, cache_slots, head_size]: keys
// then values, each kv head's slots in order; a block is `block_size`
// consecutive slots. Request b's key j lives in slot
// block_table[b, j / block_size] * block_size + j % block_size. The query
// [batch * q_len, num_heads, head_size] holds q_len tokens per request
// (row-major); the token of position p attends to the request's keys
// [first, p + 1), first = max(0, p + 1 - sliding_window) with a window and
// 0 without (p + 1 clamped to the table's width; no key gives zeros). Query
// head h reads kv head h / (num_heads / num_kv_heads) (GQA). A score s is
// q.k * scale, soft-capped to soft_cap * tanh(s / soft_cap) with a cap
// (Gemma 2). With attention sinks (gpt-oss: one f32 logit per query head)
// the softmax's denominator also sums exp(sink): the sink is a key whose
// value is zero, so a row's weights sum to less than one.
//
// A work item is one request x kv head: its q_len x group query rows share
// every key and value load. Each cache block of the item's key range is
// widened to f32 once (an f32 cache is read in place) and every row folds
// it into an f32 online softmax
// (scores scaled by `scale`, PyTorch's opmath for half inputs); the result
// is rounded once to the query's type. Only the request's real context is
// read, block by block, not its table's full width. With AVX-512 or
// AVX2+FMA (the widening, inner products, axpys and a polynomial exp of a
// block's scores are vector code; a portable path otherwise) results
// differ from the portable path's by f32 rounding only. An item's arithmetic
// does not depend on how items are cut into blocks (SPEC A2). A block id
// outside [0, cache_slots / block_size) is not read: its keys are skipped.
#ifndef RBLN_COMPILER_KERNELS_PAGED_ATTENTION_H_
#define RBLN_COMPILER_KERNELS_PAGED_ATTENTION_H_

#include <cstdint>

#include "rbln/compiler/abi/gemm_problem.h"

namespace rbln::compiler {

// One call's problem; strides in elements. The query and output have unit
// stride along head_size; the cache, block table and positions are
// contiguous. The output has the query's type.
struct PagedAttentionProblem {
  GemmOperandType query_type = GemmOperandType::kF32;
  GemmOperandType cache_type = GemmOperandType::kF32;
  bool block_table_i64 = false;
  bool positions_i64 = true;
  int64_t batch = 0, q_len = 0, num_heads = 0, num_kv_heads = 0, head_size = 0;
  int64_t cache_slots = 0, table_width = 0, block_size = 0;
  int64_t sliding_window = 0;  // 0: none
  float scale = 1.0f;
  float soft_cap = 0.0f;  // 0: none
  int64_t query_stride_token = 0, query_stride_head = 0;
  int64_t out_stride_token = 0, out_stride_head = 0;
};

// The instruction sets the inner products can use, in order (a CPU with
// one has the ones before it).
enum class AttentionIsa { kPortable = 0, kAvx2 = 1, kAvx512 = 2 };
// The fastest one this CPU has (checked once, at run time).
AttentionIsa BestAttentionIsa();

// Runs work items [block * items / blocks, (block + 1) * items / blocks)
// of the batch * num_kv_heads items (what rbln_paged_attention does) with
// `isa`, which must not exceed BestAttentionIsa() (tests pass another).
// `sinks`: num_heads f32 logits, or null (none).
void RunPagedAttentionBlock(const PagedAttentionProblem& p, const void* query,
                            const void* cache, const void* block_table,
                            const void* positions, const float* sinks, void* out,
                            int64_t block, int64_t blocks,
                            AttentionIsa isa = BestAttentionIsa());

}  // namespace rbln::compiler

// The entry point compiled kernels call; all arguments are i64 (pointers
// as addresses, the scale and soft cap as their f32 bits): the problem in
// PagedAttentionProblem's order, then the query, cache, block table,
// positions, sinks (0: none) and output, then the block and block count.
extern "C" void rbln_paged_attention(
    int64_t query_type, int64_t cache_type, int64_t block_table_i64, int64_t positions_i64,
    int64_t batch, int64_t q_len, int64_t num_heads, int64_t num_kv_heads, int64_t head_size,
    int64_t cache_slots, int64_t table_width, int64_t block_size, int64_t sliding_window,
    int64_t scale_bits, int64_t soft_cap_bits, int64_t query_stride_token,
    int64_t query_stride_head, int64_t out_stride_token, int64_t out_stride_head, int64_t query,
    int64_t cache, int64_t block_table, int64_t positions, int64_t sinks, int64_t out,
    int64_t block, int64_t blocks);

#endif  // RBLN_COMPILER_KERNELS_PAGED_ATTENTION_H_
