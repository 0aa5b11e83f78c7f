#include "rbln/compiler/kernels/masked_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "rbln/compiler/kernels/attention_vector_ops.h"
#include "rbln/compiler/kernels/half_convert.h"
#include "rbln/core/counters.h"

namespace rbln::compiler {
namespace {

using attention_ops::Avx2Ops;
using attention_ops::Avx512Ops;
using attention_ops::ElementBytes;
using attention_ops::FoldScores;
using attention_ops::Narrow;
using attention_ops::PortableOps;
using attention_ops::Widen;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Keys a block widens and scores at a time, blocks aligned to multiples of
// it: PyTorch's CPU flash attention's kv split (512), so a half weight is
// rounded relative to the same running max as there (its exp(s - max)
// in the input type), which keeps bf16 greedy decoding on PyTorch's
// tokens through near ties.
constexpr int64_t kKeyBlock = 512;

// The mask element at `at` as a bias in f32: -inf hides (bool false hides).
float MaskBias(AttentionMaskType type, const char* at) {
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

int64_t MaskBytes(AttentionMaskType type) {
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

// Per-item buffers, reused across items.
struct Scratch {
  std::vector<float> q, acc, max, sum, scores, keys, values;
  std::vector<uint8_t> hidden;
  std::vector<RowRange> ranges;
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
  s.ranges.resize(rows);
  s.scores.resize(kKeyBlock);
  s.hidden.resize(kKeyBlock);
  s.keys.resize(kKeyBlock * d);
  s.values.resize(kKeyBlock * dv);
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
    // A mask the heads share (stride 0) gives every group the same ranges.
    s.ranges[r] = r >= p.q_len && p.mask_strides[1] == 0 ? s.ranges[i]
                                                         : VisibleRange(p, mask_row(head, i), i);
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
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t from = std::max(begin, s.ranges[r].first);
      const int64_t to = std::min(end, s.ranges[r].limit);
      if (from >= to) continue;
      const int64_t head = kv_head * group + r / p.q_len, i = r % p.q_len;
      float* scores = s.scores.data();
      Ops::Scores(&s.q[r * d], k + (from - begin) * d, to - from, d, p.scale, scores);
      const char* m = mask_row(head, i);
      bool any_hidden = false;
      if (m != nullptr) {
        for (int64_t j = from; j < to; ++j) {
          const float bias = MaskBias(p.mask_type, m + j * p.mask_strides[3] * mbytes);
          const bool hide = bias == kNegInf;
          s.hidden[j - from] = hide;
          any_hidden |= hide;
          scores[j - from] = hide ? kNegInf : scores[j - from] + bias;
        }
      }
      FoldScores<Ops>(scores, v + (from - begin) * dv, any_hidden ? s.hidden.data() : nullptr,
                      to - from, dv, s.max[r], s.sum[r], &s.acc[r * dv], p.kv_type);
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
