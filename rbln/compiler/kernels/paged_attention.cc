#include "rbln/compiler/kernels/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "rbln/compiler/kernels/attention_vector_ops.h"
#include "rbln/core/counters.h"

namespace rbln::compiler {
namespace {

using attention_ops::Avx2Ops;
using attention_ops::Avx512Ops;
using attention_ops::ElementBytes;
using attention_ops::FoldScores;
using attention_ops::IntAt;
using attention_ops::Narrow;
using attention_ops::PortableOps;
using attention_ops::SoftCap;
using attention_ops::Widen;

// The state of one work item: its query rows (f32), their key ranges and
// online-softmax accumulators, and one cache block's keys and values.
struct ItemScratch {
  std::vector<float> q, acc, max, sum, scores, keys, values;
  std::vector<int64_t> first, limit;
};

template <typename Ops>
void RunItem(const PagedAttentionProblem& p, const char* query, const char* cache,
             const void* block_table, const void* positions, const float* sinks, char* out,
             int64_t item, ItemScratch& s) {
  const int64_t b = item / p.num_kv_heads, kv_head = item % p.num_kv_heads;
  const int64_t group = p.num_heads / p.num_kv_heads, d = p.head_size;
  const int64_t rows = p.q_len * group, context = p.table_width * p.block_size;
  const int64_t num_blocks = p.cache_slots / p.block_size;
  const int64_t qbytes = ElementBytes(p.query_type), cbytes = ElementBytes(p.cache_type);
  s.q.resize(rows * d);
  s.acc.assign(rows * d, 0.0f);
  s.max.assign(rows, -std::numeric_limits<float>::infinity());
  s.sum.assign(rows, 0.0f);
  s.first.resize(rows);
  s.limit.resize(rows);
  s.scores.resize(p.block_size);
  s.keys.resize(p.block_size * d);
  s.values.resize(p.block_size * d);
  int64_t lo = context, hi = 0;
  for (int64_t qi = 0; qi < p.q_len; ++qi) {
    const int64_t token = b * p.q_len + qi;
    const int64_t limit =
        std::min(context, std::max<int64_t>(0, IntAt(positions, p.positions_i64, token) + 1));
    const int64_t first = p.sliding_window > 0 ? std::max<int64_t>(0, limit - p.sliding_window)
                                               : 0;
    for (int64_t g = 0; g < group; ++g) {
      const int64_t r = qi * group + g, head = kv_head * group + g;
      Widen<Ops>(p.query_type,
            query + (token * p.query_stride_token + head * p.query_stride_head) * qbytes, d,
            &s.q[r * d]);
      s.first[r] = first;
      s.limit[r] = limit;
      if (sinks != nullptr) {
        // The sink as the softmax's first key, with a zero value: the
        // denominator gains exp(sink), the accumulator nothing.
        s.max[r] = sinks[head];
        s.sum[r] = 1.0f;
      }
    }
    if (first < limit) {
      lo = std::min(lo, first);
      hi = std::max(hi, limit);
    }
  }
  const char* key_base = cache + kv_head * p.cache_slots * d * cbytes;
  const char* value_base = key_base + p.num_kv_heads * p.cache_slots * d * cbytes;
  for (int64_t start = lo / p.block_size * p.block_size; start < hi; start += p.block_size) {
    const int64_t id = IntAt(block_table, p.block_table_i64,
                             b * p.table_width + start / p.block_size);
    if (id < 0 || id >= num_blocks) continue;
    const int64_t begin = std::max(lo, start), end = std::min(hi, start + p.block_size);
    const int64_t slot = id * p.block_size + (begin - start);
    // The block's keys and values in the item's range: an f32 cache's in
    // place, others widened once for all of the item's rows.
    const float *keys, *values;
    if (p.cache_type == GemmOperandType::kF32) {
      keys = reinterpret_cast<const float*>(key_base + slot * d * cbytes);
      values = reinterpret_cast<const float*>(value_base + slot * d * cbytes);
    } else {
      Widen<Ops>(p.cache_type, key_base + slot * d * cbytes, (end - begin) * d, s.keys.data());
      Widen<Ops>(p.cache_type, value_base + slot * d * cbytes, (end - begin) * d,
                 s.values.data());
      keys = s.keys.data();
      values = s.values.data();
    }
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t from = std::max(begin, s.first[r]), to = std::min(end, s.limit[r]);
      if (from >= to) continue;
      const float* q = &s.q[r * d];
      Ops::Scores(q, keys + (from - begin) * d, to - from, d, p.scale, s.scores.data());
      if (p.soft_cap > 0.0f) SoftCap(p.soft_cap, s.scores.data(), to - from);
      FoldScores<Ops>(s.scores.data(), values + (from - begin) * d, nullptr, to - from, d,
                      s.max[r], s.sum[r], &s.acc[r * d]);
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t qi = r / group, g = r % group;
    const int64_t token = b * p.q_len + qi, head = kv_head * group + g;
    float* acc = &s.acc[r * d];
    if (s.sum[r] > 0.0f) Ops::Scale(1.0f / s.sum[r], acc, d);
    Narrow(p.query_type, acc, d,
           out + (token * p.out_stride_token + head * p.out_stride_head) * qbytes);
  }
}

template <typename Ops>
void RunItems(const PagedAttentionProblem& p, const void* query, const void* cache,
              const void* block_table, const void* positions, const float* sinks, void* out,
              int64_t block, int64_t blocks) {
  const int64_t items = p.batch * p.num_kv_heads;
  ItemScratch scratch;
  for (int64_t item = block * items / blocks; item < (block + 1) * items / blocks; ++item) {
    RunItem<Ops>(p, static_cast<const char*>(query), static_cast<const char*>(cache),
                 block_table, positions, sinks, static_cast<char*>(out), item, scratch);
  }
}

}  // namespace

AttentionIsa BestAttentionIsa() {
  static const AttentionIsa isa =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
              __builtin_cpu_supports("avx512vl")
          ? AttentionIsa::kAvx512
      : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")
          ? AttentionIsa::kAvx2
          : AttentionIsa::kPortable;
  return isa;
}

void RunPagedAttentionBlock(const PagedAttentionProblem& p, const void* query,
                            const void* cache, const void* block_table,
                            const void* positions, const float* sinks, void* out,
                            int64_t block, int64_t blocks, AttentionIsa isa) {
  if (p.batch <= 0 || p.q_len <= 0 || p.num_kv_heads <= 0 || p.head_size <= 0 ||
      p.block_size <= 0 || blocks <= 0 || p.num_heads % p.num_kv_heads != 0) {
    return;
  }
  if (isa == AttentionIsa::kAvx512) {
    RunItems<Avx512Ops>(p, query, cache, block_table, positions, sinks, out, block, blocks);
  } else if (isa == AttentionIsa::kAvx2) {
    RunItems<Avx2Ops>(p, query, cache, block_table, positions, sinks, out, block, blocks);
  } else {
    RunItems<PortableOps>(p, query, cache, block_table, positions, sinks, out, block, blocks);
  }
}

}  // namespace rbln::compiler

extern "C" void rbln_paged_attention(
    int64_t query_type, int64_t cache_type, int64_t block_table_i64, int64_t positions_i64,
    int64_t batch, int64_t q_len, int64_t num_heads, int64_t num_kv_heads, int64_t head_size,
    int64_t cache_slots, int64_t table_width, int64_t block_size, int64_t sliding_window,
    int64_t scale_bits, int64_t soft_cap_bits, int64_t query_stride_token,
    int64_t query_stride_head, int64_t out_stride_token, int64_t out_stride_head, int64_t query,
    int64_t cache, int64_t block_table, int64_t positions, int64_t sinks, int64_t out,
    int64_t block, int64_t blocks) {
  rbln::compiler::PagedAttentionProblem p;
  p.query_type = static_cast<rbln::compiler::GemmOperandType>(query_type);
  p.cache_type = static_cast<rbln::compiler::GemmOperandType>(cache_type);
  p.block_table_i64 = block_table_i64 != 0;
  p.positions_i64 = positions_i64 != 0;
  p.batch = batch;
  p.q_len = q_len;
  p.num_heads = num_heads;
  p.num_kv_heads = num_kv_heads;
  p.head_size = head_size;
  p.cache_slots = cache_slots;
  p.table_width = table_width;
  p.block_size = block_size;
  p.sliding_window = sliding_window;
  const uint32_t bits = static_cast<uint32_t>(scale_bits);
  std::memcpy(&p.scale, &bits, 4);
  const uint32_t cap_bits = static_cast<uint32_t>(soft_cap_bits);
  std::memcpy(&p.soft_cap, &cap_bits, 4);
  p.query_stride_token = query_stride_token;
  p.query_stride_head = query_stride_head;
  p.out_stride_token = out_stride_token;
  p.out_stride_head = out_stride_head;
  // Work items (request x kv head) this kernel ran: what shows that a
  // program's paged attention took the kernel, not the compiler's own
  // element-wise lowering of the op (correct, but far slower).
  static rbln::Counter* const items =
      rbln::CounterRegistry::Global().Get("compiler/paged_attention/items");
  const int64_t total = batch * num_kv_heads;
  items->Add((block + 1) * total / blocks - block * total / blocks);
  rbln::compiler::RunPagedAttentionBlock(
      p, reinterpret_cast<const void*>(query), reinterpret_cast<const void*>(cache),
      reinterpret_cast<const void*>(block_table), reinterpret_cast<const void*>(positions),
      reinterpret_cast<const float*>(sinks), reinterpret_cast<void*>(out), block, blocks);
}
