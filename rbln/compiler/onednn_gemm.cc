#include "rbln/compiler/onednn_gemm.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "oneapi/dnnl/dnnl.h"
#include "rbln/compiler/bf16_split.h"
#include "rbln/compiler/half_convert.h"
#include "rbln/compiler/input_content.h"
#include "rbln/compiler/packed_weights.h"
#include "rbln/core/env.h"

namespace rbln::compiler {
namespace {

using onednn::Api;
using onednn::Check;

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

constexpr char kF16RouteVariable[] = "RBLN_COMPILER_F16_GEMM";

// SetF16GemmRoute's override, or -1.
std::atomic<int> route_override{-1};

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

std::string Describe(const GemmProblem& p) {
  return absl::StrFormat(
      "type %d trans_b %d batch %d m %d n %d k %d lda %d ldb %d ldc %d "
      "epilogue [%s]",
      static_cast<int>(p.type), p.trans_b, p.batch, p.m, p.n, p.k, p.lda,
      p.ldb, p.ldc, p.epilogue.ToString());
}

// A matrix stack as oneDNN sees it: 2-D, or 3-D with a batch stride.
dnnl_memory_desc_t Desc(const Api& d, const GemmProblem& p, int64_t rows,
                        int64_t cols, int64_t row_stride, int64_t col_stride,
                        int64_t batch_stride, dnnl_data_type_t type) {
  dnnl_memory_desc_t md;
  const bool batched = p.batch > 1;
  dnnl_dims_t dims = {}, strides = {};
  int i = 0;
  if (batched) {
    dims[i] = p.batch;
    strides[i++] = batch_stride;
  }
  dims[i] = rows;
  strides[i++] = row_stride;
  dims[i] = cols;
  strides[i++] = col_stride;
  Check(d.memory_desc_init_by_strides(&md, i, dims, type, strides),
        "matmul memory descriptor for " + Describe(p));
  return md;
}

// The matmul primitive descriptor of `p` with `attr`, or null.
dnnl_primitive_desc_t Create(const Api& d, const GemmProblem& p,
                             Primitive& prim, dnnl_primitive_attr_t attr) {
  dnnl_matmul_desc_t desc;
  const bool bias = prim.epilogue_after ? false : p.epilogue.bias_row >= 0;
  Check(d.matmul_desc_init(&desc, &prim.a, &prim.b, bias ? &prim.bias : nullptr,
                           &prim.c),
        "matmul descriptor for " + Describe(p));
  dnnl_primitive_desc_t pd = nullptr;
  if (d.primitive_desc_create(&pd, &desc, attr, d.engine, nullptr) !=
      dnnl_success) {
    return nullptr;
  }
  return pd;
}

// The blocked layouts oneDNN's brgemm matmul keeps op(B) [k, n] in (k in
// 16-row blocks, pairs of rows interleaved for bf16; n in 64, 32 or 16
// columns), the first it takes being the one it would copy B into itself.
// Asked for "any" layout instead, oneDNN 2.6 falls back to gemm:jit, far
// slower than brgemm with AMX or AVX-512 (measured: 2x on a decoder).
std::vector<dnnl_format_tag_t> PackedLayouts(GemmOperandType type) {
  if (type == GemmOperandType::kBF16) {
    return {dnnl_BA16a64b2a, dnnl_BA16a32b2a, dnnl_BA16a16b2a};
  }
  return {dnnl_BA16a64b, dnnl_BA16a32b, dnnl_BA16a16b};
}

// The primitive for `p` with op(B) in `b_layout` (dnnl_format_tag_undef: as
// stored, strided), or null if oneDNN has none or `accept` rejects the
// implementation it picked.
std::unique_ptr<Primitive> TryCreatePrimitive(
    const Api& d, const GemmProblem& p, dnnl_format_tag_t b_layout,
    bool (*accept)(const std::string& implementation)) {
  const dnnl_data_type_t in =
      p.type == GemmOperandType::kBF16 ? dnnl_bf16 : dnnl_f32;
  const dnnl_data_type_t out =
      p.epilogue.store == StoreType::kBF16 ? dnnl_bf16 : dnnl_f32;
  auto prim = std::make_unique<Primitive>();
  prim->a = Desc(d, p, p.m, p.k, p.lda, 1, p.stride_a, in);
  // op(B) is [k, n]: B itself when not transposed, else B [n, k] read by
  // columns.
  prim->b = p.trans_b ? Desc(d, p, p.k, p.n, 1, p.ldb, p.stride_b, in)
                      : Desc(d, p, p.k, p.n, p.ldb, 1, p.stride_b, in);
  prim->plain_b = prim->b;
  if (b_layout != dnnl_format_tag_undef) {
    dnnl_dims_t dims = {p.k, p.n};
    Check(d.memory_desc_init_by_tag(&prim->b, 2, dims, in, b_layout),
          "packed weights descriptor for " + Describe(p));
  }
  prim->c = Desc(d, p, p.m, p.n, p.ldc, 1, p.stride_c, out);
  const int ndims = p.batch > 1 ? 3 : 2;
  prim->bias = onednn::SideDesc(d, ndims, ndims - 1, p.n);
  // oneDNN 2.6's matmul reads binary post-op operands at channels computed
  // as if C were dense: with gaps between the matrices of a batch, every
  // matrix after the first gets the wrong ones (onednn_gemm_test), so their
  // epilogue runs after the product.
  const bool binary_ops = std::any_of(
      p.epilogue.ops.begin(), p.epilogue.ops.end(),
      [](const EpilogueOp& op) { return op.binary; });
  const bool fusable =
      !(binary_ops && p.batch > 1 && p.stride_c != p.m * p.ldc);
  dnnl_status_t status;
  dnnl_primitive_attr_t attr =
      fusable ? onednn::Attributes(d, p.epilogue, p.accumulate, ndims,
                                   ndims - 1, p.n, &status)
              : nullptr;
  dnnl_primitive_desc_t pd = attr ? Create(d, p, *prim, attr) : nullptr;
  if (attr) d.primitive_attr_destroy(attr);
  if (pd == nullptr && !p.epilogue.IsPlain()) {
    // The product alone into a contiguous f32 buffer, the epilogue after.
    prim->epilogue_after = true;
    prim->c = Desc(d, p, p.m, p.n, p.n, 1, p.m * p.n, dnnl_f32);
    attr = onednn::Attributes(d, LibraryEpilogue(), false, ndims, ndims - 1,
                              p.n, &status);
    pd = Create(d, p, *prim, attr);
    d.primitive_attr_destroy(attr);
  }
  if (pd == nullptr) return nullptr;
  prim->implementation = onednn::ImplementationOf(d, pd);
  if (!accept(prim->implementation)) {
    d.primitive_desc_destroy(pd);
    return nullptr;
  }
  prim->scratchpad = *d.primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  prim->scratchpad_bytes = d.memory_desc_get_size(&prim->scratchpad);
  if (b_layout != dnnl_format_tag_undef) {
    prim->packed_layout = b_layout;
    prim->packed_b_bytes = d.memory_desc_get_size(&prim->b);
    dnnl_primitive_desc_t reorder = nullptr;
    Check(d.reorder_primitive_desc_create(&reorder, &prim->plain_b, d.engine,
                                          &prim->b, d.engine, nullptr),
          "weights reorder for " + Describe(p));
    Check(d.primitive_create(&prim->pack, reorder),
          "weights reorder primitive for " + Describe(p));
    d.primitive_desc_destroy(reorder);
  }
  Check(d.primitive_create(&prim->primitive, pd),
        "matmul primitive for " + Describe(p));
  d.primitive_desc_destroy(pd);
  return prim;
}

bool AnyImplementation(const std::string&) { return true; }
bool Brgemm(const std::string& implementation) {
  return absl::StartsWith(implementation, "brg");
}

// With `packed_weights` (2-D problems), B in a blocked layout if brgemm
// takes one (`pack` set), else as stored.
std::unique_ptr<Primitive> CreatePrimitive(const Api& d, const GemmProblem& p,
                                           bool packed_weights) {
  if (packed_weights && p.batch == 1) {
    for (dnnl_format_tag_t layout : PackedLayouts(p.type)) {
      if (auto prim = TryCreatePrimitive(d, p, layout, Brgemm)) return prim;
    }
  }
  auto prim =
      TryCreatePrimitive(d, p, dnnl_format_tag_undef, AnyImplementation);
  if (prim == nullptr) onednn::Fail("GEMM: no matmul primitive for " + Describe(p));
  return prim;
}

// Primitives by block problem, created on first use and kept for the
// process (a program's shapes are few, and creating one JIT-compiles
// oneDNN's kernels: far slower than a call).
const Primitive& PrimitiveFor(const Api& d, const GemmProblem& p,
                              bool packed_weights = false) {
  static absl::Mutex mu;
  static auto* cache =
      new absl::flat_hash_map<std::vector<int64_t>, std::unique_ptr<Primitive>>();
  std::vector<int64_t> key = p.Encode();
  key.push_back(packed_weights);
  {
    absl::ReaderMutexLock lock(&mu);
    auto it = cache->find(key);
    if (it != cache->end()) return *it->second;
  }
  std::unique_ptr<Primitive> created = CreatePrimitive(d, p, packed_weights);
  absl::MutexLock lock(&mu);
  auto [it, inserted] = cache->try_emplace(std::move(key), std::move(created));
  return *it->second;  // another thread's, if it was first
}

// The words naming the packed copy of weight block `q`'s B that `prim`
// (created with packed weights) reads, made by `route` (0 for B as it is,
// else an F16GemmRoute): B's type, orientation, shape, row stride and the
// packed layout -- not M, A's or C's strides or the epilogue, so that GEMMs
// of any M over one weight share one copy (PackedWeightCache).
std::vector<int64_t> PackedWeightKey(const GemmProblem& q,
                                     const Primitive& prim, int64_t route) {
  // A version of its own, apart from GemmProblem::Encode()'s words.
  constexpr int64_t kPackedWeightKeyVersion = 2;
  return {kPackedWeightKeyVersion,
          route,
          static_cast<int64_t>(q.type),
          q.trans_b,
          q.k,
          q.n,
          q.ldb,
          static_cast<int64_t>(prim.packed_layout),
          static_cast<int64_t>(prim.packed_b_bytes)};
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t OperandBytes(GemmOperandType type) {
  return type == GemmOperandType::kF32 ? 4 : 2;
}

// The bf16 problem a kF16 block `q` runs as on the bf16x3 route: A and B
// split into dense K-tripled buffers (bf16_split.h), B in its stored
// layout.
GemmProblem TripledProblem(const GemmProblem& q) {
  GemmProblem t = q;
  t.type = GemmOperandType::kBF16;
  t.k = 3 * q.k;
  t.lda = t.k;
  t.ldb = q.trans_b ? t.k : q.n;
  t.stride_a = q.batch > 1 ? q.m * t.k : 0;
  t.stride_b = q.batch > 1 ? t.k * q.n : 0;
  return t;
}

// The f32 problem a kF16 block `q` runs as: its operands widened into
// dense buffers, B in its stored layout (still read transposed when
// trans_b: a transposing copy would cost more than the strided reads).
GemmProblem WidenedProblem(const GemmProblem& q) {
  GemmProblem w = q;
  w.type = GemmOperandType::kF32;
  w.lda = q.k;
  w.ldb = q.trans_b ? q.k : q.n;
  w.stride_a = q.batch > 1 ? q.m * q.k : 0;
  w.stride_b = q.batch > 1 ? q.k * q.n : 0;
  return w;
}

// Widens `rows` x `cols` half matrices (row stride `ld`, batch stride
// `stride`) into the dense f32 stack `dst`.
void WidenHalfStack(const void* src, int64_t batch, int64_t rows,
                    int64_t cols, int64_t ld, int64_t stride, float* dst) {
  const uint16_t* h = static_cast<const uint16_t*>(src);
  for (int64_t bt = 0; bt < batch; ++bt) {
    HalfToFloat(h + bt * stride, rows, cols, ld, dst + bt * rows * cols, cols);
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

int64_t StoreBytes(StoreType type) { return type == StoreType::kBF16 ? 2 : 4; }

// The problem `q` as Multiply runs it: a column block of a wider C (rows
// with gaps) gets a dense C of its own. oneDNN 2.6 runs a matmul with gaps
// between C's rows with gemm:jit rather than brgemm, so without AMX and
// without B in a packed layout; staging C costs far less (decoder GEMMs are
// column blocks).
GemmProblem WithDenseC(GemmProblem q) {
  if (q.batch == 1) q.ldc = q.n;
  return q;
}

// The route from SetF16GemmRoute, else from the environment (read once; a
// bad value aborts, as the compile has reported it already).
F16GemmRoute ConfiguredRoute() {
  const int forced = route_override.load(std::memory_order_relaxed);
  if (forced >= 0) return static_cast<F16GemmRoute>(forced);
  static const F16GemmRoute from_env = [] {
    absl::StatusOr<F16GemmRoute> route = F16GemmRouteFromEnv();
    if (!route.ok()) {
      std::fprintf(stderr, "[rbln compiler] %s\n",
                   std::string(route.status().message()).c_str());
      std::abort();
    }
    return *route;
  }();
  return from_env;
}

// Rows of A below which kAuto keeps f16 blocks on the f32 route: with few
// rows a GEMM streams B. B split per call is K-tripled, 1.5x the f32 bytes;
// a weight is packed as Bh and Bl, the f32 bytes, and the products run on
// AMX (gemm_library_bench, Xeon with AMX, n = k = 1024, 16 packed weights
// in turn: bf16x3 takes 1.2x the time at 1-4 rows, 0.98x at 8, 0.85x at 12,
// 0.6-0.8x from 16).
constexpr int64_t kMinBf16x3Rows = 32;
constexpr int64_t kMinBf16x3WeightRows = 12;

// Whether kF16 block `q` runs as bf16x3 products (F16GemmRoute), B a weight
// or not. By its shape and B's kind: the same for every block distribution
// (SPEC A2).
bool UseBf16x3(const Api& d, const GemmProblem& q, bool weight = false) {
  switch (ConfiguredRoute()) {
    case F16GemmRoute::kWidenedF32:
      return false;
    case F16GemmRoute::kBf16x3:
      return true;
    case F16GemmRoute::kAuto:
      break;
  }
  if (q.m < (weight ? kMinBf16x3WeightRows : kMinBf16x3Rows) ||
      !onednn::HasAmx(d)) {
    return false;
  }
  return absl::StrContains(
      PrimitiveFor(d, WithDenseC(TripledProblem(q))).implementation, "amx");
}

constexpr int64_t kEncodingVersion = 1;


}  // namespace

std::vector<int64_t> GemmProblem::Encode() const {
  std::vector<int64_t> words = {kEncodingVersion,
                                static_cast<int64_t>(type),
                                trans_b,
                                accumulate,
                                batch,
                                m,
                                n,
                                k,
                                lda,
                                ldb,
                                ldc,
                                stride_a,
                                stride_b,
                                stride_c};
  epilogue.AppendTo(words);
  return words;
}

GemmProblem GemmProblem::Decode(const int64_t* w) {
  if (w[0] != kEncodingVersion) {
    onednn::Fail(absl::StrFormat("GEMM: problem encoding %d, expected %d",
                                 w[0], kEncodingVersion));
  }
  GemmProblem p;
  p.type = static_cast<GemmOperandType>(w[1]);
  p.trans_b = w[2] != 0;
  p.accumulate = w[3] != 0;
  p.batch = w[4];
  p.m = w[5];
  p.n = w[6];
  p.k = w[7];
  p.lda = w[8];
  p.ldb = w[9];
  p.ldc = w[10];
  p.stride_a = w[11];
  p.stride_b = w[12];
  p.stride_c = w[13];
  const int64_t* rest = w + 14;
  p.epilogue = LibraryEpilogue::Parse(rest);
  return p;
}

GemmBlock GemmBlockOf(const GemmProblem& p, int64_t block, int64_t blocks) {
  GemmBlock out{p};
  if (blocks <= 1) return out;
  // [begin, end) of `extent` for this block, parts of `part` elements.
  auto range = [&](int64_t extent, int64_t part) {
    const int64_t begin = std::min(extent, block * part);
    return std::pair<int64_t, int64_t>{begin, std::min(extent, begin + part) - begin};
  };
  GemmProblem& q = out.problem;
  if (p.batch > 1) {
    auto [begin, size] = range(p.batch, CeilDiv(p.batch, blocks));
    q.batch = size;
    out.offset_a = begin * p.stride_a;
    out.offset_b = begin * p.stride_b;
    out.offset_c = begin * p.stride_c;
  } else if (p.m >= p.n) {
    auto [begin, size] = range(p.m, CeilDiv(p.m, blocks));
    q.m = size;
    out.offset_a = begin * p.lda;
    out.offset_c = begin * p.ldc;
  } else {
    // Column parts in whole 16-float vectors.
    auto [begin, size] = range(p.n, CeilDiv(CeilDiv(p.n, blocks), 16) * 16);
    q.n = size;
    out.offset_b = p.trans_b ? begin * p.ldb : begin;
    out.offset_c = begin;
    out.column = begin;
  }
  // A batch of one is a plain matrix for oneDNN.
  if (q.batch == 1) q.stride_a = q.stride_b = q.stride_c = 0;
  return out;
}

std::string OnednnDescription() {
  const Api& d = onednn::Library();
  if (!d.error.empty()) return d.error;
  GemmProblem p;
  p.type = GemmOperandType::kBF16;
  p.m = p.n = p.k = p.lda = p.ldb = p.ldc = 64;
  // The implementation oneDNN picks for a bf16 matmul (e.g.
  // brg:avx512_core_bf16 with avx512_bf16, a conversion kernel without).
  return absl::StrFormat("%s (bf16 matmul: %s)", OnednnVersion(),
                         GemmImplementation(p));
}

std::string GemmImplementation(const GemmProblem& p) {
  const Api& d = onednn::Library();
  if (!d.error.empty()) return d.error;
  onednn::OneOmpThread one_thread(d);
  const bool f16 = p.type == GemmOperandType::kF16;
  const bool tripled = f16 && UseBf16x3(d, p);
  const Primitive& prim = PrimitiveFor(
      d, !f16 ? p : tripled ? TripledProblem(p) : WidenedProblem(p));
  std::string text = prim.implementation;
  if (tripled) {
    text = absl::StrFormat("f16->bf16x3 (%s) + %s",
                           SplitIsaName(BestSplitIsa()), text);
  } else if (f16) {
    text = absl::StrFormat("f16->f32 (%s) + %s", HalfIsaName(BestHalfIsa()),
                           text);
  }
  return prim.epilogue_after ? text + " + epilogue after" : text;
}

namespace {

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
  onednn::Execute(d, prim.primitive, args, "matmul " + Describe(q));
  if (!prim.epilogue_after) {
    if (!staged) return;
    for (int64_t i = 0; i < q.m; ++i) {
      std::memcpy(static_cast<char*>(c) + i * ldc * out_bytes,
                  static_cast<const char*>(result) + i * row_bytes, row_bytes);
    }
    return;
  }
  const float* r = static_cast<const float*>(result);
  for (int64_t bt = 0; bt < q.batch; ++bt) {
    for (int64_t i = 0; i < q.m; ++i) {
      for (int64_t j = 0; j < q.n; ++j) {
        const float x = q.epilogue.Apply(r[(bt * q.m + i) * q.n + j], sides,
                                         sides_ld, j);
        q.epilogue.Store(x, static_cast<char*>(c) +
                                (bt * q.stride_c + i * ldc + j) * out_bytes);
      }
    }
  }
}

// Columns of B widened at a time for a kF16 block: about 2 MB of f32 (in
// the caches while the primitive reads it, instead of a whole block's B
// written to and read back from memory), whole 16-float vectors.
int64_t WidenedColumns(const GemmProblem& q) {
  constexpr int64_t kFloats = int64_t{1} << 19;
  const int64_t columns = std::max<int64_t>(64, kFloats / (q.batch * q.k)) / 16 * 16;
  return std::min(columns, q.n);
}

// The content of block `q`'s B at `b` if it is a weight: read from a
// program input that keeps its bytes during the run (input_content.h).
std::optional<InputContent> WeightContent(const GemmProblem& q, const void* b) {
  if (q.batch != 1) return std::nullopt;
  const int64_t elements =
      q.trans_b ? (q.n - 1) * q.ldb + q.k : (q.k - 1) * q.ldb + q.n;
  return FindInputContent(b, elements * OperandBytes(q.type));
}

// B of `prim`'s problem, plain (`prim.plain_b`) at `from`, into its packed
// layout at `to`.
void PackWeights(const Api& d, const Primitive& prim, const void* from,
                 void* to, const GemmProblem& q) {
  onednn::Memory plain(d, prim.plain_b, const_cast<void*>(from));
  onednn::Memory packed(d, prim.b, to);
  onednn::Execute(d, prim.pack,
                  {{DNNL_ARG_FROM, plain.get()}, {DNNL_ARG_TO, packed.get()}},
                  "weights reorder for " + Describe(q));
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

// Columns per chunk: D (2m rows of f32) about 256 KB, whole 64-column
// blocks of the packed layout.
int64_t PairedColumns(const GemmProblem& q) {
  constexpr int64_t kFloats = int64_t{1} << 16;
  const int64_t columns =
      std::max<int64_t>(64, kFloats / (2 * q.m)) / 64 * 64;
  return std::min(columns, q.n);
}

// The two bf16 products of `n` columns of weight block `q` (batch 1), B as
// SplitB writes it: op(B) rows [Bh ; Bh ; Bl].
GemmProblem StackedProblem(const GemmProblem& q, int64_t n) {
  GemmProblem s = q;
  s.type = GemmOperandType::kBF16;
  s.accumulate = false;
  s.epilogue = LibraryEpilogue();
  s.m = 2 * q.m;
  s.n = n;
  s.lda = q.k;
  s.ldb = q.trans_b ? 3 * q.k : q.n;
  s.ldc = n;
  return s;
}
GemmProblem LowProblem(const GemmProblem& q, int64_t n) {
  GemmProblem l = StackedProblem(q, n);
  l.accumulate = true;
  l.epilogue = q.epilogue;
  l.m = q.m;
  return l;
}

// Op(B) rows [first, first + k) of the split B at `b3` (SplitB's), from
// column `j` on.
const uint16_t* SplitBPart(const GemmProblem& q, const uint16_t* b3,
                           int64_t first, int64_t j) {
  return q.trans_b ? b3 + j * 3 * q.k + first : b3 + first * q.n + j;
}

bool PairedPrimitiveUsable(const Primitive& prim) {
  return prim.pack != nullptr && !prim.epilogue_after &&
         absl::StrContains(prim.implementation, "amx");
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
                 Describe(p));
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
  // A weight (B read from an input that keeps its bytes) is packed into
  // the layout oneDNN's brgemm reads once per version of its bytes, not
  // re-laid out (and for f16 widened) by every call; one copy for every M.
  // Where the cache keeps none (a version's first use, no room) the call
  // packs a copy of its own: every call runs the same packed primitive.
  const std::optional<InputContent> weight = WeightContent(q, b_block);
  if (p.type != GemmOperandType::kF16) {
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
  const bool bf16x3 = UseBf16x3(d, q, weight.has_value());
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
      WidenHalfStack(a_block, q.batch, q.m, q.k, q.lda, q.stride_a, a32);
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
                      WidenHalfStack(b_block, 1, q.n, q.k, q.ldb, 0, b32.data());
                    } else {
                      WidenHalfStack(b_block, 1, q.k, q.n, q.ldb, 0, b32.data());
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
      WidenHalfStack(b_chunk, q.batch, r.n, q.k, q.ldb, q.stride_b, b32);
    } else {
      WidenHalfStack(b_chunk, q.batch, q.k, r.n, q.ldb, q.stride_b, b32);
    }
    const GemmProblem wide = WithDenseC(WidenedProblem(r));
    Multiply(d, thread, wide, PrimitiveFor(d, wide), widened_a(), b32,
             c_chunk, q.ldc, sides_chunk, p.n);
  }
}

absl::StatusOr<F16GemmRoute> F16GemmRouteFromEnv() {
  absl::StatusOr<std::string> choice =
      env::GetChoice(kF16RouteVariable, "auto", {"auto", "f32", "bf16x3"});
  if (!choice.ok()) return choice.status();
  if (*choice == "f32") return F16GemmRoute::kWidenedF32;
  if (*choice == "bf16x3") return F16GemmRoute::kBf16x3;
  return F16GemmRoute::kAuto;
}

void SetF16GemmRoute(std::optional<F16GemmRoute> route) {
  route_override.store(route.has_value() ? static_cast<int>(*route) : -1,
                       std::memory_order_relaxed);
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
