#include "rbln/compiler/kernels/onednn_library.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <type_traits>

#include "absl/strings/str_format.h"

namespace rbln::compiler {
namespace onednn {

const Api& Library() {
  static const Api* library = [] {
    auto* d = new Api();
    void* handle = dlopen(kOnednnLibrary, RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      d->error = absl::StrFormat("cannot load %s: %s", kOnednnLibrary, dlerror());
      return d;
    }
    bool missing = false;
    auto load = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(
          dlsym(handle, name));
      if (fn == nullptr) {
        d->error = absl::StrFormat("%s has no %s", kOnednnLibrary, name);
        missing = true;
      }
    };
    load(d->engine_create, "dnnl_engine_create");
    load(d->stream_create, "dnnl_stream_create");
    load(d->memory_desc_init_by_strides, "dnnl_memory_desc_init_by_strides");
    load(d->memory_desc_init_by_tag, "dnnl_memory_desc_init_by_tag");
    load(d->memory_desc_equal, "dnnl_memory_desc_equal");
    load(d->matmul_desc_init, "dnnl_matmul_desc_init");
    load(d->convolution_desc_init,
         "dnnl_dilated_convolution_forward_desc_init");
    load(d->reorder_primitive_desc_create,
         "dnnl_reorder_primitive_desc_create");
    load(d->primitive_attr_create, "dnnl_primitive_attr_create");
    load(d->primitive_attr_destroy, "dnnl_primitive_attr_destroy");
    load(d->primitive_attr_set_post_ops, "dnnl_primitive_attr_set_post_ops");
    load(d->primitive_attr_set_scratchpad_mode,
         "dnnl_primitive_attr_set_scratchpad_mode");
    load(d->post_ops_create, "dnnl_post_ops_create");
    load(d->post_ops_destroy, "dnnl_post_ops_destroy");
    load(d->post_ops_append_sum, "dnnl_post_ops_append_sum");
    load(d->post_ops_append_eltwise, "dnnl_post_ops_append_eltwise");
    load(d->post_ops_append_binary, "dnnl_post_ops_append_binary");
    load(d->primitive_desc_create, "dnnl_primitive_desc_create");
    load(d->primitive_desc_destroy, "dnnl_primitive_desc_destroy");
    load(d->primitive_desc_query, "dnnl_primitive_desc_query");
    load(d->primitive_desc_query_md, "dnnl_primitive_desc_query_md");
    load(d->memory_desc_get_size, "dnnl_memory_desc_get_size");
    load(d->primitive_create, "dnnl_primitive_create");
    load(d->primitive_destroy, "dnnl_primitive_destroy");
    load(d->primitive_execute, "dnnl_primitive_execute");
    load(d->primitive_get_primitive_desc, "dnnl_primitive_get_primitive_desc");
    load(d->memory_create, "dnnl_memory_create");
    load(d->memory_destroy, "dnnl_memory_destroy");
    load(d->version, "dnnl_version");
    d->get_effective_cpu_isa =
        reinterpret_cast<decltype(&dnnl_get_effective_cpu_isa)>(
            dlsym(handle, "dnnl_get_effective_cpu_isa"));
    // Found among the library's dependencies; absent if oneDNN was built
    // without OpenMP (then it is sequential or threads itself otherwise).
    d->omp_set_num_threads = reinterpret_cast<void (*)(int)>(
        dlsym(handle, "omp_set_num_threads"));
    d->omp_get_max_threads =
        reinterpret_cast<int (*)()>(dlsym(handle, "omp_get_max_threads"));
    if (d->omp_get_max_threads == nullptr) d->omp_set_num_threads = nullptr;
    if (missing) return d;
    if (d->engine_create(&d->engine, dnnl_cpu, 0) != dnnl_success) {
      d->error = "oneDNN has no CPU engine";
    }
    return d;
  }();
  return *library;
}

bool HasAmx(const Api& d) {
  if (!d.error.empty() || d.get_effective_cpu_isa == nullptr) return false;
  // The ISA values are bit sets, each containing the ones below it.
  const unsigned isa = d.get_effective_cpu_isa();
  return (isa & dnnl_cpu_isa_avx512_core_amx) == dnnl_cpu_isa_avx512_core_amx;
}

bool HasBf16(const Api& d) {
  if (!d.error.empty() || d.get_effective_cpu_isa == nullptr) return false;
  const unsigned isa = d.get_effective_cpu_isa();
  return (isa & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core;
}

void Fail(const std::string& message) {
  std::fprintf(stderr, "[rbln compiler] oneDNN %s\n", message.c_str());
  std::abort();
}

void Check(dnnl_status_t status, const std::string& what) {
  if (status == dnnl_success) return;
  Fail(absl::StrFormat("%s failed (status %d)", what, static_cast<int>(status)));
}

OneOmpThread::OneOmpThread(const Api& d) : d_(d) {
  if (d_.omp_set_num_threads == nullptr) return;
  saved_ = d_.omp_get_max_threads();
  if (saved_ != 1) d_.omp_set_num_threads(1);
}

OneOmpThread::~OneOmpThread() {
  if (d_.omp_set_num_threads != nullptr && saved_ != 1) {
    d_.omp_set_num_threads(saved_);
  }
}

void* ThreadState::Buffer(int slot, size_t bytes) {
  if (buffers.size() <= static_cast<size_t>(slot)) buffers.resize(slot + 1);
  std::vector<char>& b = buffers[slot];
  // 64 bytes of slack to align the start.
  if (b.size() < bytes + 64) b.resize(bytes + 64);
  const uintptr_t p = reinterpret_cast<uintptr_t>(b.data());
  return reinterpret_cast<void*>((p + 63) & ~uintptr_t{63});
}

ThreadState& ThisThread(const Api& d) {
  thread_local ThreadState state;
  if (state.stream == nullptr &&
      d.stream_create(&state.stream, d.engine, dnnl_stream_default_flags) !=
          dnnl_success) {
    Fail("cannot create a stream");
  }
  return state;
}

Memory::Memory(const Api& d, const dnnl_memory_desc_t& desc, void* data)
    : d_(d) {
  Check(d_.memory_create(&memory_, &desc, d_.engine, data), "memory");
}

Memory::~Memory() { d_.memory_destroy(memory_); }

void Execute(const Api& d, dnnl_primitive_t primitive,
             const std::vector<dnnl_exec_arg_t>& args, const std::string& what) {
  Check(d.primitive_execute(primitive, ThisThread(d).stream,
                            static_cast<int>(args.size()), args.data()),
        what);
}

dnnl_memory_desc_t SideDesc(const Api& d, int ndims, int channel_dim,
                            int64_t channels) {
  dnnl_dims_t dims = {}, strides = {};
  for (int i = 0; i < ndims; ++i) {
    dims[i] = i == channel_dim ? channels : 1;
    strides[i] = i == channel_dim ? 1 : channels;
  }
  dnnl_memory_desc_t md;
  Check(d.memory_desc_init_by_strides(&md, ndims, dims, dnnl_f32, strides),
        "side operand descriptor");
  return md;
}

namespace {

dnnl_alg_kind_t EltwiseAlg(EltwiseFn fn) {
  switch (fn) {
    case EltwiseFn::kRelu:
      return dnnl_eltwise_relu;
    case EltwiseFn::kGeluErf:
      return dnnl_eltwise_gelu_erf;
    case EltwiseFn::kGeluTanh:
      return dnnl_eltwise_gelu_tanh;
    case EltwiseFn::kSilu:
      return dnnl_eltwise_swish;
    case EltwiseFn::kSigmoid:
      return dnnl_eltwise_logistic;
    case EltwiseFn::kTanh:
      return dnnl_eltwise_tanh;
    case EltwiseFn::kLinear:
      return dnnl_eltwise_linear;
  }
  return dnnl_alg_kind_undef;
}

dnnl_alg_kind_t BinaryAlg(BinaryFn fn) {
  switch (fn) {
    case BinaryFn::kAdd:
      return dnnl_binary_add;
    case BinaryFn::kSub:
      return dnnl_binary_sub;
    case BinaryFn::kMul:
      return dnnl_binary_mul;
    case BinaryFn::kDiv:
      return dnnl_binary_div;
  }
  return dnnl_alg_kind_undef;
}

}  // namespace

dnnl_primitive_attr_t Attributes(const Api& d, const LibraryEpilogue& epilogue,
                                 bool accumulate, int ndims, int channel_dim,
                                 int64_t channels, dnnl_status_t* status) {
  dnnl_primitive_attr_t attr;
  Check(d.primitive_attr_create(&attr), "attributes");
  // Scratchpad memory from the caller (per thread), so that blocks of one
  // primitive can run on several workers at once.
  Check(d.primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user),
        "scratchpad mode");
  if (!accumulate && epilogue.ops.empty()) {
    *status = dnnl_success;
    return attr;
  }
  dnnl_post_ops_t post_ops;
  Check(d.post_ops_create(&post_ops), "post-ops");
  *status = dnnl_success;
  if (accumulate) *status = d.post_ops_append_sum(post_ops, 1.0f);
  for (const EpilogueOp& op : epilogue.ops) {
    if (*status != dnnl_success) break;
    if (op.binary) {
      const dnnl_memory_desc_t side = SideDesc(d, ndims, channel_dim, channels);
      *status = d.post_ops_append_binary(
          post_ops, BinaryAlg(static_cast<BinaryFn>(op.fn)), &side);
    } else {
      const auto fn = static_cast<EltwiseFn>(op.fn);
      // swish's alpha scales the sigmoid's argument: 1 is silu.
      const float alpha = fn == EltwiseFn::kSilu ? 1.0f : op.alpha;
      *status = d.post_ops_append_eltwise(post_ops, 1.0f, EltwiseAlg(fn),
                                          alpha, op.beta);
    }
  }
  if (*status == dnnl_success) {
    *status = d.primitive_attr_set_post_ops(attr, post_ops);
  }
  d.post_ops_destroy(post_ops);
  if (*status != dnnl_success) {
    d.primitive_attr_destroy(attr);
    return nullptr;
  }
  return attr;
}

std::string ImplementationOf(const Api& d, const_dnnl_primitive_desc_t pd) {
  const char* impl = nullptr;
  if (d.primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) !=
          dnnl_success ||
      impl == nullptr) {
    return "?";
  }
  return impl;
}

}  // namespace onednn

bool LoadOnednn() { return onednn::Library().error.empty(); }

std::string OnednnVersion() {
  const onednn::Api& d = onednn::Library();
  if (!d.error.empty()) return d.error;
  const dnnl_version_t* v = d.version();
  return absl::StrFormat("oneDNN %d.%d.%d", v->major, v->minor, v->patch);
}

}  // namespace rbln::compiler
