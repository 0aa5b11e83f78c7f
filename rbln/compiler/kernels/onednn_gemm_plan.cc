#include "rbln/compiler/kernels/onednn_gemm_plan.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "rbln/compiler/kernels/bf16_skinny_gemm.h"
#include "rbln/compiler/kernels/bf16_split.h"
#include "rbln/compiler/kernels/half_convert.h"
#include "rbln/compiler/kernels/onednn_gemm.h"
#include "rbln/core/env.h"

namespace rbln::compiler {
namespace {

constexpr char kF16RouteVariable[] = "RBLN_COMPILER_F16_GEMM";

// SetF16GemmRoute's override, or -1.
std::atomic<int> route_override{-1};

}  // namespace

namespace gemm_plan {
namespace {

using onednn::Api;
using onednn::Check;

}  // namespace

std::string Describe(const GemmProblem& p) {
  return absl::StrFormat(
      "type %d trans_b %d batch %d m %d n %d k %d lda %d ldb %d ldc %d "
      "epilogue [%s]",
      static_cast<int>(p.type), p.trans_b, p.batch, p.m, p.n, p.k, p.lda,
      p.ldb, p.ldc, p.epilogue.ToString());
}

namespace {

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
}  // namespace

const Primitive& PrimitiveFor(const Api& d, const GemmProblem& p,
                              bool packed_weights) {
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

int64_t OperandBytes(GemmOperandType type) {
  return type == GemmOperandType::kF32 ? 4 : 2;
}

int64_t StoreBytes(StoreType type) { return type == StoreType::kBF16 ? 2 : 4; }

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

GemmProblem WidenedProblem(const GemmProblem& q) {
  GemmProblem w = q;
  w.type = GemmOperandType::kF32;
  w.lda = q.k;
  w.ldb = q.trans_b ? q.k : q.n;
  w.stride_a = q.batch > 1 ? q.m * q.k : 0;
  w.stride_b = q.batch > 1 ? q.k * q.n : 0;
  return w;
}

GemmProblem WithDenseC(GemmProblem q) {
  if (q.batch == 1) q.ldc = q.n;
  return q;
}

namespace {

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
}  // namespace

bool UseBf16x3(const Api& d, const GemmProblem& q, bool weight) {
  // Without bf16 kernels there is no bf16x3 route, forced or not.
  if (!onednn::HasBf16(d)) return false;
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

int64_t WidenedColumns(const GemmProblem& q) {
  constexpr int64_t kFloats = int64_t{1} << 19;
  const int64_t columns = std::max<int64_t>(64, kFloats / (q.batch * q.k)) / 16 * 16;
  return std::min(columns, q.n);
}

int64_t PairedColumns(const GemmProblem& q) {
  constexpr int64_t kFloats = int64_t{1} << 16;
  const int64_t columns =
      std::max<int64_t>(64, kFloats / (2 * q.m)) / 64 * 64;
  return std::min(columns, q.n);
}

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

bool PairedPrimitiveUsable(const Primitive& prim) {
  return prim.pack != nullptr && !prim.epilogue_after &&
         absl::StrContains(prim.implementation, "amx");
}

}  // namespace gemm_plan

using gemm_plan::Primitive;
using gemm_plan::PrimitiveFor;
using gemm_plan::TripledProblem;
using gemm_plan::UseBf16x3;
using gemm_plan::WidenedProblem;
using onednn::Api;

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
  const bool widened_bf16 =
      p.type == GemmOperandType::kBF16 && !onednn::HasBf16(d);
  if (SkinnyBf16Preferred(p, onednn::HasBf16(d))) {
    return absl::StrFormat("bf16 skinny (%s)%s", SkinnyIsaName(BestSkinnyIsa()),
                           p.epilogue.IsPlain() ? "" : " + epilogue after");
  }
  const bool tripled = f16 && UseBf16x3(d, p);
  const Primitive& prim = PrimitiveFor(
      d, tripled                  ? TripledProblem(p)
         : f16 || widened_bf16 ? WidenedProblem(p)
                               : p);
  std::string text = prim.implementation;
  if (tripled) {
    text = absl::StrFormat("f16->bf16x3 (%s) + %s",
                           SplitIsaName(BestSplitIsa()), text);
  } else if (f16) {
    text = absl::StrFormat("f16->f32 (%s) + %s", HalfIsaName(BestHalfIsa()),
                           text);
  } else if (widened_bf16) {
    text = "bf16->f32 + " + text;
  }
  return prim.epilogue_after ? text + " + epilogue after" : text;
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
