// Compiled-kernel ops (SPEC G1, G2, H1): one boxed shim serves every op in
// the table at the bottom. Per call it
//   1. reads the arguments by the op's schema: device tensors become graph
//      inputs, Python scalars and other non-tensor arguments become node
//      attributes (named as in the schema);
//   2. builds the specialization key (op, attributes, per input dtype, shape,
//      stride, storage offset, device) and probes the C++ warm cache;
//   3. on a miss runs the pre-dispatch checks in the spec's order (dtype,
//      scalar, NaN/Inf; then alignment and storage offset), infers the
//      output on the meta device, builds the graph IR and compiles it;
//   4. runs the program on device memory; in-place and out= variants compute
//      into a fresh buffer and copy into their destination (SPEC K4).
// Calls that fail a check, or whose compile fails, run on the CPU through
// the boxed fallback; every decision is counted.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "rbln/compiler/compiler.h"
#include "rbln/compiler/ir/graph.pb.h"
#include "rbln/core/counters.h"
#include "rbln/torch/csrc/cpu_fallback.h"
#include "rbln/torch/csrc/device_state.h"
#include "rbln/torch/csrc/dispatch_config.h"
#include "rbln/torch/csrc/fallback_policy.h"
#include "rbln/torch/csrc/tensor_transfer.h"

namespace rbln::torch_backend {
namespace {

using compiler::CompiledProgram;

// The compiled program of a specialization, with what running it needs.
struct WarmEntry {
  std::shared_ptr<const CompiledProgram> program;
  std::vector<int64_t> out_sizes;
  at::ScalarType out_dtype;
};

class WarmCache {
 public:
  std::shared_ptr<const WarmEntry> Find(const std::string& key)
      ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(key);
    return it == entries_.end() ? nullptr : it->second;
  }
  void Insert(const std::string& key, std::shared_ptr<const WarmEntry> e)
      ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    entries_[key] = std::move(e);
  }
  void Clear() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    entries_.clear();
  }

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<const WarmEntry>> entries_
      ABSL_GUARDED_BY(mu_);
};

WarmCache& GlobalWarmCache() {
  static auto* cache = new WarmCache();
  return *cache;
}

// empty_cache() drops compiled programs too: the next call pays its
// preparation again (SPEC E1).
const bool g_dropper_registered [[maybe_unused]] = [] {
  RegisterCacheDropper([] {
    GlobalWarmCache().Clear();
    compiler::Compiler::Global().ClearCache();
  });
  return true;
}();

struct DispatchCounters {
  Counter* warm_hits = CounterRegistry::Global().Get("dispatch/warm_hits");
  Counter* warm_misses = CounterRegistry::Global().Get("dispatch/warm_misses");
  Counter* compiled_runs = CounterRegistry::Global().Get("dispatch/compiled_runs");
};

const DispatchCounters& Counters() {
  static const auto* counters = new DispatchCounters();
  return *counters;
}

std::optional<compiler::ir::DType> IrDType(at::ScalarType t) {
  switch (t) {
    case at::kHalf:
      return compiler::ir::FLOAT16;
    case at::kBFloat16:
      return compiler::ir::BFLOAT16;
    case at::kFloat:
      return compiler::ir::FLOAT32;
    case at::kInt:
      return compiler::ir::INT32;
    case at::kLong:
      return compiler::ir::INT64;
    case at::kBool:
      return compiler::ir::BOOL;
    default:
      return std::nullopt;
  }
}

DType RuntimeDType(at::ScalarType t) {
  switch (t) {
    case at::kHalf:
      return DType::kFloat16;
    case at::kBFloat16:
      return DType::kBFloat16;
    case at::kFloat:
      return DType::kFloat32;
    case at::kInt:
      return DType::kInt32;
    case at::kLong:
      return DType::kInt64;
    default:
      return DType::kBool;
  }
}

compiler::ir::TensorType IrType(at::ScalarType dtype, c10::IntArrayRef shape) {
  compiler::ir::TensorType t;
  t.set_dtype(*IrDType(dtype));
  for (int64_t d : shape) t.add_shape(d);
  return t;
}

runtime::DeviceBuffer Buffer(const at::Tensor& t) {
  runtime::DeviceBuffer b;
  b.address = reinterpret_cast<uintptr_t>(t.data_ptr());
  b.dtype = RuntimeDType(t.scalar_type());
  b.sizes.assign(t.sizes().begin(), t.sizes().end());
  b.strides.assign(t.strides().begin(), t.strides().end());
  return b;
}

bool IsHalf(at::ScalarType t) { return t == at::kHalf || t == at::kBFloat16; }

// One call, read by the op's schema.
struct Call {
  std::string op;        // Graph op: the schema's base name ("mul").
  std::string overload;  // Full name for keys and logs ("aten::mul.Tensor").
  std::vector<at::Tensor> inputs;
  std::vector<std::string> input_names;
  compiler::ir::Node node;  // Attributes only; inputs/outputs filled later.
  std::string attr_key;
  std::optional<at::Tensor> destination;  // In-place self or out=.
  bool has_zero_dim_device_tensor = false;
  std::string unsupported;  // Why the arguments cannot be described.
};

void SetScalarAttr(Call& call, const std::string& name, const c10::Scalar& s) {
  compiler::ir::Attribute& a = (*call.node.mutable_attrs())[name];
  if (s.isBoolean()) {
    a.set_b(s.toBool());
  } else if (s.isIntegral(false)) {
    a.set_i(s.toLong());
  } else if (s.isFloatingPoint()) {
    a.set_f(s.toDouble());
  } else {
    call.unsupported = "complex scalar";
  }
}

Call ReadCall(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  const c10::FunctionSchema& schema = op.schema();
  Call call;
  call.op = schema.name().substr(schema.name().find("::") + 2);
  if (!call.op.empty() && call.op.back() == '_') call.op.pop_back();  // add_ -> add
  if (call.op == "_softmax" || call.op == "_log_softmax") call.op.erase(0, 1);
  call.overload = absl::StrCat(schema.name(), schema.overload_name().empty() ? "" : ".",
                               schema.overload_name());
  const auto& args = schema.arguments();
  const size_t first = stack.size() - args.size();
  for (size_t i = 0; i < args.size(); ++i) {
    const c10::Argument& arg = args[i];
    const c10::IValue& v = stack[first + i];
    const std::string& name = arg.name();
    const bool writes = arg.alias_info() != nullptr && arg.alias_info()->isWrite();
    if (v.isNone()) continue;
    if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      if (writes) call.destination = t;
      if (arg.is_out()) continue;
      if (t.is_cpu() && t.dim() == 0) {
        // A Python scalar operand (`x * 2.0`): an attribute, in the key.
        SetScalarAttr(call, name, t.item());
        continue;
      }
      if (t.dim() == 0) call.has_zero_dim_device_tensor = true;
      call.inputs.push_back(t);
      call.input_names.push_back(name);
    } else if (v.isScalar()) {
      SetScalarAttr(call, name, v.toScalar());
    } else if (v.isString()) {
      (*call.node.mutable_attrs())[name].set_s(v.toStringRef());
    } else if (v.isIntList()) {
      (*call.node.mutable_attrs())[name].set_s(absl::StrJoin(v.toIntVector(), ","));
    } else if (v.isBool()) {
      (*call.node.mutable_attrs())[name].set_b(v.toBool());
    } else {
      call.unsupported = absl::StrCat("argument ", name, " of type ", v.tagKind());
    }
  }
  // Binary ops take a scalar second operand as "other" (pow's "exponent").
  auto& attrs = *call.node.mutable_attrs();
  if (call.inputs.size() == 1 && !attrs.contains("other") && attrs.contains("exponent")) {
    attrs["other"] = attrs["exponent"];
    attrs.erase("exponent");
  }
  std::vector<std::string> parts;
  std::map<std::string, std::string> sorted;
  for (const auto& [k, a] : attrs) sorted[k] = a.ShortDebugString();
  for (const auto& [k, a] : sorted) parts.push_back(absl::StrCat(k, "=", a));
  call.attr_key = absl::StrJoin(parts, ";");
  return call;
}

std::string SpecializationKey(const Call& call) {
  std::string key = absl::StrCat(call.overload, "|", call.attr_key);
  for (const at::Tensor& t : call.inputs) {
    absl::StrAppend(&key, "|", static_cast<int>(t.scalar_type()), ":",
                    t.device().index(), ":", t.storage_offset(), ":");
    for (int64_t s : t.sizes()) absl::StrAppend(&key, s, ",");
    absl::StrAppend(&key, ":");
    for (int64_t s : t.strides()) absl::StrAppend(&key, s, ",");
  }
  return key;
}

// The functional result's sizes and dtype, by running the op on meta tensors.
std::optional<at::Tensor> InferOutput(const c10::OperatorHandle& op,
                                      const torch::jit::Stack& stack) {
  const size_t n = op.schema().arguments().size();
  torch::jit::Stack meta(stack.end() - n, stack.end());
  for (c10::IValue& v : meta) {
    if (!v.isTensor()) continue;
    const at::Tensor& t = v.toTensor();
    if (t.is_cpu() && t.dim() == 0) continue;  // Scalars stay as they are.
    v = at::empty_strided(t.sizes(), t.strides(), t.options().device(at::kMeta));
  }
  try {
    op.callBoxed(meta);
  } catch (const c10::Error&) {
    return std::nullopt;  // No meta kernel: let the CPU decide.
  }
  if (meta.size() != 1 || !meta[0].isTensor()) return std::nullopt;
  return meta[0].toTensor();
}

// The shim's checks (SPEC H1), on every call, before the warm cache: dtype,
// scalar, NaN/Inf. Returns the failed check, if any.
std::optional<Check> FailedShimCheck(const Call& call) {
  const DispatchConfig& config = GetDispatchConfig();
  if (config.Runs(Check::kDtype)) {
    for (const at::Tensor& t : call.inputs) {
      if (!IsHalf(t.scalar_type()) && t.scalar_type() != at::kBool) return Check::kDtype;
      if (IsHalf(t.scalar_type()) && IsHalf(call.inputs[0].scalar_type()) &&
          t.scalar_type() != call.inputs[0].scalar_type()) {
        return Check::kDtype;
      }
    }
  }
  if (config.Runs(Check::kScalar) && call.has_zero_dim_device_tensor) return Check::kScalar;
  if (config.Runs(Check::kNanInf)) {
    // Reads inputs on the host: a device-latest input costs a D2H (SPEC H8).
    for (const at::Tensor& t : call.inputs) {
      if (!IsHalf(t.scalar_type()) || t.numel() == 0) continue;
      at::Tensor host = DownloadSpan(t);
      if (at::isnan(host).any().item<bool>() || at::isinf(host).any().item<bool>()) {
        return Check::kNanInf;
      }
    }
  }
  return std::nullopt;
}

// The wrapper's checks, after a warm-cache miss: output dtype, alignment of
// the last dimension (SPEC H3), storage offset (SPEC H6). A call failing one
// never enters the warm cache, so it is checked again on every call.
std::optional<Check> FailedWrapperCheck(const Call& call, const at::Tensor& out) {
  const DispatchConfig& config = GetDispatchConfig();
  if (config.Runs(Check::kDtype) && !IsHalf(out.scalar_type()) &&
      out.scalar_type() != at::kBool) {
    return Check::kDtype;
  }
  if (config.Runs(Check::kAlignment)) {
    auto misaligned = [](const at::Tensor& t) {
      return t.dim() > 0 && t.size(-1) % 64 != 0;
    };
    for (const at::Tensor& t : call.inputs) {
      if (misaligned(t)) return Check::kAlignment;
    }
    if (misaligned(out)) return Check::kAlignment;
  }
  if (config.Runs(Check::kStorageOffset)) {
    for (const at::Tensor& t : call.inputs) {
      if (t.storage_offset() != 0) return Check::kStorageOffset;
    }
  }
  return std::nullopt;
}

void CountFallback(const Call& call, absl::string_view why) {
  CounterRegistry& r = CounterRegistry::Global();
  r.Get(absl::StrCat("dispatch/cpu_fallback_why/", call.op, "/", why))->Increment();
  // Wrapper-side checks re-enter the wrapper every call: SPEC H1 reports
  // them as repeated recompiles.
  if (why == "alignment" || why == "storage_offset") {
    r.Get("dispatch/recompile")->Increment();
    r.Get(absl::StrCat("dispatch/recompile/", call.op))->Increment();
  }
}

std::shared_ptr<const WarmEntry> Compile(const Call& call, const at::Tensor& out,
                                         std::string* error) {
  compiler::ir::Graph graph;
  graph.set_name(call.op);
  for (size_t i = 0; i < call.inputs.size(); ++i) {
    compiler::ir::Value* v = graph.add_inputs();
    v->set_name(call.input_names[i]);
    *v->mutable_type() = IrType(call.inputs[i].scalar_type(), call.inputs[i].sizes());
  }
  compiler::ir::Node* node = graph.add_nodes();
  *node = call.node;
  node->set_op(call.op);
  for (const std::string& name : call.input_names) node->add_inputs(name);
  compiler::ir::Value* result = node->add_outputs();
  result->set_name("result");
  *result->mutable_type() = IrType(out.scalar_type(), out.sizes());
  graph.add_outputs("result");
  absl::StatusOr<std::shared_ptr<const CompiledProgram>> program =
      compiler::Compiler::Global().Compile(graph);
  if (!program.ok()) {
    *error = std::string(program.status().message());
    return nullptr;
  }
  auto entry = std::make_shared<WarmEntry>();
  entry->program = *program;
  entry->out_sizes.assign(out.sizes().begin(), out.sizes().end());
  entry->out_dtype = out.scalar_type();
  return entry;
}

void Fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  RblnCpuFallback(op, stack);
}

void CompiledKernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  Call call = ReadCall(op, *stack);
  if (!call.unsupported.empty() || call.inputs.empty()) {
    CountFallback(call, "argument");
    return Fallback(op, stack);
  }
  for (const at::Tensor& t : call.inputs) {
    if (t.device() != call.inputs[0].device() || !IrDType(t.scalar_type())) {
      CountFallback(call, t.device() != call.inputs[0].device() ? "device" : "dtype");
      return Fallback(op, stack);  // The fallback reports mixed devices.
    }
  }
  if (std::optional<Check> failed = FailedShimCheck(call)) {
    CountFallback(call, CheckName(*failed));
    return Fallback(op, stack);
  }
  const c10::DeviceGuard guard(call.inputs[0].device());
  const std::string key = SpecializationKey(call);
  std::shared_ptr<const WarmEntry> entry = GlobalWarmCache().Find(key);
  if (entry) {
    Counters().warm_hits->Increment();
  } else {
    Counters().warm_misses->Increment();
    std::optional<at::Tensor> meta = InferOutput(op, *stack);
    if (!meta || !IrDType(meta->scalar_type())) {
      CountFallback(call, "output");
      return Fallback(op, stack);
    }
    if (std::optional<Check> failed = FailedWrapperCheck(call, *meta)) {
      CountFallback(call, CheckName(*failed));
      return Fallback(op, stack);
    }
    std::string error;
    entry = Compile(call, *meta, &error);
    if (!entry) {
      // The compile_error fallback (SPEC I6): an error when disabled, else
      // counted, logged at INFO and warned once.
      OnFallback(FallbackCategory::kCompileError, call.overload, error);
      TORCH_WARN_ONCE("rbln: compiling ", call.overload, " failed, running it on CPU: ", error);
      CountFallback(call, "compile_error");
      return Fallback(op, stack);
    }
    GlobalWarmCache().Insert(key, entry);
  }
  // The compiled kernel reads dense row-major buffers.
  std::vector<runtime::DeviceBuffer> buffers;
  std::vector<at::Tensor> keep_alive;
  for (const at::Tensor& t : call.inputs) {
    keep_alive.push_back(t.contiguous());
    buffers.push_back(Buffer(keep_alive.back()));
  }
  at::Tensor result = at::empty(entry->out_sizes,
                                call.inputs[0].options().dtype(entry->out_dtype));
  buffers.push_back(Buffer(result));
  ThrowIfErrorOn(result.device(), RuntimeOrThrow().executor().Run(*entry->program, buffers));
  Counters().compiled_runs->Increment();

  const size_t n = op.schema().arguments().size();
  if (call.destination) {
    // In place or out=: the result lands in the destination (SPEC K4).
    at::Tensor dst = *call.destination;
    if (dst.sizes() != result.sizes()) dst.resize_(result.sizes());
    CopyWithDevice(result, dst);
    torch::jit::drop(*stack, n);
    torch::jit::push(*stack, dst);
    return;
  }
  torch::jit::drop(*stack, n);
  torch::jit::push(*stack, result);
}

// ATen overloads served by compiled kernels (SPEC G1). An op the compiler
// cannot convert falls back to the CPU with a counted compile_error.
constexpr const char* kCompiledOps[] = {
    "add.Tensor", "add.out", "add_.Tensor", "add.Scalar",
    "sub.Tensor", "sub.out", "sub_.Tensor", "sub.Scalar",
    "mul.Tensor", "mul.out", "mul_.Tensor", "mul.Scalar",
    "div.Tensor", "div.out", "div_.Tensor", "div.Scalar", "div.Tensor_mode",
    "pow.Tensor_Tensor", "pow.Tensor_Scalar",
    "maximum", "minimum",
    "eq.Tensor", "eq.Scalar", "ne.Tensor", "ne.Scalar", "lt.Tensor", "lt.Scalar",
    "le.Tensor", "le.Scalar", "gt.Tensor", "gt.Scalar", "ge.Tensor", "ge.Scalar",
    "abs", "neg", "ceil", "floor", "log", "rsqrt", "sigmoid", "silu", "relu",
    "gelu", "logical_not", "clamp", "where.self", "masked_fill.Scalar",
    "mm", "bmm", "addmm", "_softmax", "_log_softmax",
    "sum.dim_IntList", "mean.dim", "amax", "amin",
};

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const char* name : kCompiledOps) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&CompiledKernel>());
  }
}

}  // namespace
}  // namespace rbln::torch_backend
