#include "rbln/compiler/kernels/masked_attention.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "rbln/compiler/kernels/attention_bf16_rows.h"
#include "rbln/compiler/kernels/attention_score_tiles.h"
#include "rbln/compiler/kernels/attention_vector_ops.h"
#include "rbln/compiler/kernels/half_convert.h"
#include "rbln/core/counters.h"

namespace rbln::compiler {
namespace {

using attention_ops::Avx2Ops;
using attention_ops::Avx512Ops;
using attention_ops::ElementBytes;
using attention_ops::Narrow;
using attention_ops::PrepareWeights;
using attention_ops::PortableOps;
using attention_ops::Widen;

// Query rows of an item from which the AVX-512 path scores tiles of rows
// against transposed keys (attention_score_tiles.h): the transposition of
// a block costs about what 4 rows' scores do one key at a time.
constexpr int64_t kMinTiledRows = 16;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Keys a block widens and scores at a time, blocks aligned to multiples of
// it: PyTorch's CPU flash attention's kv split (512), so a half weight is
// rounded relative to the same running max as there (its exp(s - max)
// in the input type), which keeps bf16 greedy decoding on PyTorch's
// tokens through near ties.
constexpr int64_t kKeyBlock = 512;

// The mask element at `at` as a bias in f32: -inf hides (bool false hides).
inline float MaskBias(AttentionMaskType type, const char* at) {
  switch (type) {
    case AttentionMaskType::kNone:
      return 0.0f;
    case AttentionMaskType::kBool:
      return *at != 0 ? 0.0f : kNegInf;
    case AttentionMaskType::kF32: {
      float v;
      std::memcpy(&v, at, 4);
      return v;
    }
    case AttentionMaskType::kBF16: {
      uint16_t h;
      std::memcpy(&h, at, 2);
      const uint32_t u = static_cast<uint32_t>(h) << 16;
      float v;
      std::memcpy(&v, &u, 4);
      return v;
    }
    case AttentionMaskType::kF16: {
      uint16_t h;
      std::memcpy(&h, at, 2);
      float v;
      HalfToFloat(&h, 1, 1, 1, &v, 1);
      return v;
    }
  }
  return 0.0f;
}

inline int64_t MaskBytes(AttentionMaskType type) {
  switch (type) {
    case AttentionMaskType::kNone:
    case AttentionMaskType::kBool:
      return 1;
    case AttentionMaskType::kF32:
      return 4;
    default:
      return 2;
  }
}

// Whether the contiguous mask elements [from, to) all hide their keys:
// their bits are -inf's (or false).
template <typename T>
bool AllEqual(const char* mask, int64_t from, int64_t to, T bits) {
  const T* m = reinterpret_cast<const T*>(mask) + from;
  bool all = true;
  for (int64_t j = 0; j < to - from; ++j) all &= m[j] == bits;
  return all;
}

bool AllHidden(AttentionMaskType type, const char* mask, int64_t from, int64_t to) {
  switch (type) {
    case AttentionMaskType::kBool:
      return AllEqual<uint8_t>(mask, from, to, 0);
    case AttentionMaskType::kF32:
      return AllEqual<uint32_t>(mask, from, to, 0xff800000u);
    case AttentionMaskType::kBF16:
      return AllEqual<uint16_t>(mask, from, to, 0xff80u);
    case AttentionMaskType::kF16:
      return AllEqual<uint16_t>(mask, from, to, 0xfc00u);
    case AttentionMaskType::kNone:
      return false;
  }
  return false;
}

struct RowRange {
  int64_t first = 0, limit = 0;  // visible keys lie in [first, limit)
};

// Row i's visible range under its mask row (null: none) and causality.
// Only -inf (or false) hides: a NaN bias stays visible, so it reaches the
// output as PyTorch's would.
RowRange VisibleRange(const MaskedAttentionProblem& p, const char* mask, int64_t i) {
  int64_t limit = p.causal ? std::min(p.kv_len, i + 1) : p.kv_len;
  if (mask == nullptr) return {0, limit};
  const int64_t stride = p.mask_strides[3] * MaskBytes(p.mask_type);
  auto hidden = [&](int64_t j) { return MaskBias(p.mask_type, mask + j * stride) == kNegInf; };
  if (p.mask_strides[3] == 1) {
    // A static cache's row hides most of its keys: skip them a chunk at a
    // time (a loop the compiler vectorizes).
    constexpr int64_t kChunk = 64;
    while (limit >= kChunk && AllHidden(p.mask_type, mask, limit - kChunk, limit)) {
      limit -= kChunk;
    }
  }
  while (limit > 0 && hidden(limit - 1)) --limit;
  int64_t first = 0;
  while (first < limit && hidden(first)) ++first;
  return {first, limit};
}

// Adds mask row `m`'s biases over keys [from, to) to `scores`, -inf where
// a key is hidden (flagged in `hidden`); returns whether any is. One loop
// per mask type (MaskBias's switch folded away; ApplyMask picks the loop
// once per row, not per key).
template <AttentionMaskType kType>
bool AddBiases(const char* m, int64_t stride, int64_t from, int64_t to, float* scores,
               uint8_t* hidden) {
  const int64_t step = stride * MaskBytes(kType);
  bool any_hidden = false;
  for (int64_t j = from; j < to; ++j) {
    const float b = MaskBias(kType, m + j * step);
    const bool hide = b == kNegInf;
    hidden[j - from] = hide;
    any_hidden |= hide;
    scores[j - from] = hide ? kNegInf : scores[j - from] + b;
  }
  return any_hidden;
}

// AddBiases of a contiguous bf16 mask row, 16 keys a step (HF's masks for
// bf16 models: 0 and -inf).
__attribute__((target("avx512f,avx512bw,avx512vl"))) bool AddBf16BiasesAvx512(
    const uint16_t* m, int64_t n, float* scores, uint8_t* hidden) {
  const __m512 neg_inf = _mm512_set1_ps(kNegInf);
  __mmask16 any = 0;
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 tail = n - j >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - j)) - 1);
    const __m512 bias = _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(tail, m + j)), 16));
    const __mmask16 hide = _mm512_mask_cmp_ps_mask(tail, bias, neg_inf, _CMP_EQ_OQ);
    const __m512 sum = _mm512_add_ps(_mm512_maskz_loadu_ps(tail, scores + j), bias);
    _mm512_mask_storeu_ps(scores + j, tail, _mm512_mask_blend_ps(hide, sum, neg_inf));
    _mm_mask_storeu_epi8(hidden + j, tail, _mm_movm_epi8(hide));
    any |= hide;
  }
  return any != 0;
}

// AddBiases for mask row `m` of `type` (element stride `stride`); `avx512`:
// the CPU has it (the AVX-512 path's caller).
bool ApplyMask(AttentionMaskType type, const char* m, int64_t stride, int64_t from, int64_t to,
               float* scores, uint8_t* hidden, bool avx512) {
  if (avx512 && type == AttentionMaskType::kBF16 && stride == 1) {
    return AddBf16BiasesAvx512(reinterpret_cast<const uint16_t*>(m) + from, to - from, scores,
                               hidden);
  }
  switch (type) {
    case AttentionMaskType::kBool:
      return AddBiases<AttentionMaskType::kBool>(m, stride, from, to, scores, hidden);
    case AttentionMaskType::kF32:
      return AddBiases<AttentionMaskType::kF32>(m, stride, from, to, scores, hidden);
    case AttentionMaskType::kBF16:
      return AddBiases<AttentionMaskType::kBF16>(m, stride, from, to, scores, hidden);
    case AttentionMaskType::kF16:
      return AddBiases<AttentionMaskType::kF16>(m, stride, from, to, scores, hidden);
    case AttentionMaskType::kNone:
      return false;
  }
  return false;
}

// Per-item buffers, reused across items.
struct Scratch {
  std::vector<float> q, acc, max, sum, scores, keys, values, keys_t;
  std::vector<uint8_t> hidden;
  std::vector<RowRange> ranges;
  // The batch index `ranges` holds rows of when the mask is the same for
  // every head (its rows then depend on the batch and query only): the
  // items of one batch reuse them. -1: none.
  int64_t ranges_batch = -1;
};

template <typename Ops>
void RunItem(const MaskedAttentionProblem& p, const char* query, const char* keys,
             const char* values, const char* mask, char* out, float* logsumexp, int64_t item,
             Scratch& s) {
  const int64_t b = item / p.kv_heads, kv_head = item % p.kv_heads;
  const int64_t group = p.heads / p.kv_heads, d = p.head_dim, dv = p.value_dim;
  const int64_t rows = group * p.q_len;  // row r: head kv_head * group + r / L, query r % L
  const int64_t qbytes = ElementBytes(p.query_type), kvbytes = ElementBytes(p.kv_type);
  const int64_t mbytes = MaskBytes(p.mask_type);
  s.q.resize(rows * d);
  s.acc.assign(rows * dv, 0.0f);
  s.max.assign(rows, kNegInf);
  s.sum.assign(rows, 0.0f);
  const bool shared_mask = p.mask_strides[1] == 0;
  const bool ranges_known = shared_mask && s.ranges_batch == b;
  s.ranges.resize(rows);
  s.ranges_batch = shared_mask ? b : -1;
  // The AVX-512 path scores tiles of rows when an item has many (a prefill).
  constexpr bool kAvx512 = std::is_same_v<Ops, Avx512Ops>;
  const bool tiled = kAvx512 && rows >= kMinTiledRows;
  // Fewer rows with bf16 keys and values: those read in place, a group of
  // rows at a time (attention_bf16_rows.h), not widened into copies.
  const bool in_place = kAvx512 && !tiled && p.kv_type == GemmOperandType::kBF16;
  s.scores.resize(kKeyBlock * (tiled      ? attention_ops::kScoreTileRows
                               : in_place ? attention_ops::kBf16Rows
                                          : 1));
  if (tiled) s.keys_t.resize(kKeyBlock * d);
  s.hidden.resize(kKeyBlock);
  if (!in_place) {
    s.keys.resize(kKeyBlock * d);
    s.values.resize(kKeyBlock * dv);
  }
  auto mask_row = [&](int64_t head, int64_t i) -> const char* {
    if (mask == nullptr) return nullptr;
    return mask + (b * p.mask_strides[0] + head * p.mask_strides[1] + i * p.mask_strides[2]) *
                      mbytes;
  };
  int64_t lo = p.kv_len, hi = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t head = kv_head * group + r / p.q_len, i = r % p.q_len;
    Widen<Ops>(p.query_type,
               query + (b * p.query_strides[0] + head * p.query_strides[1] +
                        i * p.query_strides[2]) * qbytes,
               d, &s.q[r * d]);
    // A mask the heads share (stride 0) gives every group, and every item
    // of the batch, the same ranges.
    if (!ranges_known) {
      s.ranges[r] = r >= p.q_len && shared_mask ? s.ranges[i]
                                                : VisibleRange(p, mask_row(head, i), i);
    }
    if (s.ranges[r].first < s.ranges[r].limit) {
      lo = std::min(lo, s.ranges[r].first);
      hi = std::max(hi, s.ranges[r].limit);
    }
  }
  const char* key_base = keys + (b * p.key_strides[0] + kv_head * p.key_strides[1]) * kvbytes;
  const char* value_base =
      values + (b * p.value_strides[0] + kv_head * p.value_strides[1]) * kvbytes;
  for (int64_t block = lo / kKeyBlock * kKeyBlock; block < hi; block += kKeyBlock) {
    const int64_t begin = std::max(lo, block), end = std::min(hi, block + kKeyBlock);
    // Row r's scores over its visible keys [from, to) of this block (at
    // `scores`, key from first) with its mask's biases added, as weights;
    // whether they are to be summed over the values (PrepareWeights).
    auto prepare = [&](int64_t r, int64_t from, int64_t to, float* scores) {
      const int64_t head = kv_head * group + r / p.q_len, i = r % p.q_len;
      const char* m = mask_row(head, i);
      const bool any_hidden =
          m != nullptr && ApplyMask(p.mask_type, m, p.mask_strides[3], from, to, scores,
                                    s.hidden.data(), kAvx512);
      return PrepareWeights<Ops>(scores, any_hidden ? s.hidden.data() : nullptr, to - from,
                                 dv, s.max[r], s.sum[r], &s.acc[r * dv], p.kv_type);
    };
    auto visible = [&](int64_t r) {
      return RowRange{std::max(begin, s.ranges[r].first), std::min(end, s.ranges[r].limit)};
    };
    if (in_place) {
      // Consecutive rows that see the same keys of this block, up to
      // kBf16Rows at a time (a decode step's query heads of this kv head).
      const uint16_t* k = reinterpret_cast<const uint16_t*>(key_base);
      const uint16_t* v = reinterpret_cast<const uint16_t*>(value_base);
      for (int64_t r0 = 0; r0 < rows;) {
        const RowRange vis = visible(r0);
        int count = 1;
        for (; count < attention_ops::kBf16Rows && r0 + count < rows; ++count) {
          const RowRange next = visible(r0 + count);
          if (next.first != vis.first || next.limit != vis.limit) break;
        }
        if (vis.first < vis.limit) {
          const int64_t n = vis.limit - vis.first;
          attention_ops::ScoreRowsBf16UpTo4(count, &s.q[r0 * d], d,
                                            k + vis.first * p.key_strides[2], p.key_strides[2],
                                            n, d, p.scale, s.scores.data(), kKeyBlock);
          const float* weights[attention_ops::kBf16Rows];
          float* sums[attention_ops::kBf16Rows];
          int live = 0;
          for (int t = 0; t < count; ++t) {
            float* w = s.scores.data() + t * kKeyBlock;
            if (!prepare(r0 + t, vis.first, vis.limit, w)) continue;
            weights[live] = w;
            sums[live++] = &s.acc[(r0 + t) * dv];
          }
          if (live > 0) {
            attention_ops::AccumulateRowsBf16UpTo4(live, weights,
                                                   v + vis.first * p.value_strides[2],
                                                   p.value_strides[2], n, dv, sums);
          }
        }
        r0 += count;
      }
      continue;
    }
    // The block's keys and values widened to f32 once for all the item's
    // rows (an f32 block of contiguous rows is read in place).
    const float *k, *v;
    if (p.kv_type == GemmOperandType::kF32 && p.key_strides[2] == d) {
      k = reinterpret_cast<const float*>(key_base + begin * d * kvbytes);
    } else {
      for (int64_t j = begin; j < end; ++j) {
        Widen<Ops>(p.kv_type, key_base + j * p.key_strides[2] * kvbytes, d,
                   &s.keys[(j - begin) * d]);
      }
      k = s.keys.data();
    }
    if (p.kv_type == GemmOperandType::kF32 && p.value_strides[2] == dv) {
      v = reinterpret_cast<const float*>(value_base + begin * dv * kvbytes);
    } else {
      for (int64_t j = begin; j < end; ++j) {
        Widen<Ops>(p.kv_type, value_base + j * p.value_strides[2] * kvbytes, dv,
                   &s.values[(j - begin) * dv]);
      }
      v = s.values.data();
    }
    // prepare, then the weights summed over the widened values.
    auto fold = [&](int64_t r, int64_t from, int64_t to, float* scores) {
      if (prepare(r, from, to, scores)) {
        Ops::Accumulate(scores, v + (from - begin) * dv, to - from, dv, &s.acc[r * dv]);
      }
    };
    if (!tiled) {
      for (int64_t r = 0; r < rows; ++r) {
        const RowRange vis = visible(r);
        if (vis.first >= vis.limit) continue;
        Ops::Scores(&s.q[r * d], k + (vis.first - begin) * d, vis.limit - vis.first, d,
                    p.scale, s.scores.data());
        fold(r, vis.first, vis.limit, s.scores.data());
      }
      continue;
    }
    // Tiles of rows: each row's scores over the 16-key groups spanning the
    // tile's visible keys (row t of the tile at s.scores + t * kKeyBlock,
    // key `begin` first).
    attention_ops::TransposeKeys16(k, end - begin, d, s.keys_t.data());
    for (int64_t r0 = 0; r0 < rows; r0 += attention_ops::kScoreTileRows) {
      const int tile = static_cast<int>(std::min<int64_t>(attention_ops::kScoreTileRows,
                                                          rows - r0));
      int64_t from = end, to = begin;
      for (int t = 0; t < tile; ++t) {
        const RowRange vis = visible(r0 + t);
        if (vis.first >= vis.limit) continue;
        from = std::min(from, vis.first);
        to = std::max(to, vis.limit);
      }
      if (from >= to) continue;
      const int64_t g0 = (from - begin) / 16, g1 = (to - begin + 15) / 16;
      attention_ops::ScoreRowsUpTo4(tile, &s.q[r0 * d], d, s.keys_t.data() + g0 * d * 16,
                                    g1 - g0, d, p.scale, s.scores.data() + g0 * 16, kKeyBlock);
      for (int t = 0; t < tile; ++t) {
        const RowRange vis = visible(r0 + t);
        if (vis.first >= vis.limit) continue;
        fold(r0 + t, vis.first, vis.limit,
             s.scores.data() + t * kKeyBlock + (vis.first - begin));
      }
    }
  }
  const int64_t obytes = ElementBytes(p.out_type);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t head = kv_head * group + r / p.q_len, i = r % p.q_len;
    float* acc = &s.acc[r * dv];
    if (s.sum[r] > 0.0f) Ops::Scale(1.0f / s.sum[r], acc, dv);  // NaN sum: acc is NaN
    Narrow(p.out_type, acc, dv,
           out + (b * p.out_strides[0] + head * p.out_strides[1] + i * p.out_strides[2]) *
                     obytes);
    if (logsumexp != nullptr) {
      logsumexp[(b * p.heads + head) * p.q_len + i] =
          s.sum[r] != 0.0f ? s.max[r] + std::log(s.sum[r]) : kNegInf;
    }
  }
}

template <typename Ops>
void RunItems(const MaskedAttentionProblem& p, const void* query, const void* keys,
              const void* values, const void* mask, void* out, float* logsumexp, int64_t block,
              int64_t blocks) {
  const int64_t items = p.batch * p.kv_heads;
  Scratch scratch;
  for (int64_t item = block * items / blocks; item < (block + 1) * items / blocks; ++item) {
    RunItem<Ops>(p, static_cast<const char*>(query), static_cast<const char*>(keys),
                 static_cast<const char*>(values), static_cast<const char*>(mask),
                 static_cast<char*>(out), logsumexp, item, scratch);
  }
}

}  // namespace

void RunMaskedAttentionBlock(const MaskedAttentionProblem& p, const void* query,
                             const void* keys, const void* values, const void* mask, void* out,
                             float* logsumexp, int64_t block, int64_t blocks, AttentionIsa isa) {
  if (p.batch <= 0 || p.q_len <= 0 || p.kv_heads <= 0 || p.head_dim <= 0 || p.value_dim <= 0 ||
      blocks <= 0 || p.heads % p.kv_heads != 0) {
    return;
  }
  if (p.mask_type == AttentionMaskType::kNone) mask = nullptr;
  if (isa == AttentionIsa::kAvx512) {
    RunItems<Avx512Ops>(p, query, keys, values, mask, out, logsumexp, block, blocks);
  } else if (isa == AttentionIsa::kAvx2) {
    RunItems<Avx2Ops>(p, query, keys, values, mask, out, logsumexp, block, blocks);
  } else {
    RunItems<PortableOps>(p, query, keys, values, mask, out, logsumexp, block, blocks);
  }
}

}  // namespace rbln::compiler

extern "C" void rbln_masked_attention(int64_t problem, int64_t query, int64_t keys,
                                      int64_t values, int64_t mask, int64_t out,
                                      int64_t logsumexp, int64_t block, int64_t blocks) {
  const rbln::compiler::MaskedAttentionProblem p =
      rbln::compiler::MaskedAttentionProblem::Decode(reinterpret_cast<const int64_t*>(problem));
  // Work items (batch x kv head) this kernel ran: what shows a program's
  // attention took the kernel rather than the element-wise lowering.
  static rbln::Counter* const items =
      rbln::CounterRegistry::Global().Get("compiler/masked_attention/items");
  const int64_t total = p.batch * p.kv_heads;
  items->Add((block + 1) * total / blocks - block * total / blocks);
  rbln::compiler::RunMaskedAttentionBlock(
      p, reinterpret_cast<const void*>(query), reinterpret_cast<const void*>(keys),
      reinterpret_cast<const void*>(values), reinterpret_cast<const void*>(mask),
      reinterpret_cast<void*>(out), reinterpret_cast<float*>(logsumexp), block, blocks);
}
