#include "rbln/compiler/pipelines.h"

#include <fstream>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "llvm/Support/raw_ostream.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "rbln/compiler/bind_outputs_pass.h"
#include "rbln/compiler/blas_loader.h"
#include "rbln/compiler/blas_rewrite_pass.h"
#include "rbln/compiler/mlir_setup.h"
#include "rbln/core/env.h"

namespace rbln::compiler {
namespace {

Stage Text(std::string name, std::string pipeline) {
  return Stage{std::move(name), std::move(pipeline), nullptr};
}

#if RBLN_MLIR_VERSION >= 17
constexpr char kMemrefToLlvm[] = "finalize-memref-to-llvm";
#else
constexpr char kMemrefToLlvm[] = "convert-memref-to-llvm";
#endif

#if RBLN_MLIR_VERSION >= 18
constexpr char kDeallocation[] = "buffer-deallocation-pipeline";
#else
constexpr char kDeallocation[] = "func.func(buffer-deallocation)";
#endif

// Stands in for a stage that cannot be built, so that the reason reaches
// the caller as that stage's failure.
class ErrorPass
    : public mlir::PassWrapper<ErrorPass,
                               mlir::OperationPass<mlir::func::FuncOp>> {
 public:
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(ErrorPass)
  explicit ErrorPass(std::string message) : message_(std::move(message)) {}
  void runOnOperation() override {
    // On the location, not the op: the message needs no IR dump.
    mlir::emitError(getOperation().getLoc(), message_);
    signalPassFailure();
  }

 private:
  std::string message_;
};

// GEMMs to cblas_sgemm (SPEC P5), between bufferization and lowering; none
// when RBLN_COMPILER_BLAS=0 or OpenBLAS does not load (matmul then lowers to
// loops).
std::optional<Stage> BlasStage() {
  absl::StatusOr<bool> enabled = BlasRewriteEnabled();
  if (!enabled.ok()) {
    std::string message(enabled.status().message());
    return Stage{"blas", "",
                 [message] { return std::make_unique<ErrorPass>(message); }};
  }
  if (!*enabled) return std::nullopt;
  RegisterBlasRewritePass();
  return Text("blas", kBlasRewritePassName);
}

}  // namespace

const std::vector<Stage>& FusionStages() {
  static const auto* stages = new std::vector<Stage>{
      Text("fuse", "canonicalize,cse,linalg-fuse-elementwise-ops,canonicalize,cse"),
  };
  return *stages;
}

const std::vector<Stage>& BufferizationStages() {
  static const auto* stages = new std::vector<Stage>{
      Stage{"bind-outputs", "", &CreateBindOutputsPass},
      Text("bufferize",
           absl::StrFormat(
               "empty-tensor-to-alloc-tensor,"
               "one-shot-bufferize{bufferize-function-boundaries "
               "function-boundary-type-conversion=identity-layout-map},"
               "drop-equivalent-buffer-results,%s,canonicalize",
               kDeallocation)),
  };
  return *stages;
}

const std::vector<Stage>& LoweringStages() {
  static const auto* stages = new std::vector<Stage>{
      Text("loops",
           "func.func(convert-linalg-to-loops),expand-strided-metadata,"
           "lower-affine,func.func(convert-scf-to-cf)"),
      Text("llvm", absl::StrFormat(
                       "convert-math-to-llvm,convert-math-to-libm,"
                       "convert-arith-to-llvm,%s,convert-func-to-llvm,"
                       "convert-cf-to-llvm,reconcile-unrealized-casts",
                       kMemrefToLlvm)),
  };
  return *stages;
}

std::vector<Stage> FullPipeline(PartitionOptions partition) {
  std::vector<Stage> all;
  for (const auto* part : {&FusionStages(), &BufferizationStages()}) {
    all.insert(all.end(), part->begin(), part->end());
  }
  if (std::optional<Stage> blas = BlasStage()) all.push_back(*std::move(blas));
  // After the BLAS rewrite: a cblas_sgemm call stays whole on chiplet 0
  // (OpenBLAS picks different kernels for a row slice than for the whole
  // matrix, so sliced GEMMs differ in the last bit; OpenBLAS threads itself).
  // Without BLAS, a matmul's loops are split by rows like any linalg op.
  if (partition.partitions > 1) {
    all.push_back(Stage{"partition", "", nullptr,
                        [partition] { return CreatePartitionPass(partition); }});
  }
  all.insert(all.end(), LoweringStages().begin(), LoweringStages().end());
  return all;
}

absl::Status RunStages(mlir::ModuleOp module, absl::Span<const Stage> stages,
                       absl::string_view dump_name) {
  InitializeMlirOnce();
  static const std::optional<std::string> dump_dir =
      env::GetRaw("RBLN_COMPILER_DUMP_DIR");
  mlir::MLIRContext* context = module.getContext();
  std::string diagnostics;
  mlir::ScopedDiagnosticHandler handler(context, [&](mlir::Diagnostic& diag) {
    llvm::raw_string_ostream os(diagnostics);
    os << diag << "\n";
    for (const mlir::Diagnostic& note : diag.getNotes()) os << "  " << note << "\n";
    return mlir::success();
  });
  int index = 0;
  for (const Stage& stage : stages) {
    mlir::PassManager pm(context, mlir::ModuleOp::getOperationName());
    if (stage.module_pass) {
      pm.addPass(stage.module_pass());
    } else if (stage.func_pass) {
      pm.addNestedPass<mlir::func::FuncOp>(stage.func_pass());
    } else {
      std::string errors;
      llvm::raw_string_ostream error_stream(errors);
      // The stage text is a list of passes anchored on the module; it is
      // added to `pm` as is. (Wrapping it in builtin.module(...) here would
      // nest it one level too deep and silently run nothing.)
      if (mlir::failed(
              mlir::parsePassPipeline(stage.pipeline, pm, error_stream))) {
        return absl::InternalError(absl::StrFormat(
            "compiler stage '%s': bad pipeline '%s': %s", stage.name,
            stage.pipeline, error_stream.str()));
      }
    }
    if (mlir::failed(pm.run(module))) {
      return absl::InternalError(absl::StrFormat(
          "compiler stage '%s' failed on %s:\n%s", stage.name, dump_name,
          diagnostics));
    }
    if (mlir::failed(mlir::verify(module))) {
      return absl::InternalError(absl::StrFormat(
          "compiler stage '%s' produced an invalid module for %s:\n%s",
          stage.name, dump_name, diagnostics));
    }
    if (dump_dir) {
      std::ofstream out(absl::StrFormat("%s/%s.%02d.%s.mlir", *dump_dir,
                                        dump_name, index, stage.name));
      std::string text;
      llvm::raw_string_ostream os(text);
      module.print(os);
      out << os.str();
    }
    ++index;
  }
  return absl::OkStatus();
}

}  // namespace rbln::compiler
