// oneDNN (Debian's libdnnl 2.6.3), dlopen()ed on first use: the compiler
// builds and runs without it (GEMMs then go to OpenBLAS or loops,
// convolutions to loops). What the GEMM and convolution calls
// (onednn_gemm.h, onednn_conv.h) share: the C API functions they use, the
// per-thread stream and buffers, one OpenMP thread per call, and epilogues
// as post-ops.
#ifndef RBLN_COMPILER_KERNELS_ONEDNN_LIBRARY_H_
#define RBLN_COMPILER_KERNELS_ONEDNN_LIBRARY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "oneapi/dnnl/dnnl.h"
#include "rbln/compiler/abi/library_epilogue.h"

namespace rbln::compiler {

inline constexpr char kOnednnLibrary[] = "libdnnl.so.2";

// dlopen()s oneDNN once and resolves the functions used. True if usable.
// Thread-safe; the library is never unloaded.
bool LoadOnednn();

// Why oneDNN is unusable (empty if it is usable), or "oneDNN x.y.z".
std::string OnednnVersion();

namespace onednn {

// The oneDNN C API functions used, from the dlopen()ed library (the build
// needs only its headers).
struct Api {
  decltype(&dnnl_engine_create) engine_create;
  decltype(&dnnl_stream_create) stream_create;
  decltype(&dnnl_memory_desc_init_by_strides) memory_desc_init_by_strides;
  decltype(&dnnl_memory_desc_init_by_tag) memory_desc_init_by_tag;
  decltype(&dnnl_memory_desc_equal) memory_desc_equal;
  decltype(&dnnl_matmul_desc_init) matmul_desc_init;
  decltype(&dnnl_dilated_convolution_forward_desc_init) convolution_desc_init;
  decltype(&dnnl_reorder_primitive_desc_create) reorder_primitive_desc_create;
  decltype(&dnnl_primitive_attr_create) primitive_attr_create;
  decltype(&dnnl_primitive_attr_destroy) primitive_attr_destroy;
  decltype(&dnnl_primitive_attr_set_post_ops) primitive_attr_set_post_ops;
  decltype(&dnnl_primitive_attr_set_scratchpad_mode)
      primitive_attr_set_scratchpad_mode;
  decltype(&dnnl_post_ops_create) post_ops_create;
  decltype(&dnnl_post_ops_destroy) post_ops_destroy;
  decltype(&dnnl_post_ops_append_sum) post_ops_append_sum;
  decltype(&dnnl_post_ops_append_eltwise) post_ops_append_eltwise;
  decltype(&dnnl_post_ops_append_binary) post_ops_append_binary;
  decltype(&dnnl_primitive_desc_create) primitive_desc_create;
  decltype(&dnnl_primitive_desc_destroy) primitive_desc_destroy;
  decltype(&dnnl_primitive_desc_query) primitive_desc_query;
  decltype(&dnnl_primitive_desc_query_md) primitive_desc_query_md;
  decltype(&dnnl_memory_desc_get_size) memory_desc_get_size;
  decltype(&dnnl_primitive_create) primitive_create;
  decltype(&dnnl_primitive_destroy) primitive_destroy;
  decltype(&dnnl_primitive_execute) primitive_execute;
  decltype(&dnnl_primitive_get_primitive_desc) primitive_get_primitive_desc;
  decltype(&dnnl_memory_create) memory_create;
  decltype(&dnnl_memory_destroy) memory_destroy;
  decltype(&dnnl_version) version;
  // The instruction set oneDNN's kernels use (ONEDNN_MAX_CPU_ISA applied);
  // null if the library has none.
  decltype(&dnnl_get_effective_cpu_isa) get_effective_cpu_isa = nullptr;
  // libgomp, oneDNN's runtime (absent if oneDNN threads otherwise).
  void (*omp_set_num_threads)(int) = nullptr;
  int (*omp_get_max_threads)() = nullptr;
  dnnl_engine_t engine = nullptr;
  std::string error;  // why it is unusable; empty if usable
};

// The loaded library (Api::error says why not).
const Api& Library();

// Whether oneDNN's kernels here may use AMX (its effective ISA includes
// avx512_core_amx).
bool HasAmx(const Api& d);

// Whether oneDNN has bf16 kernels here: oneDNN 2.6 takes bf16 operands and
// results only from avx512_core on (cpu::platform::has_data_type_support);
// below it (AVX2 CPUs such as AMD EPYC Zen 2/3) bf16 GEMMs and
// convolutions run on f32 copies (onednn_gemm.cc, onednn_conv.cc).
bool HasBf16(const Api& d);

// Prints "[rbln compiler] oneDNN <message>" and aborts: a call the rewrite
// emitted for a problem oneDNN should take failed, which no caller can
// recover from.
[[noreturn]] void Fail(const std::string& message);
// Fail()s unless `status` is dnnl_success; `what` says what failed.
void Check(dnnl_status_t status, const std::string& what);

// oneDNN on one OpenMP thread while in scope (the chiplet workers are the
// parallelism, and a block's result must not depend on a thread count),
// then the caller's setting again: the calling thread may be the user's,
// whose OpenMP thread count is PyTorch's torch.get_num_threads() (the same
// libgomp; Dynamo guards on it). Before creating primitives too: oneDNN
// sizes its blocking by the thread count.
class OneOmpThread {
 public:
  explicit OneOmpThread(const Api& d);
  ~OneOmpThread();
  OneOmpThread(const OneOmpThread&) = delete;
  OneOmpThread& operator=(const OneOmpThread&) = delete;

 private:
  const Api& d_;
  int saved_ = 1;
};

// Per calling thread: its stream and reusable buffers (scratchpads and
// reordered operands), so calls on several workers never share memory.
struct ThreadState {
  dnnl_stream_t stream = nullptr;
  std::vector<std::vector<char>> buffers;

  // Buffer `slot`, at least `bytes` long, 64-byte aligned.
  void* Buffer(int slot, size_t bytes);
};
ThreadState& ThisThread(const Api& d);

// A memory object over `data` for the duration of one call.
class Memory {
 public:
  Memory(const Api& d, const dnnl_memory_desc_t& desc, void* data);
  ~Memory();
  Memory(const Memory&) = delete;
  Memory& operator=(const Memory&) = delete;
  dnnl_memory_t get() const { return memory_; }

 private:
  const Api& d_;
  dnnl_memory_t memory_ = nullptr;
};

// Runs `primitive` on `args` (kind, memory) on this thread's stream; done on
// return (a CPU stream executes in order on the calling thread).
void Execute(const Api& d, dnnl_primitive_t primitive,
             const std::vector<dnnl_exec_arg_t>& args, const std::string& what);

// A plain f32 descriptor of one row of `sides` as a binary post-op operand:
// dims all 1 but `channel_dim`, which has `channels`.
dnnl_memory_desc_t SideDesc(const Api& d, int ndims, int channel_dim,
                            int64_t channels);

// Primitive attributes: user scratchpad, the epilogue's element-wise and
// binary post-ops (binary operands from SideDesc(ndims, channel_dim,
// channels)), or a sum post-op when `accumulate`. Null with *status set if
// oneDNN rejects them. The caller destroys the result.
dnnl_primitive_attr_t Attributes(const Api& d, const LibraryEpilogue& epilogue,
                                 bool accumulate, int ndims, int channel_dim,
                                 int64_t channels, dnnl_status_t* status);

// The implementation name of `pd` (e.g. "brgconv:avx512_core_bf16").
std::string ImplementationOf(const Api& d, const_dnnl_primitive_desc_t pd);

}  // namespace onednn
}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_KERNELS_ONEDNN_LIBRARY_H_
