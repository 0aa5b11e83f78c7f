#include "rbln/compiler/compiler.h"

#include "absl/strings/str_format.h"
#include "google/protobuf/util/message_differencer.h"
#include "mlir/IR/MLIRContext.h"
#include "rbln/compiler/frontend.h"
#include "rbln/compiler/ir/graph_util.h"
#include "rbln/compiler/mlir_setup.h"
#include "rbln/compiler/pipelines.h"
#include "rbln/core/status_macros.h"

namespace rbln::compiler {

Compiler::Compiler()
    : compiles_(CounterRegistry::Global().Get("compiler/compiles")),
      cache_hits_(CounterRegistry::Global().Get("compiler/cache_hits")) {}

Compiler::~Compiler() = default;

Compiler& Compiler::Global() {
  static auto* compiler = new Compiler();
  return *compiler;
}

absl::StatusOr<std::shared_ptr<const CompiledProgram>> Compiler::Compile(
    const ir::Graph& graph) {
  const uint64_t key = ir::Fingerprint(graph);
  absl::MutexLock lock(&mu_);
  auto it = cache_.find(key);
  if (it != cache_.end() &&
      google::protobuf::util::MessageDifferencer::Equals(it->second->graph(),
                                                         graph)) {
    cache_hits_->Increment();
    return it->second;
  }
  RBLN_ASSIGN_OR_RETURN(std::shared_ptr<const CompiledProgram> program,
                        CompileUncached(graph));
  cache_[key] = program;
  return program;
}

absl::StatusOr<std::shared_ptr<const CompiledProgram>>
Compiler::CompileUncached(const ir::Graph& graph) {
  if (context_ == nullptr) context_ = CreateCompilerContext();
  RBLN_ASSIGN_OR_RETURN(mlir::OwningOpRef<mlir::ModuleOp> module,
                        ImportGraph(graph, context_.get()));
  const std::string dump_name =
      absl::StrFormat("%s_%016x", graph.name(), ir::Fingerprint(graph));
  RBLN_RETURN_IF_ERROR(RunStages(*module, FullPipeline(), dump_name));
  RBLN_ASSIGN_OR_RETURN(std::unique_ptr<CompiledProgram> program,
                        CompiledProgram::Create(*module, graph));
  compiles_->Increment();
  return std::shared_ptr<const CompiledProgram>(std::move(program));
}

void Compiler::ClearCache() {
  absl::MutexLock lock(&mu_);
  cache_.clear();
}

int64_t Compiler::cache_size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(cache_.size());
}

}  // namespace rbln::compiler
