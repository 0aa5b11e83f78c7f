// A JIT-compiled kernel: owns its mlir::ExecutionEngine and the looked-up
// entry point (looking the symbol up per call costs ~1.5 us; the cached
// pointer ~50 ns). Implements the runtime's Executable, so the runtime can
// run it on device buffers without knowing MLIR (SPEC P6, P7).
#ifndef RBLN_COMPILER_EXECUTION_COMPILED_PROGRAM_H_
#define RBLN_COMPILER_EXECUTION_COMPILED_PROGRAM_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "rbln/compiler/abi/partition_layout.h"
#include "rbln/compiler/compile_report.h"
#include "rbln/compiler/execution/kernel_errors.h"
#include "rbln/compiler/execution/sequence_layout.h"
#include "rbln/compiler/ir/graph.pb.h"
#include "rbln/compiler/ir/graph_segments.h"
#include "rbln/runtime/executable.h"

namespace llvm::orc {
class LLJIT;
}  // namespace llvm::orc

namespace mlir {
class ExecutionEngine;
class ModuleOp;
}  // namespace mlir

namespace rbln::compiler {

class CompiledProgram : public runtime::Executable {
 public:
  // Builds the engine from a module already lowered to the LLVM dialect.
  // With `object_path`, also writes the generated object code there (for
  // the disk cache). `phases`, if given, gets the LLVM phases' times.
  static absl::StatusOr<std::unique_ptr<CompiledProgram>> Create(
      mlir::ModuleOp llvm_module, const ir::Graph& graph,
      const std::string& object_path = "", CompilePhases* phases = nullptr);
  // Links object code written by Create() into a JIT of its own: no MLIR,
  // no codegen. `uses_blas`: the object calls a GEMM library, oneDNN's
  // rbln_gemm if `uses_onednn`, else cblas_sgemm; `layout`: how Create()
  // found the kernel partitioned.
  static absl::StatusOr<std::unique_ptr<CompiledProgram>> LoadObject(
      const std::string& object, const ir::Graph& graph, bool uses_blas,
      bool uses_onednn, PartitionLayout layout);
  // A program of `graph` that runs the programs of its segments in order
  // (`programs[s]` compiled from `segments[s].graph`), passing the values
  // between them in its workspace (see sequence_layout.h). To its callers
  // it is one program of `graph`: one run, checked against `graph`'s
  // arguments, its kernel errors naming `graph`'s nodes.
  static absl::StatusOr<std::unique_ptr<CompiledProgram>> Sequence(
      const ir::Graph& graph, absl::Span<const ir::Segment> segments,
      std::vector<std::shared_ptr<const CompiledProgram>> programs);
  ~CompiledProgram() override;

  int num_inputs() const override { return graph_.inputs_size(); }
  int num_outputs() const override { return graph_.outputs_size(); }
  std::string DebugName() const override { return graph_.name(); }
  // The graph's updated inputs (graph.proto's Update), written in place.
  bool WritesInput(int input) const override {
    return input >= 0 && input < static_cast<int>(written_inputs_.size()) &&
           written_inputs_[input];
  }

  // Checks every buffer against the specialization (dtype, shape,
  // contiguity), then calls the kernel once. Outputs are written in place.
  // A gather index out of range fails with OutOfRange naming the op, the
  // index and the valid range (the kernel checks indices as it reads them,
  // clamps them so it never reads out of bounds, and reports the first bad
  // one; see kernel_errors.h). An integer division by zero fails with
  // Unknown and the message ATen raises, "ZeroDivisionError" (outputs not
  // valid). A partitioned program runs its slices on the
  // chiplet workers (see chiplet_team.h) with a scratch arena of this call.
  absl::Status Execute(absl::Span<const runtime::BufferView> args) const override;
  // Execute() that reports, for a partitioned program, one compute slice
  // per chiplet worker and phase -- the stretches between the barriers its
  // workers pass between dependent ops (SPEC O2); an unpartitioned one
  // reports none.
  absl::Status ExecuteProfiled(absl::Span<const runtime::BufferView> args,
                               runtime::ComputeSliceSink* slices) const override;
  // The run with the workers placed by the runtime: each worker's workspace
  // segment (partition_layout().segment_bytes) in its chiplet's memory.
  // Execute() and ExecuteProfiled() allocate host segments themselves.
  absl::Status ExecutePlaced(absl::Span<const runtime::BufferView> args,
                             const runtime::ExecutionContext& context) const override;
  int num_workers() const override { return layout_.partitions; }
  std::vector<int64_t> WorkspaceBytes() const override {
    return layout_.segment_bytes;
  }

  const ir::Graph& graph() const { return graph_; }
  // The kernel calls a GEMM library (the BLAS rewrite applied): oneDNN
  // (uses_onednn) or OpenBLAS.
  bool uses_blas() const { return uses_blas_; }
  bool uses_onednn() const { return uses_onednn_; }
  // Workers that run each call (1: the calling thread alone), their
  // workspace segments and the access table of the internal buffers.
  const PartitionLayout& partition_layout() const { return layout_; }
  // Per worker, the time spent in its slice in the latest call (empty before
  // the first partitioned call), barrier waits included.
  std::vector<absl::Duration> LastSliceTimes() const
      ABSL_LOCKS_EXCLUDED(times_mu_);
  // Types of the kernel arguments: inputs, then outputs.
  const std::vector<ir::TensorType>& arg_types() const { return arg_types_; }

  // How this program was compiled (the compiler sets it before sharing the
  // program; a program loaded or compiled outside a Compiler has zeros).
  const CompileReport& compile_report() const { return report_; }
  void set_compile_report(const CompileReport& report) { report_ = report; }
  // The programs a sequence runs, in order (empty for a whole program).
  std::vector<std::shared_ptr<const CompiledProgram>> steps() const;

 private:
  // One program of a sequence, and the parent node of each of its nodes.
  struct Step {
    std::shared_ptr<const CompiledProgram> program;
    std::vector<int> nodes;
  };

  absl::Status KernelErrorStatus(const KernelError& e) const;

  CompiledProgram(std::unique_ptr<mlir::ExecutionEngine> engine,
                  std::unique_ptr<llvm::orc::LLJIT> jit, void (*entry)(void**),
                  ir::Graph graph, bool uses_blas, bool uses_onednn,
                  PartitionLayout layout);
  // Without a context: host memory for the workspace, workers unplaced.
  absl::Status RunOnHost(absl::Span<const runtime::BufferView> args,
                         runtime::ComputeSliceSink* slices) const;
  // Runs and turns a kernel error into this program's error status.
  absl::Status Run(absl::Span<const runtime::BufferView> args,
                   const runtime::ExecutionContext& context) const;
  // Runs; a kernel error goes to `error` (its site a node of graph_).
  absl::Status RunKernels(absl::Span<const runtime::BufferView> args,
                          const runtime::ExecutionContext& context,
                          std::optional<KernelError>* error) const;
  absl::Status CheckArguments(absl::Span<const runtime::BufferView> args,
                              const runtime::ExecutionContext& context) const;
  absl::Status RunSequence(absl::Span<const runtime::BufferView> args,
                           const runtime::ExecutionContext& context,
                           std::optional<KernelError>* error) const;
  void ExecutePartitioned(const std::vector<void*>& packed,
                          const runtime::ExecutionContext& context,
                          std::optional<KernelError>* error) const;

  // One of the two owns the code: the engine after codegen, the JIT after
  // loading an object.
  std::unique_ptr<mlir::ExecutionEngine> engine_;
  std::unique_ptr<llvm::orc::LLJIT> jit_;
  bool uses_blas_;
  bool uses_onednn_;
  PartitionLayout layout_;
  void (*entry_)(void**);
  ir::Graph graph_;
  std::vector<ir::TensorType> arg_types_;
  std::vector<bool> written_inputs_;  // by input index
  CompileReport report_;
  // A sequence's programs and buffers (empty for a whole program).
  std::vector<Step> steps_;
  SequenceLayout sequence_;
  mutable absl::Mutex times_mu_;
  mutable std::vector<absl::Duration> last_slice_times_
      ABSL_GUARDED_BY(times_mu_);
};

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_EXECUTION_COMPILED_PROGRAM_H_
