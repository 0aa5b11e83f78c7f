#include "rbln/compiler/onednn_gemm.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "oneapi/dnnl/dnnl.h"

namespace rbln::compiler {
namespace {

// The oneDNN C API functions used, from the dlopen()ed library (the build
// needs only its headers).
struct Onednn {
  decltype(&dnnl_engine_create) engine_create;
  decltype(&dnnl_stream_create) stream_create;
  decltype(&dnnl_memory_desc_init_by_strides) memory_desc_init_by_strides;
  decltype(&dnnl_matmul_desc_init) matmul_desc_init;
  decltype(&dnnl_primitive_attr_create) primitive_attr_create;
  decltype(&dnnl_primitive_attr_destroy) primitive_attr_destroy;
  decltype(&dnnl_primitive_attr_set_post_ops) primitive_attr_set_post_ops;
  decltype(&dnnl_primitive_attr_set_scratchpad_mode)
      primitive_attr_set_scratchpad_mode;
  decltype(&dnnl_post_ops_create) post_ops_create;
  decltype(&dnnl_post_ops_destroy) post_ops_destroy;
  decltype(&dnnl_post_ops_append_sum) post_ops_append_sum;
  decltype(&dnnl_primitive_desc_create) primitive_desc_create;
  decltype(&dnnl_primitive_desc_destroy) primitive_desc_destroy;
  decltype(&dnnl_primitive_desc_query) primitive_desc_query;
  decltype(&dnnl_primitive_desc_query_md) primitive_desc_query_md;
  decltype(&dnnl_memory_desc_get_size) memory_desc_get_size;
  decltype(&dnnl_primitive_create) primitive_create;
  decltype(&dnnl_primitive_execute) primitive_execute;
  decltype(&dnnl_primitive_get_primitive_desc) primitive_get_primitive_desc;
  decltype(&dnnl_memory_create) memory_create;
  decltype(&dnnl_memory_destroy) memory_destroy;
  decltype(&dnnl_version) version;
  // libgomp, oneDNN's runtime (absent if oneDNN threads otherwise).
  void (*omp_set_num_threads)(int) = nullptr;
  int (*omp_get_max_threads)() = nullptr;
  dnnl_engine_t engine = nullptr;
  std::string error;  // why it is unusable; empty if usable
};

const Onednn& Library() {
  static const Onednn* library = [] {
    auto* d = new Onednn();
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
    load(d->matmul_desc_init, "dnnl_matmul_desc_init");
    load(d->primitive_attr_create, "dnnl_primitive_attr_create");
    load(d->primitive_attr_destroy, "dnnl_primitive_attr_destroy");
    load(d->primitive_attr_set_post_ops, "dnnl_primitive_attr_set_post_ops");
    load(d->primitive_attr_set_scratchpad_mode,
         "dnnl_primitive_attr_set_scratchpad_mode");
    load(d->post_ops_create, "dnnl_post_ops_create");
    load(d->post_ops_destroy, "dnnl_post_ops_destroy");
    load(d->post_ops_append_sum, "dnnl_post_ops_append_sum");
    load(d->primitive_desc_create, "dnnl_primitive_desc_create");
    load(d->primitive_desc_destroy, "dnnl_primitive_desc_destroy");
    load(d->primitive_desc_query, "dnnl_primitive_desc_query");
    load(d->primitive_desc_query_md, "dnnl_primitive_desc_query_md");
    load(d->memory_desc_get_size, "dnnl_memory_desc_get_size");
    load(d->primitive_create, "dnnl_primitive_create");
    load(d->primitive_execute, "dnnl_primitive_execute");
    load(d->primitive_get_primitive_desc, "dnnl_primitive_get_primitive_desc");
    load(d->memory_create, "dnnl_memory_create");
    load(d->memory_destroy, "dnnl_memory_destroy");
    load(d->version, "dnnl_version");
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

// One cached primitive: a matmul for one block shape.
struct Primitive {
  dnnl_primitive_t primitive = nullptr;
  dnnl_memory_desc_t a, b, c, scratchpad;
  size_t scratchpad_bytes = 0;
};

using Key = std::tuple<int64_t, bool, bool, int64_t, int64_t, int64_t, int64_t,
                       int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;

Key KeyOf(const GemmProblem& p) {
  return {static_cast<int64_t>(p.type), p.trans_b, p.accumulate, p.batch, p.m,
          p.n, p.k, p.lda, p.ldb, p.ldc, p.stride_a, p.stride_b, p.stride_c};
}

[[noreturn]] void Fail(const std::string& message) {
  std::fprintf(stderr, "[rbln compiler] oneDNN GEMM: %s\n", message.c_str());
  std::abort();
}

void Check(dnnl_status_t status, const char* what, const GemmProblem& p) {
  if (status == dnnl_success) return;
  Fail(absl::StrFormat(
      "%s failed (status %d) for type %d trans_b %d batch %d m %d n %d k %d "
      "lda %d ldb %d ldc %d",
      what, static_cast<int>(status), static_cast<int>(p.type), p.trans_b,
      p.batch, p.m, p.n, p.k, p.lda, p.ldb, p.ldc));
}

// A matrix stack as oneDNN sees it: 2-D, or 3-D with a batch stride.
dnnl_memory_desc_t Desc(const Onednn& d, const GemmProblem& p, int64_t rows,
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
        "memory descriptor", p);
  return md;
}

std::unique_ptr<Primitive> CreatePrimitive(const Onednn& d,
                                           const GemmProblem& p) {
  const dnnl_data_type_t in =
      p.type == GemmOperandType::kBF16 ? dnnl_bf16 : dnnl_f32;
  auto prim = std::make_unique<Primitive>();
  prim->a = Desc(d, p, p.m, p.k, p.lda, 1, p.stride_a, in);
  // op(B) is [k, n]: B itself when not transposed, else B [n, k] read by
  // columns.
  prim->b = p.trans_b ? Desc(d, p, p.k, p.n, 1, p.ldb, p.stride_b, in)
                      : Desc(d, p, p.k, p.n, p.ldb, 1, p.stride_b, in);
  prim->c = Desc(d, p, p.m, p.n, p.ldc, 1, p.stride_c, dnnl_f32);
  dnnl_matmul_desc_t desc;
  Check(d.matmul_desc_init(&desc, &prim->a, &prim->b, nullptr, &prim->c),
        "matmul descriptor", p);
  dnnl_primitive_attr_t attr;
  Check(d.primitive_attr_create(&attr), "attributes", p);
  // Scratchpad memory from the caller (per thread, below), so that blocks
  // of different primitives can run on several workers at once.
  Check(d.primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user),
        "scratchpad mode", p);
  dnnl_post_ops_t post_ops = nullptr;
  if (p.accumulate) {
    Check(d.post_ops_create(&post_ops), "post-ops", p);
    Check(d.post_ops_append_sum(post_ops, 1.0f), "sum post-op", p);
    Check(d.primitive_attr_set_post_ops(attr, post_ops), "post-ops", p);
  }
  dnnl_primitive_desc_t pd;
  const dnnl_status_t created =
      d.primitive_desc_create(&pd, &desc, attr, d.engine, nullptr);
  if (post_ops) d.post_ops_destroy(post_ops);
  d.primitive_attr_destroy(attr);
  Check(created, "matmul primitive descriptor", p);
  prim->scratchpad = *d.primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  prim->scratchpad_bytes = d.memory_desc_get_size(&prim->scratchpad);
  Check(d.primitive_create(&prim->primitive, pd), "matmul primitive", p);
  d.primitive_desc_destroy(pd);
  return prim;
}

// Primitives by block problem, created on first use and kept for the
// process (a program's shapes are few, and creating one JIT-compiles
// oneDNN's kernels: far slower than a call).
const Primitive& PrimitiveFor(const Onednn& d, const GemmProblem& p) {
  static absl::Mutex mu;
  static auto* cache =
      new absl::flat_hash_map<Key, std::unique_ptr<Primitive>>();
  const Key key = KeyOf(p);
  {
    absl::ReaderMutexLock lock(&mu);
    auto it = cache->find(key);
    if (it != cache->end()) return *it->second;
  }
  std::unique_ptr<Primitive> created = CreatePrimitive(d, p);
  absl::MutexLock lock(&mu);
  auto [it, inserted] = cache->try_emplace(key, std::move(created));
  return *it->second;  // another thread's, if it was first
}

// Per calling thread: its stream and its scratchpad.
struct ThreadState {
  dnnl_stream_t stream = nullptr;
  std::vector<char> scratchpad;
};

ThreadState& ThisThread(const Onednn& d) {
  thread_local ThreadState state;
  if (state.stream == nullptr &&
      d.stream_create(&state.stream, d.engine, dnnl_stream_default_flags) !=
          dnnl_success) {
    Fail("cannot create a stream");
  }
  return state;
}

// oneDNN on one OpenMP thread while in scope (the chiplet workers are the
// parallelism, and a block's result must not depend on a thread count),
// then the caller's setting again: the calling thread may be the user's,
// whose OpenMP thread count is PyTorch's torch.get_num_threads() (the same
// libgomp; Dynamo guards on it).
class OneOmpThread {
 public:
  explicit OneOmpThread(const Onednn& d) : d_(d) {
    if (d_.omp_set_num_threads == nullptr) return;
    saved_ = d_.omp_get_max_threads();
    if (saved_ != 1) d_.omp_set_num_threads(1);
  }
  ~OneOmpThread() {
    if (d_.omp_set_num_threads != nullptr && saved_ != 1) {
      d_.omp_set_num_threads(saved_);
    }
  }
  OneOmpThread(const OneOmpThread&) = delete;
  OneOmpThread& operator=(const OneOmpThread&) = delete;

 private:
  const Onednn& d_;
  int saved_ = 1;
};

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t ElementBytes(GemmOperandType type) {
  return type == GemmOperandType::kBF16 ? 2 : 4;
}

}  // namespace

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
  }
  // A batch of one is a plain matrix for oneDNN.
  if (q.batch == 1) q.stride_a = q.stride_b = q.stride_c = 0;
  return out;
}

bool LoadOnednn() { return Library().error.empty(); }

std::string OnednnDescription() {
  const Onednn& d = Library();
  if (!d.error.empty()) return d.error;
  const dnnl_version_t* v = d.version();
  GemmProblem p;
  p.type = GemmOperandType::kBF16;
  p.m = p.n = p.k = p.lda = p.ldb = p.ldc = 64;
  std::string isa = "?";
  // The implementation oneDNN picks for a bf16 matmul (e.g.
  // brg:avx512_core_bf16 with avx512_bf16, a conversion kernel without).
  OneOmpThread one_thread(d);
  const Primitive& prim = PrimitiveFor(d, p);
  const_dnnl_primitive_desc_t pd;
  const char* impl = nullptr;
  if (d.primitive_get_primitive_desc(prim.primitive, &pd) == dnnl_success &&
      d.primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) ==
          dnnl_success) {
    isa = impl;
  }
  return absl::StrFormat("oneDNN %d.%d.%d (bf16 matmul: %s)", v->major,
                         v->minor, v->patch, isa);
}

void RunGemmBlock(const GemmProblem& p, const void* a, const void* b, float* c,
                  int64_t block, int64_t blocks) {
  const Onednn& d = Library();
  if (!d.error.empty()) Fail(d.error);
  const GemmBlock part = GemmBlockOf(p, block, blocks);
  const GemmProblem& q = part.problem;
  if (q.batch <= 0 || q.m <= 0 || q.n <= 0 || q.k <= 0) return;
  // Before the primitive: oneDNN sizes its blocking by the thread count.
  OneOmpThread one_thread(d);
  ThreadState& thread = ThisThread(d);
  const Primitive& prim = PrimitiveFor(d, q);
  if (thread.scratchpad.size() < prim.scratchpad_bytes) {
    thread.scratchpad.resize(prim.scratchpad_bytes);
  }
  const int64_t bytes = ElementBytes(p.type);
  void* pointers[4] = {
      const_cast<char*>(static_cast<const char*>(a) + part.offset_a * bytes),
      const_cast<char*>(static_cast<const char*>(b) + part.offset_b * bytes),
      c + part.offset_c, thread.scratchpad.data()};
  const dnnl_memory_desc_t* descs[4] = {&prim.a, &prim.b, &prim.c,
                                        &prim.scratchpad};
  const int kinds[4] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST,
                        DNNL_ARG_SCRATCHPAD};
  dnnl_exec_arg_t args[4];
  int nargs = 0;
  for (int i = 0; i < 4; ++i) {
    if (i == 3 && prim.scratchpad_bytes == 0) continue;
    dnnl_memory_t memory;
    Check(d.memory_create(&memory, descs[i], d.engine, pointers[i]), "memory",
          q);
    args[nargs++] = {kinds[i], memory};
  }
  // A CPU stream executes in order on this thread: done on return.
  Check(d.primitive_execute(prim.primitive, thread.stream, nargs, args),
        "matmul", q);
  for (int i = 0; i < nargs; ++i) d.memory_destroy(args[i].memory);
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
                               reinterpret_cast<float*>(c), block, blocks);
}
