#include "rbln/compiler/kernels/onednn_gemm.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "oneapi/dnnl/dnnl.h"
#include "rbln/compiler/kernels/bf16_skinny_gemm.h"
#include "rbln/compiler/kernels/bf16_split.h"
#include "rbln/compiler/kernels/half_convert.h"
#include "rbln/compiler/kernels/input_content.h"
#include "rbln/compiler/kernels/onednn_gemm_plan.h"
#include "rbln/compiler/kernels/packed_weights.h"
#include "rbln/compiler/kernels/weight_panels.h"

namespace rbln::compiler {
namespace {

using gemm_plan::LowProblem;
using gemm_plan::OperandBytes;
using gemm_plan::PairedColumns;
using gemm_plan::PackedWeightKey;
using gemm_plan::PairedPrimitiveUsable;
using gemm_plan::Primitive;
using gemm_plan::PrimitiveFor;
using gemm_plan::StackedProblem;
using gemm_plan::StoreBytes;
using gemm_plan::TripledProblem;
using gemm_plan::UseBf16x3;
using gemm_plan::WidenedColumns;
using gemm_plan::WidenedProblem;
using gemm_plan::WithDenseC;
using onednn::Api;

// Buffer slots of onednn::ThreadState.
constexpr int kScratchpadSlot = 0;
constexpr int kUnfusedResultSlot = 1;
constexpr int kWidenedASlot = 2;  // a kF16 block's A as f32
constexpr int kWidenedBSlot = 3;  // and its B
constexpr int kStagedResultSlot = 4;  // a column block's C, dense
constexpr int kSplitASlot = 5;  // a kF16 block's A as [Ah | Al | Ah] bf16
constexpr int kSplitBSlot = 6;  // and its B as [Bh ; Bh ; Bl]
constexpr int kPairedASlot = 7;   // a kF16 block's A as [Ah ; Al] bf16
constexpr int kStackedSlot = 8;   // [Ah ; Al] x Bh of a column chunk
constexpr int kCombinedSlot = 9;  // its two halves added, and then Ah x Bl
constexpr int kPackedOnceSlot = 10;  // a weight's packed Bh, Bl for one call
constexpr int kSkinnyResultSlot = 11;  // a skinny bf16 block's product

// Widens `rows` x `cols` matrices of `type` (kF16 or kBF16; row stride
// `ld`, batch stride `stride`) into the dense f32 stack `dst`.
void WidenStack(GemmOperandType type, const void* src, int64_t batch,
                int64_t rows, int64_t cols, int64_t ld, int64_t stride,
                float* dst) {
  const uint16_t* h = static_cast<const uint16_t*>(src);
  for (int64_t bt = 0; bt < batch; ++bt) {
    float* out = dst + bt * rows * cols;
    if (type == GemmOperandType::kBF16) {
      Bf16ToFloat(h + bt * stride, rows, cols, ld, out, cols);
    } else {
      HalfToFloat(h + bt * stride, rows, cols, ld, out, cols);
    }
  }
}

// Splits `rows` x `cols` half matrices (row stride `ld`, batch stride
// `stride`) into dense K-tripled stacks at `dst` (rows x 3cols each) by
// `split` (bf16_split.h); false if some value is not finite.
bool SplitHalfStack(const void* src, int64_t batch, int64_t rows,
                    int64_t cols, int64_t ld, int64_t stride, uint16_t* dst,
                    bool (*split)(const uint16_t*, int64_t, int64_t, int64_t,
                                  uint16_t*)) {
  const uint16_t* h = static_cast<const uint16_t*>(src);
  bool finite = true;
  for (int64_t bt = 0; bt < batch; ++bt) {
    finite &=
        split(h + bt * stride, rows, cols, ld, dst + bt * rows * 3 * cols);
  }
  return finite;
}

// Op(B) of a K-tripled problem: [Bh ; Bh ; Bl] from B [k, n], or its
// transposed layout from B stored [n, k].
bool SplitB(const GemmProblem& q, const void* b, int64_t n, uint16_t* dst) {
  return q.trans_b
             ? SplitHalfStack(b, q.batch, n, q.k, q.ldb, q.stride_b, dst,
                              SplitRowsOfTransposedB)
             : SplitHalfStack(b, q.batch, q.k, n, q.ldb, q.stride_b, dst,
                              SplitRowsOfB);
}

// Stores `q`'s f32 product `r` (dense: batch x m x n) into C at `c`, its
// rows `ldc` apart: added to C when q.accumulate (the epilogue is then
// plain), else through the epilogue (per-column rows at `sides`, `sides_ld`
// apart) in its store type.
void StoreProduct(const GemmProblem& q, const float* r, void* c, int64_t ldc,
                  const float* sides, int64_t sides_ld) {
  const int64_t out_bytes = StoreBytes(q.epilogue.store);
  for (int64_t bt = 0; bt < q.batch; ++bt) {
    for (int64_t i = 0; i < q.m; ++i) {
      char* row = static_cast<char*>(c) + (bt * q.stride_c + i * ldc) * out_bytes;
      const float* product = r + (bt * q.m + i) * q.n;
      if (q.accumulate) {
        float* out = reinterpret_cast<float*>(row);
        for (int64_t j = 0; j < q.n; ++j) out[j] += product[j];
        continue;
      }
      for (int64_t j = 0; j < q.n; ++j) {
        q.epilogue.Store(q.epilogue.Apply(product[j], sides, sides_ld, j),
                         row + j * out_bytes);
      }
    }
  }
}

// Runs `q` (a block, or a column chunk of one) on this thread with one call
// of `prim` (PrimitiveFor(q), or with B packed): A and B (as `prim` reads
// it) at their first elements; C at `c`, its rows `ldc` apart -- when that
// is not q.ldc, the product goes to a dense buffer first and its rows are
// copied (in before an accumulating product, out after); the epilogue's
// per-column rows at `sides` (this part's first column), `sides_ld` apart.
void Multiply(const Api& d, onednn::ThreadState& thread, const GemmProblem& q,
              const Primitive& prim, const void* a, const void* b, void* c,
              int64_t ldc, const float* sides, int64_t sides_ld) {
  const int64_t out_bytes = StoreBytes(q.epilogue.store);
  const bool staged = ldc != q.ldc;
  const int64_t row_bytes = q.n * out_bytes;
  void* result = prim.epilogue_after
                     ? thread.Buffer(kUnfusedResultSlot,
                                     q.batch * q.m * q.n * sizeof(float))
                 : staged ? thread.Buffer(kStagedResultSlot, q.m * row_bytes)
                          : c;
  if (staged && q.accumulate) {
    for (int64_t i = 0; i < q.m; ++i) {
      std::memcpy(static_cast<char*>(result) + i * row_bytes,
                  static_cast<const char*>(c) + i * ldc * out_bytes, row_bytes);
    }
  }
  onednn::Memory ma(d, prim.a, const_cast<void*>(a));
  onednn::Memory mb(d, prim.b, const_cast<void*>(b));
  onednn::Memory mc(d, prim.c, result);
  std::vector<dnnl_exec_arg_t> args = {{DNNL_ARG_SRC, ma.get()},
                                       {DNNL_ARG_WEIGHTS, mb.get()},
                                       {DNNL_ARG_DST, mc.get()}};
  std::vector<std::unique_ptr<onednn::Memory>> side_memory;
  auto side = [&](const dnnl_memory_desc_t& desc, int64_t row) {
    side_memory.push_back(std::make_unique<onednn::Memory>(
        d, desc, const_cast<float*>(sides) + row * sides_ld));
    return side_memory.back()->get();
  };
  if (!prim.epilogue_after) {
    if (q.epilogue.bias_row >= 0) {
      args.push_back({DNNL_ARG_BIAS, side(prim.bias, q.epilogue.bias_row)});
    }
    for (size_t i = 0; i < q.epilogue.ops.size(); ++i) {
      const EpilogueOp& op = q.epilogue.ops[i];
      if (!op.binary) continue;
      args.push_back(
          {DNNL_ARG_ATTR_MULTIPLE_POST_OP(static_cast<int>(i)) | DNNL_ARG_SRC_1,
           side(prim.bias, op.row)});
    }
  }
  if (prim.scratchpad_bytes > 0) {
    side_memory.push_back(std::make_unique<onednn::Memory>(
        d, prim.scratchpad,
        thread.Buffer(kScratchpadSlot, prim.scratchpad_bytes)));
    args.push_back({DNNL_ARG_SCRATCHPAD, side_memory.back()->get()});
  }
  onednn::Execute(d, prim.primitive, args, "matmul " + gemm_plan::Describe(q));
  if (!prim.epilogue_after) {
    if (!staged) return;
    for (int64_t i = 0; i < q.m; ++i) {
      std::memcpy(static_cast<char*>(c) + i * ldc * out_bytes,
                  static_cast<const char*>(result) + i * row_bytes, row_bytes);
    }
    return;
  }
  StoreProduct(q, static_cast<const float*>(result), c, ldc, sides, sides_ld);
}

// Runs bf16 block `q` with the skinny kernel (bf16_skinny_gemm.h: B read
// as stored, f32 accumulation), then stores it as Multiply does.
void MultiplySkinny(onednn::ThreadState& thread, const GemmProblem& q,
                    const void* a, const void* b, void* c, const float* sides,
                    int64_t sides_ld) {
  float* product = static_cast<float*>(thread.Buffer(
      kSkinnyResultSlot, q.batch * q.m * q.n * sizeof(float)));
  SkinnyBf16Gemm(q, a, b, product);
  StoreProduct(q, product, c, q.ldc, sides, sides_ld);
}

// The content of block `q`'s B at `b` if it is a weight: read from a
// program input that keeps its bytes during the run (input_content.h).
std::optional<InputContent> WeightContent(const GemmProblem& q, const void* b) {
  if (q.batch != 1) return std::nullopt;
  const int64_t elements =
      q.trans_b ? (q.n - 1) * q.ldb + q.k : (q.k - 1) * q.ldb + q.n;
  return FindInputContent(b, elements * OperandBytes(q.type));
}

// The columns of a panel of `layout` (one of PackedLayouts), or 0.
int64_t PanelWidth(dnnl_format_tag_t layout) {
  switch (layout) {
    case dnnl_BA16a64b2a:
    case dnnl_BA16a64b:
      return 64;
    case dnnl_BA16a32b2a:
    case dnnl_BA16a32b:
      return 32;
    case dnnl_BA16a16b2a:
    case dnnl_BA16a16b:
      return 16;
    default:
      return 0;
  }
}

// B of `prim`'s problem, plain (`prim.plain_b`) at `from`, into its packed
// layout at `to`: a Linear weight (B stored [n, k]) by weight_panels.h,
// several times faster than oneDNN's reorder and the same bytes; others by
// the reorder.
void PackWeights(const Api& d, const Primitive& prim, const void* from,
                 void* to, const GemmProblem& q) {
  if (q.trans_b && q.batch == 1 &&
      (q.type == GemmOperandType::kBF16 || q.type == GemmOperandType::kF32)) {
    const WeightPanels panels{q.k, q.n, q.ldb, OperandBytes(q.type),
                              PanelWidth(prim.packed_layout)};
    if (panels.PackedBytes() == static_cast<int64_t>(prim.packed_b_bytes) &&
        PackWeightPanels(panels, from, to)) {
      return;
    }
  }
  onednn::Memory plain(d, prim.plain_b, const_cast<void*>(from));
  onednn::Memory packed(d, prim.b, to);
  onednn::Execute(d, prim.pack,
                  {{DNNL_ARG_FROM, plain.get()}, {DNNL_ARG_TO, packed.get()}},
                  "weights reorder for " + gemm_plan::Describe(q));
}

// The bf16x3 route for a kF16 weight, with B split and packed once as Bh
// and Bl: two bf16 copies, the bytes of the f32 weight, where the tripled
// [Bh ; Bh ; Bl] is three. Weight GEMMs stream B from memory at decoder
// sizes (docs/benchmarks.md), so the third copy cost a third more time.
// A chunk of columns at a time runs as two products that read each once:
//   D = [Ah ; Al] x Bh  (A split into its m rows of Ah, then m of Al)
//   C = epilogue(Ah x Bl + (D_Ah + D_Al [+ C]))  (oneDNN's sum post-op)
// with D in the caches between them.

// The key word after q.Encode() of a weight split this way.
constexpr int64_t kPairedWeightKey = 16;

// Op(B) rows [first, first + k) of the split B at `b3` (SplitB's), from
// column `j` on.
const uint16_t* SplitBPart(const GemmProblem& q, const uint16_t* b3,
                           int64_t first, int64_t j) {
  return q.trans_b ? b3 + j * 3 * q.k + first : b3 + first * q.n + j;
}

// Runs weight block `q` (kF16, on the bf16x3 route) as above; false, having
// written nothing, when the route does not apply: a bf16 store (the sum
// post-op would read C rounded), a primitive that is not AMX brgemm with
// packed B and fused post-ops, or a value in A or B that is not finite.
bool MultiplyPairedWeight(const Api& d, onednn::ThreadState& thread,
                          const GemmProblem& q, const InputContent& weight,
                          const void* a, const void* b, char* c,
                          const float* sides, int64_t sides_ld) {
  if (q.batch != 1 || q.epilogue.store != StoreType::kF32) return false;
  const int64_t chunk = PairedColumns(q);
  uint64_t packed_bytes = 0;
  for (int64_t j = 0; j < q.n; j += chunk) {
    const int64_t n = std::min(chunk, q.n - j);
    const Primitive& stacked =
        PrimitiveFor(d, StackedProblem(q, n), /*packed_weights=*/true);
    const Primitive& low =
        PrimitiveFor(d, LowProblem(q, n), /*packed_weights=*/true);
    if (!PairedPrimitiveUsable(stacked) || !PairedPrimitiveUsable(low)) {
      return false;
    }
    packed_bytes += stacked.packed_b_bytes + low.packed_b_bytes;
  }
  uint16_t* a2 = static_cast<uint16_t*>(
      thread.Buffer(kPairedASlot, q.m * 2 * q.k * sizeof(uint16_t)));
  const uint16_t* a16 = static_cast<const uint16_t*>(a);
  bool finite = true;
  for (int64_t i = 0; i < q.m; ++i) {
    uint16_t* hi = a2 + i * q.k;
    // hi twice to the same place: SplitHalfRow's second copy is not needed.
    finite &= SplitHalfRow(a16 + i * q.lda, q.k, hi, hi, hi + q.m * q.k);
  }
  if (!finite) return false;
  std::vector<int64_t> key = q.Encode();
  key.push_back(kPairedWeightKey);
  // The packed Bh and Bl of each chunk in turn, then whether B was finite.
  auto pack = [&](void* out) {
    std::vector<uint16_t> b3(3 * q.k * q.n);
    const bool b_finite = SplitB(q, b, q.n, b3.data());
    char* to = static_cast<char*>(out);
    for (int64_t j = 0; j < q.n; j += chunk) {
      const int64_t n = std::min(chunk, q.n - j);
      const GemmProblem s = StackedProblem(q, n);
      const GemmProblem l = LowProblem(q, n);
      const Primitive& stacked = PrimitiveFor(d, s, true);
      const Primitive& low = PrimitiveFor(d, l, true);
      PackWeights(d, stacked, SplitBPart(q, b3.data(), 0, j), to, s);
      to += stacked.packed_b_bytes;
      PackWeights(d, low, SplitBPart(q, b3.data(), 2 * q.k, j), to, l);
      to += low.packed_b_bytes;
    }
    *to = b_finite;
  };
  std::shared_ptr<const void> packed =
      PackedWeightCache::Global().Get(weight, key, packed_bytes + 1, pack);
  const char* from = static_cast<const char*>(packed.get());
  if (packed == nullptr) {
    // Not kept (the weight's first use, or no room): packed for this call
    // alone, so that every call of a program computes the same bits.
    void* once = thread.Buffer(kPackedOnceSlot, packed_bytes + 1);
    pack(once);
    from = static_cast<const char*>(once);
  }
  if (!from[packed_bytes]) return false;
  for (int64_t j = 0; j < q.n; j += chunk) {
    const int64_t n = std::min(chunk, q.n - j);
    const GemmProblem s = StackedProblem(q, n);
    const GemmProblem l = LowProblem(q, n);
    const Primitive& stacked = PrimitiveFor(d, s, true);
    const Primitive& low = PrimitiveFor(d, l, true);
    float* stack = static_cast<float*>(
        thread.Buffer(kStackedSlot, 2 * q.m * n * sizeof(float)));
    Multiply(d, thread, s, stacked, a2, from, stack, s.ldc, nullptr, 0);
    from += stacked.packed_b_bytes;
    // C's chunk itself when dense, else a dense buffer copied out after.
    float* c_chunk = reinterpret_cast<float*>(c) + j;
    const bool dense = q.ldc == n;
    float* sum = dense ? c_chunk
                       : static_cast<float*>(thread.Buffer(
                             kCombinedSlot, q.m * n * sizeof(float)));
    for (int64_t i = 0; i < q.m; ++i) {
      const float* high = stack + i * n;
      const float* low_part = high + q.m * n;
      float* out = sum + i * n;
      const float* old = c_chunk + i * q.ldc;
      if (q.accumulate) {
        for (int64_t x = 0; x < n; ++x) out[x] = old[x] + (high[x] + low_part[x]);
      } else {
        for (int64_t x = 0; x < n; ++x) out[x] = high[x] + low_part[x];
      }
    }
    Multiply(d, thread, l, low, a2, from, sum, l.ldc,
             sides ? sides + j : nullptr, sides_ld);
    from += low.packed_b_bytes;
    if (dense) continue;
    for (int64_t i = 0; i < q.m; ++i) {
      std::memcpy(c_chunk + i * q.ldc, sum + i * n, n * sizeof(float));
    }
  }
  return true;
}

}  // namespace

void RunGemmBlock(const GemmProblem& p, const void* a, const void* b, void* c,
                  const float* sides, int64_t block, int64_t blocks) {
  const Api& d = onednn::Library();
  if (!d.error.empty()) onednn::Fail(d.error);
  if (p.accumulate && !p.epilogue.IsPlain()) {
    onednn::Fail("GEMM: an epilogue with accumulation into C for " +
                 gemm_plan::Describe(p));
  }
  const GemmBlock part = GemmBlockOf(p, block, blocks);
  const GemmProblem& q = part.problem;
  if (q.batch <= 0 || q.m <= 0 || q.n <= 0 || q.k <= 0) return;
  // Before the primitive: oneDNN sizes its blocking by the thread count.
  onednn::OneOmpThread one_thread(d);
  onednn::ThreadState& thread = onednn::ThisThread(d);
  const int64_t in_bytes = OperandBytes(p.type);
  const int64_t out_bytes = StoreBytes(p.epilogue.store);
  const char* a_block = static_cast<const char*>(a) + part.offset_a * in_bytes;
  const char* b_block = static_cast<const char*>(b) + part.offset_b * in_bytes;
  char* c_block = static_cast<char*>(c) + part.offset_c * out_bytes;
  const float* sides_block = sides ? sides + part.column : nullptr;
  // bf16 with few rows (a decode step's): B read as stored by the skinny
  // kernel (SkinnyBf16Preferred), not widened to an f32 copy (twice the
  // bytes) nor read from a packed one. Chosen by the whole problem, so
  // every block of it takes it.
  if (SkinnyBf16Preferred(p, onednn::HasBf16(d))) {
    MultiplySkinny(thread, q, a_block, b_block, c_block, sides_block, p.n);
    return;
  }
  // A weight (B read from an input that keeps its bytes) is packed into
  // the layout oneDNN's brgemm reads once per version of its bytes, not
  // re-laid out (and for f16 widened) by every call; one copy for every M.
  // Where the cache keeps none (a version's first use, no room) the call
  // packs a copy of its own: every call runs the same packed primitive.
  const std::optional<InputContent> weight = WeightContent(q, b_block);
  // f16 (oneDNN 2.6 has no f16 matmul), and bf16 where oneDNN has no bf16
  // kernels (HasBf16), run on f32 or bf16x3 copies below.
  const bool narrow_operands =
      p.type == GemmOperandType::kF16 ||
      (p.type == GemmOperandType::kBF16 && !onednn::HasBf16(d));
  if (!narrow_operands) {
    const GemmProblem dense = WithDenseC(q);
    if (weight.has_value()) {
      const Primitive& prim = PrimitiveFor(d, dense, /*packed_weights=*/true);
      if (prim.pack != nullptr) {
        std::shared_ptr<const void> packed =
            PackedWeightCache::Global().GetOrPackOnce(
                *weight, PackedWeightKey(dense, prim, 0), prim.packed_b_bytes,
                [&](void* out) { PackWeights(d, prim, b_block, out, dense); });
        Multiply(d, thread, dense, prim, a_block, packed.get(), c_block, q.ldc,
                 sides_block, p.n);
        return;
      }
    }
    Multiply(d, thread, dense, PrimitiveFor(d, dense), a_block, b_block,
             c_block, q.ldc, sides_block, p.n);
    return;
  }
  // f16 (F16GemmRoute): split into K-tripled bf16 operands, or widened to
  // f32 -- also on the bf16x3 route where an infinity or NaN is: the whole
  // block for one in A, a chunk of columns (or a weight) for one in B.
  // bf16 without bf16 kernels: widened to f32 (exact), as f16's f32 route.
  const bool bf16x3 = p.type == GemmOperandType::kF16 &&
                      UseBf16x3(d, q, weight.has_value());
  if (bf16x3 && weight.has_value() &&
      MultiplyPairedWeight(d, thread, q, *weight, a_block, b_block, c_block,
                           sides_block, p.n)) {
    return;
  }
  uint16_t* a3 = nullptr;
  if (bf16x3) {
    a3 = static_cast<uint16_t*>(thread.Buffer(
        kSplitASlot, q.batch * q.m * 3 * q.k * sizeof(uint16_t)));
    if (!SplitHalfStack(a_block, q.batch, q.m, q.k, q.lda, q.stride_a, a3,
                        SplitRowsOfA)) {
      a3 = nullptr;
    }
  }
  float* a32 = nullptr;
  auto widened_a = [&] {
    if (a32 == nullptr) {
      a32 = static_cast<float*>(
          thread.Buffer(kWidenedASlot, q.batch * q.m * q.k * sizeof(float)));
      WidenStack(q.type, a_block, q.batch, q.m, q.k, q.lda, q.stride_a, a32);
    }
    return a32;
  };
  if (weight.has_value() && a3 != nullptr) {
    // A weight: split and packed once per version, under a key of its own
    // (the route's), with a byte after the packed B saying whether it was
    // finite.
    const GemmProblem tripled = WithDenseC(TripledProblem(q));
    const Primitive& prim = PrimitiveFor(d, tripled, /*packed_weights=*/true);
    const std::vector<int64_t> key = PackedWeightKey(
        q, prim, static_cast<int64_t>(F16GemmRoute::kBf16x3));
    std::shared_ptr<const void> packed =
        prim.pack == nullptr
            ? nullptr
            : PackedWeightCache::Global().GetOrPackOnce(
                  *weight, key, prim.packed_b_bytes + 1, [&](void* out) {
                    std::vector<uint16_t> b3(3 * q.k * q.n);
                    const bool finite = SplitB(q, b_block, q.n, b3.data());
                    PackWeights(d, prim, b3.data(), out, tripled);
                    static_cast<char*>(out)[prim.packed_b_bytes] = finite;
                  });
    if (packed != nullptr) {
      if (static_cast<const char*>(packed.get())[prim.packed_b_bytes]) {
        Multiply(d, thread, tripled, prim, a3, packed.get(), c_block, q.ldc,
                 sides_block, p.n);
        return;
      }
      a3 = nullptr;  // B is not finite: the widened weight below
    }
  }
  if (weight.has_value() && a3 == nullptr) {
    // A weight: widened and packed once, under the f32 route's key.
    const GemmProblem wide = WithDenseC(WidenedProblem(q));
    const Primitive& prim = PrimitiveFor(d, wide, /*packed_weights=*/true);
    std::shared_ptr<const void> packed =
        prim.pack == nullptr
            ? nullptr
            : PackedWeightCache::Global().GetOrPackOnce(
                  *weight,
                  PackedWeightKey(
                      q, prim, static_cast<int64_t>(F16GemmRoute::kWidenedF32)),
                  prim.packed_b_bytes, [&](void* out) {
                    std::vector<float> b32(q.k * q.n);
                    if (q.trans_b) {
                      WidenStack(q.type, b_block, 1, q.n, q.k, q.ldb, 0, b32.data());
                    } else {
                      WidenStack(q.type, b_block, 1, q.k, q.n, q.ldb, 0, b32.data());
                    }
                    PackWeights(d, prim, b32.data(), out, wide);
                  });
    if (packed != nullptr) {
      Multiply(d, thread, wide, prim, widened_a(), packed.get(), c_block,
               q.ldc, sides_block, p.n);
      return;
    }
  }
  // Otherwise B a chunk of columns at a time (in its stored layout), each
  // chunk one primitive call.
  const int64_t chunk = WidenedColumns(q);
  for (int64_t j = 0; j < q.n; j += chunk) {
    GemmProblem r = q;
    r.n = std::min(chunk, q.n - j);
    const char* b_chunk = b_block + (q.trans_b ? j * q.ldb : j) * in_bytes;
    char* c_chunk = c_block + j * out_bytes;
    const float* sides_chunk = sides_block ? sides_block + j : nullptr;
    if (a3 != nullptr) {
      uint16_t* b3 = static_cast<uint16_t*>(thread.Buffer(
          kSplitBSlot, q.batch * 3 * q.k * chunk * sizeof(uint16_t)));
      if (SplitB(q, b_chunk, r.n, b3)) {
        const GemmProblem tripled = WithDenseC(TripledProblem(r));
        Multiply(d, thread, tripled, PrimitiveFor(d, tripled), a3, b3,
                 c_chunk, q.ldc, sides_chunk, p.n);
        continue;
      }
    }
    float* b32 = static_cast<float*>(
        thread.Buffer(kWidenedBSlot, q.batch * q.k * chunk * sizeof(float)));
    if (q.trans_b) {
      WidenStack(q.type, b_chunk, q.batch, r.n, q.k, q.ldb, q.stride_b, b32);
    } else {
      WidenStack(q.type, b_chunk, q.batch, q.k, r.n, q.ldb, q.stride_b, b32);
    }
    const GemmProblem wide = WithDenseC(WidenedProblem(r));
    Multiply(d, thread, wide, PrimitiveFor(d, wide), widened_a(), b32,
             c_chunk, q.ldc, sides_chunk, p.n);
  }
}

}  // namespace rbln::compiler

extern "C" void rbln_gemm(int64_t type, int64_t trans_b, int64_t accumulate,
                          int64_t batch, int64_t m, int64_t n, int64_t k,
                          int64_t lda, int64_t ldb, int64_t ldc,
                          int64_t stride_a, int64_t stride_b, int64_t stride_c,
                          int64_t a, int64_t b, int64_t c, int64_t block,
                          int64_t blocks) {
  using rbln::compiler::GemmOperandType;
  rbln::compiler::GemmProblem p;
  p.type = static_cast<GemmOperandType>(type);
  p.trans_b = trans_b != 0;
  p.accumulate = accumulate != 0;
  p.batch = batch;
  p.m = m;
  p.n = n;
  p.k = k;
  p.lda = lda;
  p.ldb = ldb;
  p.ldc = ldc;
  p.stride_a = stride_a;
  p.stride_b = stride_b;
  p.stride_c = stride_c;
  rbln::compiler::RunGemmBlock(p, reinterpret_cast<const void*>(a),
                               reinterpret_cast<const void*>(b),
                               reinterpret_cast<void*>(c), nullptr, block,
                               blocks);
}

extern "C" void rbln_gemm_problem(int64_t problem, int64_t a, int64_t b,
                                  int64_t c, int64_t sides, int64_t block,
                                  int64_t blocks) {
  const rbln::compiler::GemmProblem p = rbln::compiler::GemmProblem::Decode(
      reinterpret_cast<const int64_t*>(problem));
  rbln::compiler::RunGemmBlock(p, reinterpret_cast<const void*>(a),
                               reinterpret_cast<const void*>(b),
                               reinterpret_cast<void*>(c),
                               reinterpret_cast<const float*>(sides), block,
                               blocks);
}
