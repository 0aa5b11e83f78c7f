#include "rbln/compiler/execution/compiled_program.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "llvm/ExecutionEngine/Orc/Core.h"
#include "llvm/ExecutionEngine/Orc/ExecutionUtils.h"
#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/ExecutionEngine/Orc/Mangling.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Target/TargetMachine.h"
#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "mlir/IR/BuiltinOps.h"
#include "rbln/compiler/abi/kernel_abi.h"
#include "rbln/compiler/execution/aliased_inputs.h"
#include "rbln/compiler/execution/chiplet_team.h"
#include "rbln/compiler/execution/kernel_errors.h"
#include "rbln/compiler/execution/kernel_optimizer.h"
#include "rbln/compiler/ir/graph_util.h"
#include "rbln/compiler/kernels/blas_loader.h"
#include "rbln/compiler/kernels/input_content.h"
#include "rbln/compiler/kernels/memref_copy.h"
#include "rbln/compiler/kernels/mxfp4_grouped_gemm.h"
#include "rbln/compiler/kernels/onednn_conv.h"
#include "rbln/compiler/kernels/grouped_gemm.h"
#include "rbln/compiler/kernels/masked_attention.h"
#include "rbln/compiler/kernels/paged_attention.h"
#include "rbln/compiler/kernels/onednn_gemm.h"
#include "rbln/compiler/kernels/special_math.h"
#include "rbln/compiler/pipelines/mlir_compat.h"
#include "rbln/compiler/pipelines/mlir_setup.h"
#include "rbln/compiler/transforms/passes.h"
#include "rbln/core/status_macros.h"

namespace rbln::compiler {
namespace {

std::vector<ir::TensorType> ArgTypes(const ir::Graph& graph) {
  absl::flat_hash_map<std::string, ir::TensorType> defined;
  std::vector<ir::TensorType> types;
  for (const ir::Value& v : graph.inputs()) {
    defined[v.name()] = v.type();
    types.push_back(v.type());
  }
  for (const ir::Node& node : graph.nodes()) {
    for (const ir::Value& v : node.outputs()) defined[v.name()] = v.type();
  }
  for (const std::string& out : graph.outputs()) types.push_back(defined.at(out));
  return types;
}

// The host's TargetMachine (CPU name and features, e.g. AVX2 and F16C). The
// optimizer needs it for its cost model: without one the loop vectorizer sees
// no vector registers, and half-precision kernels convert element by element.
absl::StatusOr<std::unique_ptr<llvm::TargetMachine>> HostTargetMachine();

std::string LlvmErrorToString(llvm::Error error) {
  std::string text;
  llvm::handleAllErrors(std::move(error), [&](const llvm::ErrorInfoBase& e) {
    text += e.message();
  });
  return text;
}

absl::StatusOr<std::unique_ptr<llvm::TargetMachine>> HostTargetMachine() {
  llvm::Expected<llvm::orc::JITTargetMachineBuilder> builder =
      llvm::orc::JITTargetMachineBuilder::detectHost();
  if (!builder) {
    return absl::InternalError(absl::StrFormat(
        "cannot detect the host target: %s", LlvmErrorToString(builder.takeError())));
  }
  llvm::Expected<std::unique_ptr<llvm::TargetMachine>> machine =
      builder->createTargetMachine();
  if (!machine) {
    return absl::InternalError(absl::StrFormat(
        "cannot create the host target machine: %s",
        LlvmErrorToString(machine.takeError())));
  }
  return std::move(*machine);
}

// A chiplet worker's place in a profiled partitioned run (SPEC O2): the
// phase it is in -- barriers passed so far -- and when it entered it.
struct WorkerPhaseClock {
  runtime::ComputeSliceSink* sink = nullptr;
  int worker = 0;
  int phase = 0;
  int64_t start_ns = 0;
};
// Set on each worker's thread for the duration of a profiled run only;
// each worker's own when workers share a thread.
thread_local WorkerPhaseClock* t_phase_clock = nullptr;
const bool phase_clock_is_worker_local = RegisterWorkerLocal(
    +[]() -> void* { return &t_phase_clock; }, sizeof(t_phase_clock));

// The barrier kernels call between dependent ops (kChipletBarrierSymbol):
// the team's barrier, timestamped in a profiled run -- the worker's phase
// ends when it arrives, the next one starts when it leaves. Otherwise it
// costs one thread-local load.
void TimedChipletBarrier() {
  WorkerPhaseClock* clock = t_phase_clock;
  if (clock == nullptr) {
    rbln_chiplet_barrier();
    return;
  }
  clock->sink->Report(clock->worker, clock->phase, clock->start_ns,
                      runtime::MonotonicNowNs());
  rbln_chiplet_barrier();
  ++clock->phase;
  clock->start_ns = runtime::MonotonicNowNs();
}

// Functions of this library that kernels call, by name (SPEC P8, A2), and
// the special functions of element-wise ops (special_math.h).
llvm::orc::SymbolMap RuntimeSymbols(llvm::orc::MangleAndInterner interner) {
  llvm::orc::SymbolMap symbols;
  symbols[interner(kReportIndexErrorSymbol)] =
      compat::ExportedSymbol(&rbln_report_index_error);
  symbols[interner(kReportZeroDivisionSymbol)] =
      compat::ExportedSymbol(&rbln_report_zero_division);
  symbols[interner(kChipletBarrierSymbol)] =
      compat::ExportedSymbol(&TimedChipletBarrier);
  symbols[interner(kOnednnGemmSymbol)] = compat::ExportedSymbol(&rbln_gemm);
  symbols[interner(kOnednnGemmProblemSymbol)] =
      compat::ExportedSymbol(&rbln_gemm_problem);
  for (const auto& [name, address] : SpecialMathSymbols()) {
    symbols[interner(name)] = compat::ExportedSymbol(address);
  }
  symbols[interner(kOnednnConvSymbol)] = compat::ExportedSymbol(&rbln_conv);
  symbols[interner(kGroupedGemmSymbol)] =
      compat::ExportedSymbol(&rbln_grouped_gemm);
  symbols[interner(kGroupedGemmMxfp4Symbol)] =
      compat::ExportedSymbol(&rbln_grouped_gemm_mxfp4);
  symbols[interner(kPagedAttentionSymbol)] =
      compat::ExportedSymbol(&rbln_paged_attention);
  symbols[interner(kMaskedAttentionSymbol)] =
      compat::ExportedSymbol(&rbln_masked_attention);
  symbols[interner(kMemrefCopySymbol)] =
      compat::ExportedSymbol(&rbln_memref_copy);
  return symbols;
}

// Loads the GEMM library a kernel calls, or says which one is missing.
absl::Status LoadGemmLibraryOf(const ir::Graph& graph, bool uses_blas,
                               bool uses_onednn) {
  if (uses_onednn && !LoadOnednn()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "program %s calls oneDNN (%s or %s), but %s", graph.name(),
        kOnednnGemmSymbol, kOnednnConvSymbol, OnednnDescription()));
  }
  if (uses_blas && !uses_onednn && !LoadOpenBlas()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "program %s calls %s, but libopenblas.so.0 could not be loaded",
        graph.name(), kSgemmName));
  }
  return absl::OkStatus();
}

absl::Status LlvmError(const std::string& what, llvm::Error error) {
  return absl::InternalError(absl::StrFormat(
      "loading cached object code: %s failed: %s", what,
      LlvmErrorToString(std::move(error))));
}

}  // namespace

absl::StatusOr<std::unique_ptr<CompiledProgram>> CompiledProgram::Create(
    mlir::ModuleOp llvm_module, const ir::Graph& graph,
    const std::string& object_path, CompilePhases* phases) {
  // The JIT resolves cblas_sgemm (from the BLAS rewrite) among the process's
  // symbols, where LoadOpenBlas() puts it; rbln_gemm is ours (RuntimeSymbols)
  // and needs oneDNN loaded. A program that calls oneDNN also registers its
  // inputs for the weight packing (Execute): a grouped GEMM alone (an MoE
  // layer whose router is no library call) counts too, else its experts'
  // weights would be re-read unpacked by every call.
  const bool uses_onednn =
      llvm_module.lookupSymbol(kOnednnGemmSymbol) != nullptr ||
      llvm_module.lookupSymbol(kOnednnGemmProblemSymbol) != nullptr ||
      llvm_module.lookupSymbol(kOnednnConvSymbol) != nullptr ||
      llvm_module.lookupSymbol(kGroupedGemmSymbol) != nullptr;
  const bool uses_blas =
      uses_onednn || llvm_module.lookupSymbol(kSgemmName) != nullptr;
  RBLN_RETURN_IF_ERROR(LoadGemmLibraryOf(graph, uses_blas, uses_onednn));
  absl::StatusOr<std::unique_ptr<llvm::TargetMachine>> host = HostTargetMachine();
  if (!host.ok()) return host.status();
  llvm::TargetMachine* machine = host->get();
  mlir::ExecutionEngineOptions options;
  absl::Duration optimize_time;
  // A named callable: options.transformer is a function_ref, which must not
  // outlive what it refers to (ExecutionEngine::create calls it).
  auto transform = [machine, &optimize_time](llvm::Module* module) -> llvm::Error {
    const absl::Time start = absl::Now();
    // Per-function target attributes select the subtarget the vectorizer's
    // cost model and the code generator use.
    const std::string cpu = machine->getTargetCPU().str();
    const std::string features = machine->getTargetFeatureString().str();
    for (llvm::Function& fn : *module) {
      if (fn.isDeclaration()) continue;
      fn.addFnAttr("target-cpu", cpu);
      fn.addFnAttr("target-features", features);
    }
    llvm::Error result = OptimizeKernelModule(*module, machine);
    optimize_time += absl::Now() - start;
    return result;
  };
  options.transformer = transform;
  options.jitCodeGenOptLevel = compat::kCodeGenOptDefault;
  // The JIT'd code is not debugged or profiled through gdb/perf listeners.
  options.enableGDBNotificationListener = false;
  options.enablePerfNotificationListener = false;
  options.enableObjectDump = !object_path.empty();
  // create() translates to LLVM IR and optimizes; the first lookup
  // generates machine code.
  const absl::Time create_start = absl::Now();
  llvm::Expected<std::unique_ptr<mlir::ExecutionEngine>> engine =
      mlir::ExecutionEngine::create(llvm_module, options);
  const absl::Time codegen_start = absl::Now();
  if (!engine) {
    return absl::InternalError(absl::StrFormat(
        "JIT compilation of %s failed: %s", graph.name(),
        LlvmErrorToString(engine.takeError())));
  }
  // Kernels report bad gather indices through this function (SPEC P8).
  (*engine)->registerSymbols(&RuntimeSymbols);
  // With llvm.emit_c_interface the kernel has a `_mlir_ciface_kernel` that
  // takes one pointer to a memref descriptor per argument; lookupPacked
  // returns its packed wrapper.
  llvm::Expected<void (*)(void**)> entry = (*engine)->lookupPacked(
      std::string("_mlir_ciface_") + kKernelName);
  if (!entry) {
    return absl::InternalError(absl::StrFormat(
        "JIT compilation of %s: no entry point: %s", graph.name(),
        LlvmErrorToString(entry.takeError())));
  }
  if (!object_path.empty()) (*engine)->dumpToObjectFile(object_path);
  if (phases != nullptr) {
    phases->llvm_translate += codegen_start - create_start - optimize_time;
    phases->llvm_optimize += optimize_time;
    phases->llvm_codegen += absl::Now() - codegen_start;
  }
  return std::unique_ptr<CompiledProgram>(
      new CompiledProgram(std::move(*engine), nullptr, *entry, graph, uses_blas,
                          uses_onednn,
                          ReadPartitionLayout(llvm_module)));
}

absl::StatusOr<std::unique_ptr<CompiledProgram>> CompiledProgram::Sequence(
    const ir::Graph& graph, absl::Span<const ir::Segment> segments,
    std::vector<std::shared_ptr<const CompiledProgram>> programs) {
  if (programs.size() != segments.size() || programs.empty()) {
    return absl::InternalError(absl::StrFormat(
        "program %s: %d segment programs for %d segments", graph.name(),
        programs.size(), segments.size()));
  }
  int workers = 1;
  bool uses_blas = false;
  bool uses_onednn = false;
  std::vector<std::vector<int64_t>> workspace;
  for (const auto& program : programs) {
    workers = std::max(workers, program->num_workers());
    uses_blas |= program->uses_blas();
    uses_onednn |= program->uses_onednn();
    workspace.push_back(program->WorkspaceBytes());
  }
  absl::StatusOr<SequenceLayout> sequence =
      PlanSequenceLayout(graph, segments, workspace, workers);
  if (!sequence.ok()) return sequence.status();
  PartitionLayout layout;
  layout.partitions = workers;
  layout.segment_bytes = sequence->segment_bytes;
  for (int64_t bytes : layout.segment_bytes) layout.scratch_bytes += bytes;
  std::unique_ptr<CompiledProgram> program(new CompiledProgram(
      nullptr, nullptr, nullptr, graph, uses_blas, uses_onednn, std::move(layout)));
  for (size_t s = 0; s < segments.size(); ++s) {
    program->steps_.push_back(Step{std::move(programs[s]), segments[s].nodes});
  }
  program->sequence_ = *std::move(sequence);
  return program;
}

std::vector<std::shared_ptr<const CompiledProgram>> CompiledProgram::steps() const {
  std::vector<std::shared_ptr<const CompiledProgram>> out;
  for (const Step& step : steps_) out.push_back(step.program);
  return out;
}

absl::StatusOr<std::unique_ptr<CompiledProgram>> CompiledProgram::LoadObject(
    const std::string& object, const ir::Graph& graph, bool uses_blas,
    bool uses_onednn, PartitionLayout layout) {
  InitializeMlirOnce();  // The native target.
  RBLN_RETURN_IF_ERROR(LoadGemmLibraryOf(graph, uses_blas, uses_onednn));
  llvm::Expected<llvm::orc::JITTargetMachineBuilder> machine =
      llvm::orc::JITTargetMachineBuilder::detectHost();
  if (!machine) return LlvmError("detecting the host", machine.takeError());
  llvm::Expected<std::unique_ptr<llvm::orc::LLJIT>> jit =
      llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(*machine).create();
  if (!jit) return LlvmError("creating a JIT", jit.takeError());
  llvm::orc::JITDylib& main = (*jit)->getMainJITDylib();
  // libm and OpenBLAS from the process, as the ExecutionEngine resolves them.
  llvm::Expected<std::unique_ptr<llvm::orc::DynamicLibrarySearchGenerator>>
      process = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
          (*jit)->getDataLayout().getGlobalPrefix());
  if (!process) return LlvmError("searching the process", process.takeError());
  main.addGenerator(std::move(*process));
  llvm::orc::MangleAndInterner interner((*jit)->getExecutionSession(),
                                        (*jit)->getDataLayout());
  if (llvm::Error e =
          main.define(llvm::orc::absoluteSymbols(RuntimeSymbols(interner)))) {
    return LlvmError("defining runtime symbols", std::move(e));
  }
  if (llvm::Error e = (*jit)->addObjectFile(
          llvm::MemoryBuffer::getMemBufferCopy(object, graph.name()))) {
    return LlvmError("adding the object", std::move(e));
  }
  // ExecutionEngine::lookupPacked(name) looks up "_mlir_" + name.
  auto entry = (*jit)->lookup(std::string("_mlir__mlir_ciface_") + kKernelName);
  if (!entry) return LlvmError("looking up the entry point", entry.takeError());
  auto* fn = reinterpret_cast<void (*)(void**)>(entry->getValue());
  return std::unique_ptr<CompiledProgram>(new CompiledProgram(
      nullptr, std::move(*jit), fn, graph, uses_blas, uses_onednn, layout));
}

CompiledProgram::CompiledProgram(std::unique_ptr<mlir::ExecutionEngine> engine,
                                 std::unique_ptr<llvm::orc::LLJIT> jit,
                                 void (*entry)(void**), ir::Graph graph,
                                 bool uses_blas, bool uses_onednn,
                                 PartitionLayout layout)
    : engine_(std::move(engine)),
      jit_(std::move(jit)),
      uses_blas_(uses_blas),
      uses_onednn_(uses_onednn),
      layout_(layout),
      entry_(entry),
      graph_(std::move(graph)),
      arg_types_(ArgTypes(graph_)),
      written_inputs_(graph_.inputs_size(), false) {
  for (const ir::Update& u : graph_.updates()) {
    for (int i = 0; i < graph_.inputs_size(); ++i) {
      if (graph_.inputs(i).name() == u.input()) written_inputs_[i] = true;
    }
  }
}

CompiledProgram::~CompiledProgram() = default;

namespace {

// Which dimension a node's checked indices address, for messages.
std::string IndexedDimText(const ir::Node& node) {
  const std::string& op = node.op();
  if (op == "embedding" || op == "_embedding_bag" ||
      op == "_embedding_bag_forward_only") {
    return "0 (rows of the weight)";
  }
  if (op == "index" || op == "index_put") return "? (one of the indexed dims)";
  if (op == "put" || op == "take") return "0 of the flattened input";
  if (op == "masked_scatter") {
    return "0 of the flattened source (the mask has more true elements than "
           "the source has elements)";
  }
  auto it = node.attrs().find("dim");
  if (it != node.attrs().end() && it->second.value_case() == ir::Attribute::kI) {
    return absl::StrCat(it->second.i());
  }
  return "0";
}

}  // namespace

absl::Status CompiledProgram::KernelErrorStatus(const KernelError& e) const {
  std::string where = "an unknown op";
  std::string dim = "?";
  if (e.site >= 0 && e.site < graph_.nodes_size()) {
    const ir::Node& node = graph_.nodes(e.site);
    where = absl::StrFormat("%s (node %d, output %%%s)", node.op(), e.site,
                            node.outputs_size() > 0 ? node.outputs(0).name() : "");
    dim = IndexedDimText(node);
  }
  if (e.kind == KernelError::Kind::kZeroDivision) {
    // ATen's integer division kernels raise RuntimeError("ZeroDivisionError")
    // (a c10::Error, which ThrowStatus's default case raises too).
    return absl::UnknownError(absl::StrFormat(
        "ZeroDivisionError: integer division by zero in %s of program %s; "
        "check the divisor for zeros (the outputs of this call are not valid)",
        where, graph_.name()));
  }
  const std::string range = e.bound < 0
                                ? absl::StrFormat("[%d, %d)", e.bound, -e.bound)
                                : absl::StrFormat("[0, %d)", e.bound);
  return absl::OutOfRangeError(absl::StrFormat(
      "index out of range in %s of program %s: index %d is not in the valid "
      "range %s of dimension %s; check the index values (the outputs of "
      "this call are not valid)",
      where, graph_.name(), e.index, range, dim));
}

absl::Status CompiledProgram::Execute(
    absl::Span<const runtime::BufferView> args) const {
  return RunOnHost(args, nullptr);
}

absl::Status CompiledProgram::ExecuteProfiled(absl::Span<const runtime::BufferView> args,
                                              runtime::ComputeSliceSink* slices) const {
  return RunOnHost(args, slices);
}

absl::Status CompiledProgram::ExecutePlaced(
    absl::Span<const runtime::BufferView> args,
    const runtime::ExecutionContext& context) const {
  return Run(args, context);
}

absl::Status CompiledProgram::RunOnHost(absl::Span<const runtime::BufferView> args,
                                        runtime::ComputeSliceSink* slices) const {
  struct FreeDeleter {
    void operator()(void* p) const { std::free(p); }
  };
  runtime::ExecutionContext context;
  context.slices = slices;
  context.workers.resize(layout_.partitions);
  std::vector<std::unique_ptr<void, FreeDeleter>> segments;
  const size_t workers = std::min(layout_.segment_bytes.size(), context.workers.size());
  for (size_t w = 0; w < workers; ++w) {
    const int64_t bytes = layout_.segment_bytes[w];
    if (bytes == 0) continue;
    segments.emplace_back(std::aligned_alloc(64, (bytes + 63) / 64 * 64));
    if (segments.back() == nullptr) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "program %s: cannot allocate %d bytes of workspace for worker %d",
          graph_.name(), bytes, w));
    }
    context.workers[w].workspace = segments.back().get();
    context.workers[w].workspace_bytes = bytes;
  }
  return Run(args, context);
}

absl::Status CompiledProgram::Run(absl::Span<const runtime::BufferView> args,
                                  const runtime::ExecutionContext& context) const {
  std::optional<KernelError> error;
  if (absl::Status s = RunKernels(args, context, &error); !s.ok()) return s;
  if (error.has_value()) return KernelErrorStatus(*error);
  return absl::OkStatus();
}

absl::Status CompiledProgram::CheckArguments(
    absl::Span<const runtime::BufferView> args,
    const runtime::ExecutionContext& context) const {
  if (static_cast<int>(context.workers.size()) != layout_.partitions) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "program %s runs on %d workers, but the run placed %d", graph_.name(),
        layout_.partitions, context.workers.size()));
  }
  for (size_t w = 0; w < layout_.segment_bytes.size(); ++w) {
    const runtime::WorkerContext& worker = context.workers[w];
    if (worker.workspace_bytes < layout_.segment_bytes[w] ||
        (layout_.segment_bytes[w] > 0 && worker.workspace == nullptr)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "program %s: worker %d needs %d bytes of workspace, got %d",
          graph_.name(), w, layout_.segment_bytes[w], worker.workspace_bytes));
    }
  }
  if (args.size() != arg_types_.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "program %s takes %d buffers, got %d", graph_.name(), arg_types_.size(),
        args.size()));
  }
  for (size_t i = 0; i < args.size(); ++i) {
    const runtime::BufferView& arg = args[i];
    const ir::TensorType& type = arg_types_[i];
    const int rank = type.shape_size();
    bool shape_ok = arg.dtype == ir::ToRuntimeDType(type.dtype()) &&
                    static_cast<int>(arg.sizes.size()) == rank &&
                    arg.strides.size() == arg.sizes.size();
    for (int d = 0; shape_ok && d < rank; ++d) {
      shape_ok = arg.sizes[d] == type.shape(d);
    }
    if (!shape_ok) {
      std::string got = absl::StrFormat("%s[%s]", DTypeName(arg.dtype),
                                        absl::StrJoin(arg.sizes, ","));
      return absl::InvalidArgumentError(absl::StrFormat(
          "program %s: buffer %d is %s, but the program was compiled for %s",
          graph_.name(), i, got, ir::TypeToText(type)));
    }
    // An empty buffer is never read or written: its strides are free too.
    const bool empty = std::find(arg.sizes.begin(), arg.sizes.end(), 0) != arg.sizes.end();
    int64_t expected_stride = 1;
    for (int d = rank - 1; d >= 0; --d) {
      // Size-1 dimensions are never stepped over, so their stride is free.
      if (!empty && arg.sizes[d] != 1 && arg.strides[d] != expected_stride) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "program %s: buffer %d is not contiguous (strides [%s]); the "
            "caller must make it contiguous",
            graph_.name(), i, absl::StrJoin(arg.strides, ",")));
      }
      expected_stride *= arg.sizes[d];
    }
  }
  return absl::OkStatus();
}

absl::Status CompiledProgram::RunKernels(absl::Span<const runtime::BufferView> args,
                                         const runtime::ExecutionContext& context,
                                         std::optional<KernelError>* error) const {
  if (absl::Status s = CheckArguments(args, context); !s.ok()) return s;
  if (!steps_.empty()) return RunSequence(args, context, error);
  // Ranked memref descriptors {allocated, aligned, offset, sizes[], strides[]},
  // all 8-byte fields, so a vector<int64_t> per argument lays them out.
  std::vector<std::vector<int64_t>> descriptors(args.size());
  std::vector<void*> descriptor_ptrs(args.size());
  std::vector<void*> packed(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    const runtime::BufferView& arg = args[i];
    const int rank = arg_types_[i].shape_size();
    std::vector<int64_t>& desc = descriptors[i];
    desc.resize(3 + 2 * rank);
    desc[0] = reinterpret_cast<int64_t>(arg.data);
    desc[1] = reinterpret_cast<int64_t>(arg.data);
    desc[2] = 0;
    int64_t stride = 1;
    for (int d = rank - 1; d >= 0; --d) {
      desc[3 + d] = arg.sizes[d];
      desc[3 + rank + d] = stride;
      stride *= arg.sizes[d];
    }
    descriptor_ptrs[i] = desc.data();
    packed[i] = &descriptor_ptrs[i];
  }
  // Inputs that share bytes with an output are read from copies (SPEC P4);
  // the copies live until the kernel returns.
  absl::StatusOr<AliasedInputCopies> aliased =
      AliasedInputCopies::Make(args, num_inputs(), graph_.name());
  if (!aliased.ok()) return aliased.status();
  for (int i = 0; aliased->num_copies() > 0 && i < num_inputs(); ++i) {
    const int64_t data = reinterpret_cast<int64_t>(aliased->Data(args, i));
    descriptors[i][0] = data;
    descriptors[i][1] = data;
  }
  // GEMMs find their weights' content versions (packed_weights.h).
  std::optional<InputContentScope> content;
  if (uses_onednn_) {
    std::vector<void*> data(num_inputs());
    for (int i = 0; i < num_inputs(); ++i) data[i] = aliased->Data(args, i);
    content.emplace(args, data, num_inputs());
  }
  if (layout_.partitions > 1) {
    ExecutePartitioned(packed, context, error);
    return absl::OkStatus();
  }
  ClearKernelError();
  entry_(packed.data());
  *error = TakeKernelError();
  return absl::OkStatus();
}

absl::Status CompiledProgram::RunSequence(absl::Span<const runtime::BufferView> args,
                                          const runtime::ExecutionContext& context,
                                          std::optional<KernelError>* error) const {
  // Inputs that share bytes with an output are read from copies taken now:
  // a later step may write that output before an earlier-read input is
  // read again (SPEC P4).
  absl::StatusOr<AliasedInputCopies> aliased =
      AliasedInputCopies::Make(args, num_inputs(), graph_.name());
  if (!aliased.ok()) return aliased.status();
  auto view_of = [&](const SequenceBufferRef& ref) {
    if (ref.kind == SequenceBufferRef::Kind::kArgument) {
      runtime::BufferView view = args[ref.index];
      if (ref.index < num_inputs()) view.data = aliased->Data(args, ref.index);
      return view;
    }
    const SequenceIntermediate& buffer = sequence_.intermediates[ref.index];
    runtime::BufferView view;
    view.data = static_cast<char*>(context.workers[buffer.home].workspace) + buffer.offset;
    view.dtype = ir::ToRuntimeDType(buffer.type.dtype());
    view.sizes.assign(buffer.type.shape().begin(), buffer.type.shape().end());
    view.strides.resize(view.sizes.size());
    int64_t stride = 1;
    for (int d = static_cast<int>(view.sizes.size()) - 1; d >= 0; --d) {
      view.strides[d] = stride;
      stride *= view.sizes[d];
    }
    return view;
  };
  // Each step's workers use the part of their segment after the
  // intermediates.
  auto step_context = [&](int workers) {
    runtime::ExecutionContext step;
    for (int w = 0; w < workers; ++w) {
      runtime::WorkerContext worker = context.workers[w];
      const int64_t offset = sequence_.step_workspace_offset[w];
      worker.workspace = worker.workspace == nullptr
                             ? nullptr
                             : static_cast<char*>(worker.workspace) + offset;
      worker.workspace_bytes = std::max<int64_t>(0, worker.workspace_bytes - offset);
      step.workers.push_back(worker);
    }
    return step;
  };
  // Profiled: each step's phases follow the previous step's; a step that
  // reports none (one worker) is one phase of worker 0.
  int phase_offset = 0;
  for (size_t s = 0; s < steps_.size(); ++s) {
    const Step& step = steps_[s];
    std::vector<runtime::BufferView> step_args;
    for (const SequenceBufferRef& ref : sequence_.step_args[s]) step_args.push_back(view_of(ref));
    runtime::ExecutionContext sub = step_context(step.program->num_workers());
    runtime::ComputeSliceSink step_slices;
    if (context.slices != nullptr) sub.slices = &step_slices;
    const int64_t start_ns = runtime::MonotonicNowNs();
    std::optional<KernelError> step_error;
    if (absl::Status status = step.program->RunKernels(step_args, sub, &step_error);
        !status.ok()) {
      return status;
    }
    if (context.slices != nullptr) {
      std::vector<runtime::ComputeSlice> slices = step_slices.Take();
      if (slices.empty()) {
        slices.push_back(runtime::ComputeSlice{0, 0, start_ns, runtime::MonotonicNowNs()});
      }
      int phases = 0;
      for (const runtime::ComputeSlice& slice : slices) {
        context.slices->Report(slice.worker, phase_offset + slice.phase, slice.start_ns,
                               slice.end_ns);
        phases = std::max(phases, slice.phase + 1);
      }
      phase_offset += phases;
    }
    if (step_error.has_value()) {
      KernelError e = *step_error;
      e.site = e.site >= 0 && e.site < static_cast<int64_t>(step.nodes.size())
                   ? step.nodes[e.site]
                   : -1;
      *error = e;
      return absl::OkStatus();  // Later steps would read invalid values.
    }
  }
  for (const auto& [output, source] : sequence_.copies) {
    const runtime::BufferView from = view_of(source);
    const int64_t bytes = DenseBytes(arg_types_[output]);
    if (bytes > 0) std::memmove(args[output].data, from.data, bytes);
  }
  return absl::OkStatus();
}

void CompiledProgram::ExecutePartitioned(const std::vector<void*>& packed,
                                         const runtime::ExecutionContext& context,
                                         std::optional<KernelError>* error) const {
  runtime::ComputeSliceSink* const slices = context.slices;
  // Each internal buffer is a contiguous memref argument {allocated, aligned,
  // offset, sizes, strides} in its home worker's workspace segment.
  const size_t num_scratch = layout_.scratch.size();
  std::vector<std::vector<int64_t>> scratch_desc(num_scratch);
  std::vector<void*> scratch_desc_ptr(num_scratch);
  for (size_t i = 0; i < num_scratch; ++i) {
    const ScratchBuffer& buffer = layout_.scratch[i];
    const int rank = static_cast<int>(buffer.shape.size());
    std::vector<int64_t>& desc = scratch_desc[i];
    desc.resize(3 + 2 * rank);
    const int64_t address = reinterpret_cast<int64_t>(
        static_cast<char*>(context.workers[buffer.home].workspace) + buffer.offset);
    desc[0] = desc[1] = address;
    desc[2] = 0;
    int64_t stride = 1;
    for (int d = rank - 1; d >= 0; --d) {
      desc[3 + d] = buffer.shape[d];
      desc[3 + rank + d] = stride;
      stride *= buffer.shape[d];
    }
    scratch_desc_ptr[i] = desc.data();
  }
  // Per worker: the shared descriptors, then its slice index.
  const int workers = layout_.partitions;
  std::vector<int64_t> slice(workers);
  std::vector<std::vector<void*>> worker_packed(workers, packed);
  std::vector<std::optional<KernelError>> errors(workers);
  for (int w = 0; w < workers; ++w) {
    slice[w] = w;
    for (size_t i = 0; i < num_scratch; ++i) {
      worker_packed[w].push_back(&scratch_desc_ptr[i]);
    }
    worker_packed[w].push_back(&slice[w]);
  }
  std::vector<absl::Duration> busy;
  ChipletTeam::Shared(workers).Run(
      [&](int w) {
        // Profiled: one slice per phase, reported at each barrier and here.
        WorkerPhaseClock clock{slices, w, 0, 0};
        if (slices != nullptr) {
          clock.start_ns = runtime::MonotonicNowNs();
          t_phase_clock = &clock;
        }
        ClearKernelError();
        entry_(worker_packed[w].data());
        errors[w] = TakeKernelError();
        if (slices != nullptr) {
          t_phase_clock = nullptr;
          slices->Report(w, clock.phase, clock.start_ns, runtime::MonotonicNowNs());
        }
      },
      &busy);
  {
    absl::MutexLock lock(&times_mu_);
    last_slice_times_ = std::move(busy);
  }
  for (const std::optional<KernelError>& e : errors) {
    if (e.has_value()) {
      *error = e;
      return;
    }
  }
}

std::vector<absl::Duration> CompiledProgram::LastSliceTimes() const {
  absl::MutexLock lock(&times_mu_);
  return last_slice_times_;
}

}  // namespace rbln::compiler
