#include "rbln/torch/csrc/dynamo/graph_program.h"

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <pybind11/stl.h>
#include <torch/csrc/autograd/VariableTypeUtils.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "rbln/compiler/compiler.h"
#include "rbln/compiler/execution/compiled_program.h"
#include "rbln/compiler/ir/graph.pb.h"
#include "rbln/compiler/ir/graph_util.h"
#include "rbln/core/counters.h"
#include "rbln/torch/csrc/device_state.h"
#include "rbln/torch/csrc/fallback_policy.h"
#include "rbln/torch/csrc/profiler/explain_signals.h"
#include "rbln/torch/csrc/python_errors.h"

namespace py = pybind11;

namespace rbln::torch_backend {
namespace {

// (name, dtype, shape) of a graph value, as Python describes it.
using ValueSpec = std::tuple<std::string, std::string, std::vector<int64_t>>;
// (op, input names, outputs, attributes) of a node.
using NodeSpec =
    std::tuple<std::string, std::vector<std::string>, std::vector<ValueSpec>, py::dict>;

struct GraphCounters {
  Counter* compiles = CounterRegistry::Global().Get("graph/compiles");
  Counter* compile_errors = CounterRegistry::Global().Get("graph/compile_errors");
  Counter* runs = CounterRegistry::Global().Get("graph/runs");
  Counter* cpu_fallback = CounterRegistry::Global().Get("graph/cpu_fallback");
  Counter* host_ops = CounterRegistry::Global().Get("graph/host_ops");
};

const GraphCounters& Counters() {
  static const auto* counters = new GraphCounters();
  return *counters;
}

// Dtype names as torch prints them without the "torch." prefix.
constexpr std::pair<const char*, at::ScalarType> kDTypes[] = {
    {"float16", at::kHalf}, {"bfloat16", at::kBFloat16}, {"float32", at::kFloat},
    {"int32", at::kInt},    {"int64", at::kLong},        {"bool", at::kBool},
    {"int8", at::kChar},    {"int16", at::kShort},       {"uint8", at::kByte},
};
constexpr compiler::ir::DType kIrDTypes[] = {
    compiler::ir::FLOAT16, compiler::ir::BFLOAT16, compiler::ir::FLOAT32,
    compiler::ir::INT32,   compiler::ir::INT64,    compiler::ir::BOOL,
    compiler::ir::INT8,    compiler::ir::INT16,    compiler::ir::UINT8,
};

int DTypeIndex(const std::string& name) {
  for (int i = 0; i < static_cast<int>(std::size(kDTypes)); ++i) {
    if (name == kDTypes[i].first) return i;
  }
  throw py::value_error(absl::StrCat(
      "rbln graph: dtype '", name,
      "' has no device representation (supported: float16, bfloat16, float32, "
      "int32, int64, bool, int8, int16, uint8)"));
}

compiler::ir::Value ToIrValue(const ValueSpec& spec) {
  const auto& [name, dtype, shape] = spec;
  compiler::ir::Value v;
  v.set_name(name);
  v.mutable_type()->set_dtype(kIrDTypes[DTypeIndex(dtype)]);
  for (int64_t d : shape) v.mutable_type()->add_shape(d);
  return v;
}

void SetAttr(const std::string& node, const std::string& name, py::handle value,
             compiler::ir::Attribute* attr) {
  // bool before int: Python's bool is an int.
  if (py::isinstance<py::bool_>(value)) {
    attr->set_b(value.cast<bool>());
  } else if (py::isinstance<py::int_>(value)) {
    attr->set_i(value.cast<int64_t>());
  } else if (py::isinstance<py::float_>(value)) {
    attr->set_f(value.cast<double>());
  } else if (py::isinstance<py::str>(value)) {
    attr->set_s(value.cast<std::string>());
  } else {
    throw py::type_error(absl::StrCat("rbln graph: attribute ", name, " of node ", node,
                                      " must be bool, int, float or str, got ",
                                      std::string(py::str(value.get_type()))));
  }
}

// (input, value): after the program the input holds the value (graph.proto).
using UpdateSpec = std::tuple<std::string, std::string>;

compiler::ir::Graph BuildGraph(const std::string& name, const std::vector<ValueSpec>& inputs,
                               const std::vector<NodeSpec>& nodes,
                               const std::vector<std::string>& outputs,
                               const std::vector<UpdateSpec>& updates) {
  compiler::ir::Graph graph;
  graph.set_name(name);
  for (const ValueSpec& in : inputs) *graph.add_inputs() = ToIrValue(in);
  for (const auto& [op, node_inputs, node_outputs, attrs] : nodes) {
    compiler::ir::Node* node = graph.add_nodes();
    node->set_op(op);
    for (const std::string& in : node_inputs) node->add_inputs(in);
    for (const ValueSpec& out : node_outputs) *node->add_outputs() = ToIrValue(out);
    const std::string label = node_outputs.empty() ? op : std::get<0>(node_outputs[0]);
    for (const auto& [key, value] : attrs) {
      const std::string attr_name = key.cast<std::string>();
      SetAttr(label, attr_name, value, &(*node->mutable_attrs())[attr_name]);
    }
  }
  for (const std::string& out : outputs) graph.add_outputs(out);
  for (const auto& [input, value] : updates) {
    compiler::ir::Update* u = graph.add_updates();
    u->set_input(input);
    u->set_value(value);
  }
  return graph;
}

at::ScalarType ScalarTypeOf(compiler::ir::DType t) {
  for (size_t i = 0; i < std::size(kIrDTypes); ++i) {
    if (kIrDTypes[i] == t) return kDTypes[i].second;
  }
  return at::kFloat;
}

// One compiled graph: runs on the device of its inputs, its workers placed
// on the compute units of that device's RSD group (SPEC A2, A7).
class GraphProgram {
 public:
  explicit GraphProgram(std::shared_ptr<const compiler::CompiledProgram> program)
      : program_(std::move(program)) {
    const compiler::ir::Graph& g = program_->graph();
    for (const compiler::ir::TensorType& t : program_->arg_types()) {
      Spec s;
      s.dtype = ScalarTypeOf(t.dtype());
      s.runtime_dtype = compiler::ir::ToRuntimeDType(t.dtype());
      s.shape.assign(t.shape().begin(), t.shape().end());
      (static_cast<int>(specs_in_.size()) < g.inputs_size() ? specs_in_ : specs_out_)
          .push_back(std::move(s));
    }
  }

  // Inputs in graph order (rbln tensors, one device); returns fresh outputs.
  // Device-latest inputs cost nothing; host-latest ones are uploaded by the
  // executor; outputs stay device-latest (SPEC J7).
  std::vector<at::Tensor> Run(const std::vector<at::Tensor>& inputs) const {
    const std::string& name = program_->graph().name();
    TORCH_CHECK(inputs.size() == specs_in_.size(), "rbln graph ", name, " takes ",
                specs_in_.size(), " inputs, got ", inputs.size());
    c10::optional<c10::Device> device;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const at::Tensor& t = inputs[i];
      TORCH_CHECK(t.defined() && t.device().is_privateuseone(), "rbln graph ", name,
                  ": input ", i, " is on ", t.defined() ? t.device().str() : "nothing",
                  ", expected an rbln tensor; move it with .to('rbln')");
      if (!device) device = t.device();
      TORCH_CHECK(t.device() == *device, "rbln graph ", name, ": input ", i, " is on ",
                  t.device().str(), " but input 0 is on ", device->str(),
                  "; a graph runs on one device");
      const Spec& s = specs_in_[i];
      TORCH_CHECK(t.scalar_type() == s.dtype && t.sizes().vec() == s.shape, "rbln graph ",
                  name, ": input ", i, " is ", t.scalar_type(), t.sizes(),
                  " but the program was compiled for ", s.dtype, c10::IntArrayRef(s.shape));
    }
    CheckUpdatedInputs(inputs);
    const c10::Device dev = device.value_or(c10::Device(c10::DeviceType::PrivateUse1,
                                                        CurrentDevice()));
    const c10::DeviceGuard guard(dev);
    const std::vector<int> group = PhysicalNpus(dev.index());
    std::vector<at::Tensor> keep_alive;
    std::vector<runtime::DeviceBuffer> buffers;
    keep_alive.reserve(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      keep_alive.push_back(inputs[i].contiguous());
      buffers.push_back(Buffer(keep_alive.back(), specs_in_[i]));
    }
    std::vector<at::Tensor> outputs;
    bool any_elements = false;
    for (size_t i = 0; i < inputs.size(); ++i) {
      any_elements |= program_->WritesInput(static_cast<int>(i)) && inputs[i].numel() > 0;
    }
    for (const Spec& s : specs_out_) {
      outputs.push_back(at::empty(s.shape, at::TensorOptions().dtype(s.dtype).device(dev)));
      buffers.push_back(Buffer(outputs.back(), s));
      any_elements |= outputs.back().numel() > 0;
    }
    if (any_elements) {
      absl::Status status;
      {
        py::gil_scoped_release no_gil;
        status = RuntimeOrThrow().executor().Run(*program_, buffers, group);
      }
      ThrowIfErrorOn(dev, status);
    }
    // The program wrote these in place: as an in-place op would, bump their
    // version (autograd's checks, the CPU copies kept for fallbacks).
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (program_->WritesInput(static_cast<int>(i)) && !inputs[i].is_inference()) {
        torch::autograd::increment_version(inputs[i]);
      }
    }
    Counters().runs->Increment();
    return outputs;
  }

  std::vector<std::string> Ops() const {
    std::vector<std::string> ops;
    for (const compiler::ir::Node& n : program_->graph().nodes()) ops.push_back(n.op());
    return ops;
  }
  std::string Text() const { return compiler::ir::ToText(program_->graph()); }
  // Workers the program is split over, and each one's workspace bytes.
  int NumWorkers() const { return program_->num_workers(); }
  std::vector<int64_t> WorkspaceBytes() const {
    std::vector<int64_t> bytes = program_->WorkspaceBytes();
    bytes.resize(program_->num_workers(), 0);
    return bytes;
  }
  std::string Name() const { return program_->graph().name(); }
  // Where the compile's time went, per phase (ms), and how the graph was cut
  // into segments (compile_report.h).
  py::dict CompileReport() const {
    const compiler::CompileReport& r = program_->compile_report();
    auto ms = [](absl::Duration d) { return absl::ToDoubleMilliseconds(d); };
    py::dict d;
    d["wall_ms"] = ms(r.wall);
    d["frontend_ms"] = ms(r.phases.frontend);
    d["mlir_passes_ms"] = ms(r.phases.mlir_passes);
    d["llvm_translate_ms"] = ms(r.phases.llvm_translate);
    d["llvm_optimize_ms"] = ms(r.phases.llvm_optimize);
    d["llvm_codegen_ms"] = ms(r.phases.llvm_codegen);
    d["disk_load_ms"] = ms(r.phases.disk_load);
    d["segments"] = r.segments;
    d["unique_segments"] = r.unique_segments;
    d["codegen"] = r.codegen;
    d["disk_hits"] = r.disk_hits;
    d["memory_hits"] = r.memory_hits;
    d["threads"] = r.threads;
    d["block_nodes"] = r.block_nodes;
    d["block_repeats"] = r.block_repeats;
    return d;
  }
  uint64_t Fingerprint() const { return compiler::ir::Fingerprint(program_->graph()); }
  // (dtype, shape) of each input / output.
  std::vector<std::tuple<std::string, std::vector<int64_t>>> InputSpecs() const {
    return SpecList(specs_in_);
  }
  std::vector<std::tuple<std::string, std::vector<int64_t>>> OutputSpecs() const {
    return SpecList(specs_out_);
  }

 private:
  struct Spec {
    at::ScalarType dtype;
    DType runtime_dtype;
    std::vector<int64_t> shape;
  };

  // An input the program writes in place (an update) is written through
  // its own data pointer: it must be contiguous (no temporary copy) and
  // share no bytes with another input (which would see the new bytes).
  void CheckUpdatedInputs(const std::vector<at::Tensor>& inputs) const {
    const std::string& name = program_->graph().name();
    auto span = [](const at::Tensor& t) {
      const auto* base = static_cast<const char*>(t.data_ptr());
      return std::make_pair(base, base + t.numel() * t.element_size());
    };
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!program_->WritesInput(static_cast<int>(i)) || inputs[i].numel() == 0) continue;
      TORCH_CHECK(inputs[i].is_contiguous(), "rbln graph ", name, ": input ", i,
                  " is updated in place but is not contiguous (strides ",
                  inputs[i].strides(), "); pass a contiguous tensor");
      const auto [begin, end] = span(inputs[i]);
      for (size_t j = 0; j < inputs.size(); ++j) {
        if (j == i || inputs[j].numel() == 0) continue;
        const auto [other_begin, other_end] = span(inputs[j]);
        TORCH_CHECK(end <= other_begin || other_end <= begin, "rbln graph ", name,
                    ": input ", i, " is updated in place and shares bytes with input ", j,
                    "; pass tensors that do not overlap");
      }
    }
  }

  static runtime::DeviceBuffer Buffer(const at::Tensor& t, const Spec& s) {
    runtime::DeviceBuffer b;
    b.address = reinterpret_cast<uintptr_t>(t.data_ptr());
    b.dtype = s.runtime_dtype;
    b.sizes.assign(t.sizes().begin(), t.sizes().end());
    b.strides.assign(t.strides().begin(), t.strides().end());
    return b;
  }

  static std::vector<std::tuple<std::string, std::vector<int64_t>>> SpecList(
      const std::vector<Spec>& specs) {
    std::vector<std::tuple<std::string, std::vector<int64_t>>> out;
    for (const Spec& s : specs) {
      for (size_t i = 0; i < std::size(kDTypes); ++i) {
        if (kDTypes[i].second == s.dtype) out.emplace_back(kDTypes[i].first, s.shape);
      }
    }
    return out;
  }

  std::shared_ptr<const compiler::CompiledProgram> program_;
  std::vector<Spec> specs_in_;
  std::vector<Spec> specs_out_;
};

// The compilers of torch.compile(options={"cache_dir": ..., "num_devices":
// N}) (SPEC J5, A7): the compiler's disk cache and target (its worker count)
// are fixed at construction, so each distinct (directory, NPU count) gets a
// compiler of its own (its own in-memory LRU; other options from the
// environment). A program for N NPUs is split over N times the workers of
// one NPU (its chiplets, or RBLN_COMPILER_PARTITIONS). No cache_dir, or the
// one RBLN_COMPILER_CACHE_DIR names, with one NPU is the global compiler.
// Kept for the process: a compiler holds MLIR contexts and cached programs,
// which _graph_clear_caches() drops; the disk stays.
class CacheDirCompilers {
 public:
  static CacheDirCompilers& Get() {
    static auto* compilers = new CacheDirCompilers();
    return *compilers;
  }

  compiler::Compiler& For(const std::string& cache_dir, int num_npus)
      ABSL_LOCKS_EXCLUDED(mu_) {
    compiler::Compiler& global = compiler::Compiler::Global();
    const std::string dir = cache_dir.empty() ? global.options().cache_dir : cache_dir;
    if (dir == global.options().cache_dir && num_npus <= 1) return global;
    absl::MutexLock lock(&mu_);
    std::unique_ptr<compiler::Compiler>& c = by_target_[{dir, num_npus}];
    if (c == nullptr) {
      absl::StatusOr<compiler::CompilerOptions> options = compiler::CompilerOptions::FromEnv();
      if (!options.ok()) {
        by_target_.erase({dir, num_npus});
        throw std::runtime_error(absl::StrCat("rbln: compiler options for cache_dir ", dir,
                                              ": ", options.status().message()));
      }
      options->cache_dir = dir;
      options->partition.partitions *= std::max(1, num_npus);
      c = std::make_unique<compiler::Compiler>(*std::move(options));
    }
    return *c;
  }

  // Every compiler's in-memory programs; disk entries stay for later
  // processes.
  void ClearCaches() ABSL_LOCKS_EXCLUDED(mu_) {
    compiler::Compiler::Global().ClearCache();
    absl::MutexLock lock(&mu_);
    for (auto& [target, c] : by_target_) c->ClearCache();
  }

 private:
  absl::Mutex mu_;
  // By (cache directory, NPUs).
  absl::flat_hash_map<std::pair<std::string, int>, std::unique_ptr<compiler::Compiler>>
      by_target_ ABSL_GUARDED_BY(mu_);
};

std::shared_ptr<GraphProgram> CompileGraph(const std::string& name,
                                           const std::vector<ValueSpec>& inputs,
                                           const std::vector<NodeSpec>& nodes,
                                           const std::vector<std::string>& outputs,
                                           const std::string& cache_dir, int num_npus,
                                           const std::vector<UpdateSpec>& updates) {
  const compiler::ir::Graph graph = BuildGraph(name, inputs, nodes, outputs, updates);
  compiler::Compiler& graph_compiler = CacheDirCompilers::Get().For(cache_dir, num_npus);
  absl::StatusOr<std::shared_ptr<const compiler::CompiledProgram>> program;
  {
    py::gil_scoped_release no_gil;
    program = graph_compiler.Compile(graph);
  }
  if (!program.ok()) {
    Counters().compile_errors->Increment();
    const std::string message(program.status().message());
    // The frontend lists every op it cannot convert, as PyTorch does (SPEC J6).
    if (absl::IsUnimplemented(program.status())) {
      PyErr_SetString(PyExc_NotImplementedError, message.c_str());
      throw py::error_already_set();
    }
    throw std::runtime_error(absl::StrCat("rbln: compiling graph ", name, " failed: ", message));
  }
  Counters().compiles->Increment();
  return std::make_shared<GraphProgram>(*std::move(program));
}

}  // namespace

void RegisterGraphProgramBindings(py::module_& m) {
  py::class_<GraphProgram, std::shared_ptr<GraphProgram>>(m, "GraphProgram")
      .def(
          "run",
          [](const GraphProgram& p, const std::vector<at::Tensor>& inputs) {
            // As eager: an index a kernel found out of range is an
            // IndexError (SPEC P8); running out of device memory -- the
            // workspace, an input's upload, an output -- is
            // torch.OutOfMemoryError.
            return CallWithPythonErrors([&] { return p.Run(inputs); });
          },
          py::arg("inputs"))
      .def_property_readonly("name", &GraphProgram::Name)
      .def_property_readonly("compile_report", &GraphProgram::CompileReport)
      .def_property_readonly("ops", &GraphProgram::Ops)
      .def_property_readonly("text", &GraphProgram::Text)
      .def_property_readonly("num_workers", &GraphProgram::NumWorkers)
      .def_property_readonly("workspace_bytes", &GraphProgram::WorkspaceBytes)
      .def_property_readonly("fingerprint", &GraphProgram::Fingerprint)
      .def_property_readonly("input_specs", &GraphProgram::InputSpecs)
      .def_property_readonly("output_specs", &GraphProgram::OutputSpecs);
  // IR op names the compiler's frontend converts: the Dynamo backend makes
  // the others host ops when options={"host_ops": "unimplemented"} (SPEC J6).
  m.def("_graph_implemented_ops", [] { return compiler::Compiler::ImplementedOps(); });
  // Marks a storage (by base address) as a buffer of a cached program:
  // counted as reserved, not allocated/active, until unmarked or freed
  // (SPEC E2); applies to device memory it acquires later too.
  m.def("_graph_set_program_owned", [](uintptr_t base, bool owned) {
    const absl::Status status = RuntimeOrThrow().storage().SetProgramOwned(base, owned);
    if (!status.ok()) throw std::runtime_error(std::string(status.message()));
  });
  m.def("_graph_compile", &CompileGraph, py::arg("name"), py::arg("inputs"),
        py::arg("nodes"), py::arg("outputs"), py::arg("cache_dir") = std::string(),
        py::arg("num_npus") = 1, py::arg("updates") = std::vector<UpdateSpec>());
  // torch._dynamo.reset(): programs cached by the compilers in memory go too
  // (running programs keep theirs alive until they finish); on-disk caches
  // stay (SPEC J5).
  m.def("_graph_clear_caches", [] { CacheDirCompilers::Get().ClearCaches(); });
  // The compile_error fallback of a whole graph (SPEC I2, I6, J4): raises if
  // TORCH_RBLN_DISABLE_FALLBACK contains compile_error, else logs at INFO,
  // counts graph/cpu_fallback and fires explain()'s dispatch/cpu_fallback
  // ("graph NAME: compile_error", `bytes` read from the device for it); the
  // caller then runs the graph on the CPU.
  m.def(
      "_graph_compile_error",
      [](const std::string& graph_name, const std::string& detail, int64_t bytes) {
        try {
          OnFallback(FallbackCategory::kCompileError, graph_name, detail);
        } catch (const c10::Error& e) {
          throw std::runtime_error(e.what_without_backtrace());
        }
        Counters().cpu_fallback->Increment();
        FireGraphCpuFallback(graph_name, "compile_error", bytes);
      },
      py::arg("graph_name"), py::arg("detail"), py::arg("bytes") = 0);
  // A host op of a compiled graph runs on the CPU (SPEC J6): counts
  // graph/host_ops and fires dispatch/cpu_fallback ("OP: host_op").
  m.def(
      "_graph_host_op",
      [](const std::string& op, int64_t bytes) {
        Counters().host_ops->Increment();
        FireGraphCpuFallback(op, "host_op", bytes);
      },
      py::arg("op"), py::arg("bytes") = 0);
}

}  // namespace rbln::torch_backend
