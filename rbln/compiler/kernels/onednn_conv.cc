#include "rbln/compiler/kernels/onednn_conv.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "oneapi/dnnl/dnnl.h"
#include "rbln/compiler/kernels/half_convert.h"
#include "rbln/compiler/kernels/input_content.h"
#include "rbln/compiler/kernels/packed_weights.h"

namespace rbln::compiler {
namespace {

using onednn::Api;
using onednn::Check;

// Buffer slots of onednn::ThreadState (slot 0 is the GEMMs' scratchpad).
constexpr int kScratchpadSlot = 0;
constexpr int kUnfusedResultSlot = 1;
constexpr int kSrcSlot = 2;
constexpr int kWeightsSlot = 3;
constexpr int kDstSlot = 4;
constexpr int kWidenedKernelSlot = 5;
constexpr int kWidenedSrcSlot = 6;  // a bf16 source as f32 (no HasBf16)

// The word after a block problem's encoding in the key of its packed
// kernel (PackedWeightCache keys of GEMMs end otherwise).
constexpr int64_t kPackedKernelKey = -2;

// A reorder between a user layout and the primitive's (null if equal).
struct Reorder {
  dnnl_primitive_t primitive = nullptr;
  dnnl_memory_desc_t from, to;
  size_t to_bytes = 0;
};

// One cached primitive: a convolution for one block problem, with the
// reorders of its operands.
struct Primitive {
  dnnl_primitive_t primitive = nullptr;
  // User layouts and the primitive's.
  dnnl_memory_desc_t user_src, user_weights, user_dst;
  dnnl_memory_desc_t src, weights, dst, bias, side, scratchpad;
  size_t scratchpad_bytes = 0;
  Reorder src_in, weights_in, dst_in, dst_out;
  // oneDNN rejected the epilogue as post-ops: the primitive writes f32 NCHW
  // to a contiguous buffer and the epilogue runs after it (same result).
  bool epilogue_after = false;
  std::string implementation;
};

dnnl_memory_desc_t Strided(const Api& d, int ndims, const int64_t* dims,
                           const int64_t* strides, dnnl_data_type_t type,
                           const std::string& what) {
  dnnl_memory_desc_t md;
  dnnl_dims_t dd = {}, ss = {};
  for (int i = 0; i < ndims; ++i) {
    dd[i] = dims[i];
    ss[i] = strides[i];
  }
  Check(d.memory_desc_init_by_strides(&md, ndims, dd, type, ss), what);
  return md;
}

dnnl_memory_desc_t Any(const Api& d, const dnnl_memory_desc_t& like) {
  dnnl_memory_desc_t md;
  Check(d.memory_desc_init_by_tag(&md, like.ndims, like.dims, like.data_type,
                                  dnnl_format_tag_any),
        "descriptor");
  return md;
}

// The user layouts of `p`.
void UserDescs(const Api& d, const ConvProblem& p, Primitive& prim) {
  const dnnl_data_type_t in =
      p.type == ConvOperandType::kBF16 ? dnnl_bf16 : dnnl_f32;
  const dnnl_data_type_t out =
      p.epilogue.store == StoreType::kBF16 ? dnnl_bf16 : dnnl_f32;
  const std::string what = "descriptor for " + p.ToString();
  const int64_t src_dims[] = {p.n, p.ic, p.ih, p.iw};
  prim.user_src = Strided(d, 4, src_dims, p.src_strides, in, what);
  const int64_t dst_dims[] = {p.n, p.oc, p.oh, p.ow};
  prim.user_dst = Strided(d, 4, dst_dims, p.dst_strides, out, what);
  const int64_t ocg = p.oc / p.groups, icg = p.ic / p.groups;
  if (p.groups == 1) {
    const int64_t dims[] = {p.oc, p.ic, p.kh, p.kw};
    const int64_t strides[] = {p.ic * p.kh * p.kw, p.kh * p.kw, p.kw, 1};
    prim.user_weights = Strided(d, 4, dims, strides, in, what);
  } else {
    const int64_t dims[] = {p.groups, ocg, icg, p.kh, p.kw};
    const int64_t strides[] = {ocg * icg * p.kh * p.kw, icg * p.kh * p.kw,
                               p.kh * p.kw, p.kw, 1};
    prim.user_weights = Strided(d, 5, dims, strides, in, what);
  }
  const int64_t bias_dims[] = {p.oc}, bias_strides[] = {1};
  prim.bias = Strided(d, 1, bias_dims, bias_strides, dnnl_f32, what);
  prim.side = onednn::SideDesc(d, 4, 1, p.oc);
}

// The convolution primitive descriptor over `src`, `weights`, `dst` with
// `epilogue` as post-ops (or none when `fuse` is false), or null.
dnnl_primitive_desc_t CreateDesc(const Api& d, const ConvProblem& p,
                                 const dnnl_memory_desc_t& src,
                                 const dnnl_memory_desc_t& weights,
                                 const dnnl_memory_desc_t& dst, bool fuse,
                                 const Primitive& prim) {
  dnnl_convolution_desc_t desc;
  const dnnl_dims_t strides = {p.stride_h, p.stride_w};
  // oneDNN counts the skipped taps: 0 is dense.
  const dnnl_dims_t dilates = {p.dilation_h - 1, p.dilation_w - 1};
  const dnnl_dims_t pad_l = {p.pad_top, p.pad_left};
  const dnnl_dims_t pad_r = {p.pad_bottom, p.pad_right};
  const bool bias = fuse && p.epilogue.bias_row >= 0;
  if (d.convolution_desc_init(&desc, dnnl_forward_inference,
                              dnnl_convolution_direct, &src, &weights,
                              bias ? &prim.bias : nullptr, &dst, strides,
                              dilates, pad_l, pad_r) != dnnl_success) {
    return nullptr;
  }
  dnnl_status_t status;
  dnnl_primitive_attr_t attr = onednn::Attributes(
      d, fuse ? p.epilogue : LibraryEpilogue(), p.accumulate, 4, 1, p.oc,
      &status);
  if (attr == nullptr) return nullptr;
  dnnl_primitive_desc_t pd = nullptr;
  if (d.primitive_desc_create(&pd, &desc, attr, d.engine, nullptr) !=
      dnnl_success) {
    pd = nullptr;
  }
  d.primitive_attr_destroy(attr);
  // The reference implementation is orders of magnitude slower than the
  // others; a layout that only it takes is not worth it.
  if (pd != nullptr &&
      onednn::ImplementationOf(d, pd).find("ref") != std::string::npos) {
    d.primitive_desc_destroy(pd);
    return nullptr;
  }
  return pd;
}

Reorder MakeReorder(const Api& d, const dnnl_memory_desc_t& from,
                    const dnnl_memory_desc_t& to, const std::string& what) {
  Reorder r;
  if (d.memory_desc_equal(&from, &to)) return r;
  r.from = from;
  r.to = to;
  r.to_bytes = d.memory_desc_get_size(&to);
  dnnl_primitive_desc_t pd;
  Check(d.reorder_primitive_desc_create(&pd, &from, d.engine, &to, d.engine,
                                        nullptr),
        "reorder for " + what);
  Check(d.primitive_create(&r.primitive, pd), "reorder for " + what);
  d.primitive_desc_destroy(pd);
  return r;
}

std::unique_ptr<Primitive> CreatePrimitive(const Api& d, const ConvProblem& p) {
  if (p.accumulate && !p.epilogue.IsPlain()) {
    onednn::Fail("convolution: an epilogue with accumulation for " +
                 p.ToString());
  }
  auto prim = std::make_unique<Primitive>();
  UserDescs(d, p, *prim);
  const bool blocked = p.n * p.oh * p.ow >= kBlockedLayoutMinPositions;
  dnnl_primitive_desc_t pd = nullptr;
  // In order of preference: the epilogue fused, on the preferred layouts
  // (oneDNN's choice or the user's) or the others (the GEMM-based kernel
  // takes dense NCHW only), then the same with the epilogue applied after
  // the convolution.
  for (int attempt = 0; attempt < 4 && pd == nullptr; ++attempt) {
    const bool fuse = attempt < 2;
    const bool any = (attempt % 2 == 0) == blocked;
    if (!fuse && p.epilogue.IsPlain()) break;
    prim->epilogue_after = !fuse;
    prim->src = any ? Any(d, prim->user_src) : prim->user_src;
    prim->weights = any ? Any(d, prim->user_weights) : prim->user_weights;
    if (!fuse) {
      // Contiguous f32 NCHW for the epilogue to read.
      const int64_t dims[] = {p.n, p.oc, p.oh, p.ow};
      const int64_t strides[] = {p.oc * p.oh * p.ow, p.oh * p.ow, p.ow, 1};
      prim->dst = Strided(d, 4, dims, strides, dnnl_f32, "result descriptor");
    } else {
      prim->dst = any ? Any(d, prim->user_dst) : prim->user_dst;
    }
    pd = CreateDesc(d, p, prim->src, prim->weights, prim->dst, fuse, *prim);
  }
  if (pd == nullptr) {
    onednn::Fail("convolution: no primitive for " + p.ToString());
  }
  prim->src = *d.primitive_desc_query_md(pd, dnnl_query_src_md, 0);
  prim->weights = *d.primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
  prim->dst = *d.primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
  prim->scratchpad = *d.primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  prim->scratchpad_bytes = d.memory_desc_get_size(&prim->scratchpad);
  prim->implementation = onednn::ImplementationOf(d, pd);
  const std::string what = p.ToString();
  Check(d.primitive_create(&prim->primitive, pd), "convolution for " + what);
  d.primitive_desc_destroy(pd);
  prim->src_in = MakeReorder(d, prim->user_src, prim->src, what);
  prim->weights_in = MakeReorder(d, prim->user_weights, prim->weights, what);
  if (!prim->epilogue_after) {
    prim->dst_out = MakeReorder(d, prim->dst, prim->user_dst, what);
    if (p.accumulate) prim->dst_in = MakeReorder(d, prim->user_dst, prim->dst, what);
  }
  return prim;
}

// Primitives by block problem, created on first use and kept for the
// process (see onednn_gemm.cc).
const Primitive& PrimitiveFor(const Api& d, const ConvProblem& p) {
  static absl::Mutex mu;
  static auto* cache =
      new absl::flat_hash_map<std::vector<int64_t>, std::unique_ptr<Primitive>>();
  std::vector<int64_t> key = p.Encode();
  {
    absl::ReaderMutexLock lock(&mu);
    auto it = cache->find(key);
    if (it != cache->end()) return *it->second;
  }
  std::unique_ptr<Primitive> created = CreatePrimitive(d, p);
  absl::MutexLock lock(&mu);
  auto [it, inserted] = cache->try_emplace(std::move(key), std::move(created));
  return *it->second;
}

// Runs `r` from `from` into this thread's buffer `slot`; returns the data
// the primitive reads (`from` itself if no reorder is needed).
void* Reordered(const Api& d, onednn::ThreadState& thread, const Reorder& r,
                void* from, int slot) {
  if (r.primitive == nullptr) return from;
  void* to = thread.Buffer(slot, r.to_bytes);
  onednn::Memory mf(d, r.from, from), mt(d, r.to, to);
  onednn::Execute(d, r.primitive, {{DNNL_ARG_FROM, mf.get()}, {DNNL_ARG_TO, mt.get()}},
                  "reorder");
  return to;
}

int64_t OperandBytes(ConvOperandType type) {
  return type == ConvOperandType::kBF16 ? 2 : 4;
}

// Without bf16 kernels (onednn::HasBf16) a bf16 convolution runs in f32:
// its source and kernel widened (exactly), its result stored as the
// epilogue says. Whether `p` does so.
bool WidenedBf16(const Api& d, const ConvProblem& p) {
  return p.type == ConvOperandType::kBF16 && !onednn::HasBf16(d);
}

}  // namespace

std::string ConvImplementation(const ConvProblem& p) {
  const Api& d = onednn::Library();
  if (!d.error.empty()) return d.error;
  onednn::OneOmpThread one_thread(d);
  ConvProblem q = p;
  const bool widened_bf16 = WidenedBf16(d, p);
  if (widened_bf16) q.type = ConvOperandType::kF32;
  const Primitive& prim = PrimitiveFor(d, q);
  std::string text = prim.implementation;
  if (widened_bf16) text = "bf16->f32 + " + text;
  if (prim.src_in.primitive || prim.weights_in.primitive) {
    text += " (blocked layouts)";
  }
  if (prim.epilogue_after) text += " + epilogue after";
  return text;
}

void RunConvBlock(const ConvProblem& p, const void* src, const void* weights,
                  void* dst, const float* sides, int64_t block,
                  int64_t blocks) {
  const Api& d = onednn::Library();
  if (!d.error.empty()) onednn::Fail(d.error);
  const ConvBlock part = ConvBlockOf(p, block, blocks);
  ConvProblem q = part.problem;
  if (q.n <= 0 || q.oc <= 0 || q.groups <= 0) return;
  const bool widened_bf16 = WidenedBf16(d, p);
  if (widened_bf16) q.type = ConvOperandType::kF32;
  const bool narrow_kernel = q.f16_kernel || widened_bf16;
  onednn::OneOmpThread one_thread(d);
  onednn::ThreadState& thread = onednn::ThisThread(d);
  const Primitive& prim = PrimitiveFor(d, q);
  const int64_t in_bytes = OperandBytes(p.type);
  const int64_t out_bytes = p.epilogue.store == StoreType::kBF16 ? 2 : 4;
  void* user_src = const_cast<char*>(static_cast<const char*>(src)) +
                   part.offset_src * in_bytes;
  void* user_weights = const_cast<char*>(static_cast<const char*>(weights)) +
                       part.offset_weights * (p.f16_kernel ? 2 : in_bytes);
  void* user_dst = static_cast<char*>(dst) + part.offset_dst * out_bytes;
  if (widened_bf16) {
    // The source's whole span, its strides kept.
    int64_t span = 1;
    const int64_t src_dims[] = {q.n, q.ic, q.ih, q.iw};
    for (int i = 0; i < 4; ++i) span += (src_dims[i] - 1) * q.src_strides[i];
    float* wide = static_cast<float*>(
        thread.Buffer(kWidenedSrcSlot, span * sizeof(float)));
    Bf16ToFloat(static_cast<const uint16_t*>(user_src), 1, span, span, wide,
                span);
    user_src = wide;
  }
  void* conv_src = Reordered(d, thread, prim.src_in, user_src, kSrcSlot);
  // A kernel read from a program input keeps its blocked layout between
  // runs while its bytes keep their version (packed_weights.h): a warm
  // forward then reorders activations only, as PyTorch's cached
  // convolutions do.
  // An f16 (or widened bf16) kernel is widened first (into `widened`, f32
  // in the user layout), the same way.
  const int64_t kernel_elements = q.oc * (q.ic / q.groups) * q.kh * q.kw;
  auto widen = [&](void* out) {
    const auto* from = static_cast<const uint16_t*>(user_weights);
    float* to = static_cast<float*>(out);
    if (widened_bf16) {
      Bf16ToFloat(from, 1, kernel_elements, kernel_elements, to,
                  kernel_elements);
    } else {
      HalfToFloat(from, 1, kernel_elements, kernel_elements, to,
                  kernel_elements);
    }
  };
  std::shared_ptr<const void> packed;
  if (prim.weights_in.primitive != nullptr || narrow_kernel) {
    const int64_t kernel_bytes =
        kernel_elements * (narrow_kernel ? 2 : in_bytes);
    if (std::optional<InputContent> content =
            FindInputContent(user_weights, kernel_bytes)) {
      std::vector<int64_t> key = q.Encode();
      key.push_back(kPackedKernelKey);
      const uint64_t bytes = prim.weights_in.primitive != nullptr
                                 ? prim.weights_in.to_bytes
                                 : kernel_elements * sizeof(float);
      packed = PackedWeightCache::Global().Get(
          *content, key, bytes, [&](void* out) {
            if (prim.weights_in.primitive == nullptr) return widen(out);
            void* from = user_weights;
            std::vector<float> widened;
            if (narrow_kernel) {
              widened.resize(kernel_elements);
              widen(widened.data());
              from = widened.data();
            }
            onednn::Memory mf(d, prim.weights_in.from, from),
                mt(d, prim.weights_in.to, out);
            onednn::Execute(
                d, prim.weights_in.primitive,
                {{DNNL_ARG_FROM, mf.get()}, {DNNL_ARG_TO, mt.get()}},
                "kernel reorder");
          });
    }
  }
  void* conv_weights;
  if (packed != nullptr) {
    conv_weights = const_cast<void*>(packed.get());
  } else {
    void* kernel = user_weights;
    if (narrow_kernel) {
      kernel = thread.Buffer(kWidenedKernelSlot,
                             kernel_elements * sizeof(float));
      widen(kernel);
    }
    conv_weights =
        Reordered(d, thread, prim.weights_in, kernel, kWeightsSlot);
  }
  void* conv_dst;
  if (prim.epilogue_after) {
    conv_dst = thread.Buffer(kUnfusedResultSlot,
                             q.n * q.oc * q.oh * q.ow * sizeof(float));
  } else if (prim.dst_out.primitive != nullptr) {
    conv_dst = thread.Buffer(kDstSlot, d.memory_desc_get_size(&prim.dst));
    if (q.accumulate) {
      // The sum post-op reads the old values in the primitive's layout.
      onednn::Memory mf(d, prim.dst_in.from, user_dst),
          mt(d, prim.dst_in.to, conv_dst);
      onednn::Execute(d, prim.dst_in.primitive,
                      {{DNNL_ARG_FROM, mf.get()}, {DNNL_ARG_TO, mt.get()}},
                      "reorder");
    }
  } else {
    conv_dst = user_dst;
  }
  onednn::Memory ms(d, prim.src, conv_src), mw(d, prim.weights, conv_weights),
      md(d, prim.dst, conv_dst);
  std::vector<dnnl_exec_arg_t> args = {{DNNL_ARG_SRC, ms.get()},
                                       {DNNL_ARG_WEIGHTS, mw.get()},
                                       {DNNL_ARG_DST, md.get()}};
  std::vector<std::unique_ptr<onednn::Memory>> more;
  auto memory = [&](const dnnl_memory_desc_t& desc, void* data) {
    more.push_back(std::make_unique<onednn::Memory>(d, desc, data));
    return more.back()->get();
  };
  auto side_row = [&](int64_t row) {
    return const_cast<float*>(sides) + row * p.oc + part.channel;
  };
  if (!prim.epilogue_after) {
    if (q.epilogue.bias_row >= 0) {
      args.push_back({DNNL_ARG_BIAS, memory(prim.bias, side_row(q.epilogue.bias_row))});
    }
    for (size_t i = 0; i < q.epilogue.ops.size(); ++i) {
      const EpilogueOp& op = q.epilogue.ops[i];
      if (!op.binary) continue;
      args.push_back(
          {DNNL_ARG_ATTR_MULTIPLE_POST_OP(static_cast<int>(i)) | DNNL_ARG_SRC_1,
           memory(prim.side, side_row(op.row))});
    }
  }
  if (prim.scratchpad_bytes > 0) {
    args.push_back(
        {DNNL_ARG_SCRATCHPAD,
         memory(prim.scratchpad,
                thread.Buffer(kScratchpadSlot, prim.scratchpad_bytes))});
  }
  onednn::Execute(d, prim.primitive, args, "convolution " + q.ToString());
  if (prim.dst_out.primitive != nullptr && !prim.epilogue_after) {
    onednn::Memory mf(d, prim.dst_out.from, conv_dst),
        mt(d, prim.dst_out.to, user_dst);
    onednn::Execute(d, prim.dst_out.primitive,
                    {{DNNL_ARG_FROM, mf.get()}, {DNNL_ARG_TO, mt.get()}},
                    "reorder");
  }
  if (!prim.epilogue_after) return;
  const float* r = static_cast<const float*>(conv_dst);
  const float* block_sides = sides == nullptr ? nullptr : sides + part.channel;
  for (int64_t n = 0; n < q.n; ++n) {
    for (int64_t c = 0; c < q.oc; ++c) {
      for (int64_t y = 0; y < q.oh; ++y) {
        for (int64_t x = 0; x < q.ow; ++x) {
          const float v = q.epilogue.Apply(
              r[((n * q.oc + c) * q.oh + y) * q.ow + x], block_sides, p.oc, c);
          q.epilogue.Store(
              v, static_cast<char*>(user_dst) +
                     (n * q.dst_strides[0] + c * q.dst_strides[1] +
                      y * q.dst_strides[2] + x * q.dst_strides[3]) *
                         out_bytes);
        }
      }
    }
  }
}

}  // namespace rbln::compiler

extern "C" void rbln_conv(int64_t problem, int64_t src, int64_t weights,
                          int64_t dst, int64_t sides, int64_t block,
                          int64_t blocks) {
  using rbln::compiler::ConvProblem;
  const ConvProblem p =
      ConvProblem::Decode(reinterpret_cast<const int64_t*>(problem));
  rbln::compiler::RunConvBlock(p, reinterpret_cast<const void*>(src),
                               reinterpret_cast<const void*>(weights),
                               reinterpret_cast<void*>(dst),
                               reinterpret_cast<const float*>(sides), block,
                               blocks);
}
