#include "rbln/torch/csrc/dispatch/device_cast.h"

#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <c10/core/DeviceGuard.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "rbln/compiler/compiler.h"
#include "rbln/compiler/ir/graph.pb.h"
#include "rbln/core/counters.h"
#include "rbln/torch/csrc/device_state.h"
#include "rbln/torch/csrc/dispatch/program_io.h"
#include "rbln/torch/csrc/memory/device_allocator.h"
#include "rbln/torch/csrc/streams/streams.h"
#include "rbln/torch/csrc/transfer/tensor_transfer.h"

namespace rbln::torch_backend {
namespace {

using compiler::CompiledProgram;

constexpr c10::DispatchKeySet kRblnKeys(c10::DispatchKey::PrivateUse1);

struct CastCounters {
  Counter* device = CounterRegistry::Global().Get("dispatch/device_casts");
  Counter* host = CounterRegistry::Global().Get("dispatch/host_casts");
};

const CastCounters& Counters() {
  static const auto* counters = new CastCounters();
  return *counters;
}

bool IsFloating(c10::ScalarType t) {
  return t == at::kHalf || t == at::kBFloat16 || t == at::kFloat;
}

// Cast programs by (source dtype, destination dtype, sizes, and for a view
// source its strides): the conversions of a model repeat a few shapes, and
// the key skips building and hashing the graph of every call.
class CastPrograms {
 public:
  static CastPrograms& Global() {
    static auto* programs = [] {
      auto* p = new CastPrograms();
      // empty_cache() drops compiled programs (SPEC E1).
      RegisterCacheDropper([p] { p->Clear(); });
      return p;
    }();
    return *programs;
  }

  // The program converting `src` (read through its span when it is not
  // contiguous) into a contiguous tensor of `src`'s sizes and dtype `to`.
  absl::StatusOr<std::shared_ptr<const CompiledProgram>> Get(const at::Tensor& src,
                                                             at::ScalarType to) {
    const bool span = !src.is_contiguous();
    std::string key = absl::StrCat(static_cast<int>(src.scalar_type()), ">",
                                   static_cast<int>(to), ":", absl::StrJoin(src.sizes(), ","));
    if (span) absl::StrAppend(&key, "/", absl::StrJoin(src.strides(), ","));
    {
      absl::MutexLock lock(&mu_);
      auto it = programs_.find(key);
      if (it != programs_.end()) return it->second;
    }
    absl::StatusOr<std::shared_ptr<const CompiledProgram>> program =
        compiler::Compiler::Global().Compile(CastGraph(src, to, span));
    if (!program.ok()) return program.status();
    absl::MutexLock lock(&mu_);
    programs_.emplace(std::move(key), *program);
    return *program;
  }

  void Clear() {
    absl::MutexLock lock(&mu_);
    programs_.clear();
  }

 private:
  static compiler::ir::Graph CastGraph(const at::Tensor& src, at::ScalarType to, bool span) {
    compiler::ir::Graph graph;
    graph.set_name("to_dtype");
    compiler::ir::Value* input = graph.add_inputs();
    input->set_name(span ? "self.span" : "self");
    *input->mutable_type() =
        span ? IrType(src.scalar_type(), {SpanElements(src)}) : IrType(src.scalar_type(), src.sizes());
    if (span) {
      // The view (a permute, slice, expand of the copy's broadcast, ...)
      // replayed on the storage span, fused into the cast's loop.
      compiler::ir::Node* view = graph.add_nodes();
      view->set_op("strided_view");
      view->add_inputs("self.span");
      (*view->mutable_attrs())["sizes"].set_s(absl::StrJoin(src.sizes(), ","));
      (*view->mutable_attrs())["strides"].set_s(absl::StrJoin(src.strides(), ","));
      compiler::ir::Value* replayed = view->add_outputs();
      replayed->set_name("self");
      *replayed->mutable_type() = IrType(src.scalar_type(), src.sizes());
    }
    compiler::ir::Node* cast = graph.add_nodes();
    cast->set_op("to_dtype");
    cast->add_inputs("self");
    compiler::ir::Value* result = cast->add_outputs();
    result->set_name("result");
    *result->mutable_type() = IrType(to, src.sizes());
    graph.add_outputs("result");
    return graph;
  }

  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<const CompiledProgram>> programs_
      ABSL_GUARDED_BY(mu_);
};

// Are `t`'s latest bytes in device memory (device-latest or in sync)?
bool DeviceResident(const at::Tensor& t) {
  absl::StatusOr<runtime::StorageInfo> info =
      RuntimeOrThrow().storage().Info(reinterpret_cast<uintptr_t>(t.data_ptr()));
  ThrowIfErrorOn(t.device(), info.status());
  return info->has_device_memory && (info->state == runtime::DataState::kDeviceLatest ||
                                     info->state == runtime::DataState::kInSync);
}

// A host-latest source: both copies are host memory, so the conversion is
// host work (reads and writes of host copies, no DMA).
void ConvertInHostMemory(const at::Tensor& src, const at::Tensor& dst) {
  const at::Tensor host_src = DownloadSpan(src);
  // A destination with gaps between its elements keeps the gap bytes.
  at::Tensor host_dst =
      dst.is_non_overlapping_and_dense()
          ? at::empty_strided(dst.sizes(), dst.strides(), dst.options().device(at::kCPU))
          : DownloadSpan(dst);
  host_dst.copy_(host_src);
  UploadSpan(host_dst, dst);
  Counters().host->Increment();
}

// The dims of `t` by decreasing stride: permuted so, a dense tensor
// (`x.t().half()` keeps x.t()'s strides) is contiguous.
std::vector<int64_t> DimsByStride(const at::Tensor& t) {
  std::vector<int64_t> dims(t.dim());
  for (int64_t d = 0; d < t.dim(); ++d) dims[d] = d;
  std::stable_sort(dims.begin(), dims.end(),
                   [&](int64_t a, int64_t b) { return t.stride(a) > t.stride(b); });
  return dims;
}

// A device-resident source: one cast program on the device.
void ConvertOnDevice(const at::Tensor& src, const at::Tensor& dst) {
  at::Tensor from = src.expand_as(dst);
  at::Tensor to = dst;
  if (!dst.is_contiguous() && dst.is_non_overlapping_and_dense()) {
    const std::vector<int64_t> dims = DimsByStride(dst);
    from = from.permute(dims);
    to = dst.permute(dims);
  }
  absl::StatusOr<std::shared_ptr<const CompiledProgram>> program =
      CastPrograms::Global().Get(from, to.scalar_type());
  // The compiler converts every pair of floating dtypes; a failure here is
  // a compiler bug, not a case to hide behind a host conversion (SPEC P2).
  ThrowIfErrorOn(dst.device(), program.status());
  // A contiguous destination (up to a permutation) is the program's output;
  // one with gaps gets a contiguous result the DMA engine copies into its
  // strides (SPEC K2, K4).
  const bool direct = to.is_contiguous();
  const at::Tensor out =
      direct ? to
             : at::Tensor(at::detail::empty_generic(to.sizes(), GetDeviceAllocator(), kRblnKeys,
                                                    to.scalar_type(), std::nullopt));
  const std::vector<runtime::DeviceBuffer> args = {
      from.is_contiguous() ? Buffer(from) : SpanBuffer(from), Buffer(out)};
  const c10::DeviceGuard guard(dst.device());
  // Runs on this thread after the current stream's queued work (SPEC M2).
  CompleteCurrentStreamWork(dst.device().index());
  ThrowIfErrorOn(dst.device(), RuntimeOrThrow().executor().Run(**program, args));
  if (!direct) CopyWithDevice(out, to);
  Counters().device->Increment();
}

}  // namespace

bool ConvertsWithoutBounce(c10::ScalarType from, c10::ScalarType to) {
  return from != to && IsFloating(from) && IsFloating(to);
}

bool TryConvertWithoutBounce(const at::Tensor& src, const at::Tensor& dst) {
  if (src.is_cpu() || dst.is_cpu() || src.device() != dst.device() ||
      !ConvertsWithoutBounce(src.scalar_type(), dst.scalar_type())) {
    return false;
  }
  if (dst.numel() == 0) return true;
  // A destination sharing bytes with its source would be overwritten while
  // it is read.
  if (src.is_alias_of(dst) && at::get_overlap_status(src, dst) != at::MemOverlapStatus::No) {
    return false;
  }
  if (DeviceResident(src)) {
    ConvertOnDevice(src, dst);
  } else {
    ConvertInHostMemory(src, dst);
  }
  return true;
}

}  // namespace rbln::torch_backend
