#include "rbln/compiler/pipelines/pipelines.h"

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
#include "rbln/compiler/kernels/blas_loader.h"
#include "rbln/compiler/pipelines/mlir_compat.h"
#include "rbln/compiler/pipelines/mlir_setup.h"
#include "rbln/compiler/transforms/library/passes.h"
#include "rbln/compiler/transforms/passes.h"
#include "rbln/core/env.h"

namespace rbln::compiler {
namespace {

Stage Text(std::string name, std::string pipeline) {
  return Stage{std::move(name), std::move(pipeline), nullptr};
}

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

// GEMMs to oneDNN's rbln_gemm (and convolutions to its rbln_conv) or
// OpenBLAS's cblas_sgemm (SPEC P5), between
// bufferization and lowering; none when RBLN_COMPILER_BLAS=0 or no GEMM
// library loads (matmul then lowers to loops).
std::optional<Stage> BlasStage() {
  absl::StatusOr<bool> enabled = BlasRewriteEnabled();
  if (!enabled.ok()) {
    std::string message(enabled.status().message());
    return Stage{"blas", "",
                 [message] { return std::make_unique<ErrorPass>(message); }};
  }
  if (!*enabled) return std::nullopt;
  RegisterBlasRewritePass();
  const bool onednn = **ChosenGemmLibrary() == GemmLibrary::kOnednn;
  if (!onednn) {
    return Text("blas",
                absl::StrFormat("%s{library=openblas}", kBlasRewritePassName));
  }
  // With oneDNN, 2-D convolutions and grouped GEMMs go to it too
  // (transforms/library/conv_rewrite_pass.cc, grouped_gemm_rewrite_pass.cc).
  RegisterConvRewritePass();
  RegisterGroupedGemmRewritePass();
  return Text("blas", absl::StrFormat("%s{library=onednn},%s,%s",
                                      kBlasRewritePassName,
                                      kConvRewritePassName,
                                      kGroupedGemmRewritePassName));
}

// One table per supported MLIR version: pass names and pass behaviour
// changed between 16 and 19.
constexpr PipelineTable kMlir16Pipelines = {
    16,
    "canonicalize,cse,linalg-fuse-elementwise-ops,canonicalize,cse",
    "empty-tensor-to-alloc-tensor,"
    "one-shot-bufferize{bufferize-function-boundaries "
    "function-boundary-type-conversion=identity-layout-map},"
    "drop-equivalent-buffer-results,func.func(buffer-deallocation),"
    "canonicalize",
    "func.func(convert-linalg-to-loops),expand-strided-metadata,"
    "lower-affine,func.func(convert-scf-to-cf)",
    "convert-math-to-llvm,convert-math-to-libm,convert-arith-to-llvm,"
    "convert-memref-to-llvm,convert-func-to-llvm,convert-cf-to-llvm,"
    "reconcile-unrealized-casts",
};

// 19: MLIR's element-wise fusion also folds reshapes into matmuls (hiding
// GEMMs from the BLAS rewrite), so fusion is our rbln-fuse-elementwise-ops
// (transforms/elementwise_fusion_pass.cc); buffer-deallocation became
// buffer-deallocation-pipeline (18) and convert-memref-to-llvm
// finalize-memref-to-llvm (17). 19's scf.for bufferization keeps memref
// iter_args until canonicalize folds them, so canonicalize runs before
// drop-equivalent-buffer-results (else an in-place loop result, e.g.
// index_copy's, is returned as a clone the LLVM lowering cannot translate).
constexpr PipelineTable kMlir19Pipelines = {
    19,
    "canonicalize,cse,rbln-fuse-elementwise-ops,canonicalize,cse",
    "empty-tensor-to-alloc-tensor,"
    "one-shot-bufferize{bufferize-function-boundaries "
    "function-boundary-type-conversion=identity-layout-map},"
    "canonicalize,drop-equivalent-buffer-results,"
    "buffer-deallocation-pipeline,"
    "canonicalize",
    "func.func(convert-linalg-to-loops),expand-strided-metadata,"
    "lower-affine,func.func(convert-scf-to-cf)",
    "convert-math-to-llvm,convert-math-to-libm,convert-arith-to-llvm,"
    "finalize-memref-to-llvm,convert-func-to-llvm,convert-cf-to-llvm,"
    "reconcile-unrealized-casts",
};

}  // namespace

absl::Span<const PipelineTable> AllPipelineTables() {
  static constexpr PipelineTable kTables[] = {kMlir16Pipelines,
                                              kMlir19Pipelines};
  return kTables;
}

const PipelineTable& Pipelines() {
  static_assert(compat::kMlirVersion == kMlir16Pipelines.mlir_version ||
                    compat::kMlirVersion == kMlir19Pipelines.mlir_version,
                "no pipeline table for this MLIR version");
  // Our own passes named in the tables; registered once.
  RegisterElementwiseFusionPass();
  return compat::kMlirVersion == kMlir16Pipelines.mlir_version
             ? kMlir16Pipelines
             : kMlir19Pipelines;
}

const std::vector<Stage>& FusionStages() {
  static const auto* stages =
      new std::vector<Stage>{Text("fuse", Pipelines().fuse)};
  return *stages;
}

const std::vector<Stage>& BufferizationStages() {
  static const auto* stages = new std::vector<Stage>{
      // Before bufferization copies a shared fill per destination.
      Stage{"unshare-fills", "", &CreateFillUnsharingPass},
      Stage{"bind-outputs", "", &CreateBindOutputsPass},
      Text("bufferize", Pipelines().bufferize),
  };
  return *stages;
}

const std::vector<Stage>& LoweringStages() {
  static const auto* stages = new std::vector<Stage>{
      // On the workers' slices, before the payloads become loops
      // (transforms/reduction_interchange_pass.cc).
      Stage{"interchange-reductions", "", &CreateReductionInterchangePass},
      // Reductions left with their reduced loops innermost
      // (transforms/register_accumulator_pass.cc).
      Stage{"register-accumulators", "", &CreateRegisterAccumulatorPass},
      Text("loops", Pipelines().loops),
      // Before math.exp becomes a call of expf (transforms/polynomial_exp_pass.cc).
      Stage{"polynomial-exp", "", &CreatePolynomialExpPass},
      Text("llvm", Pipelines().llvm),
  };
  return *stages;
}

std::vector<Stage> FullPipeline(PartitionOptions partition) {
  std::vector<Stage> all;
  for (const auto* part : {&FusionStages(), &BufferizationStages()}) {
    all.insert(all.end(), part->begin(), part->end());
  }
  if (std::optional<Stage> blas = BlasStage()) all.push_back(*std::move(blas));
  // Paged attention's kernel is ours (no library to load): always.
  all.push_back(Stage{"paged-attention", "", nullptr, &CreatePagedAttentionRewritePass});
  all.push_back(Stage{"masked-attention", "", nullptr, &CreateMaskedAttentionRewritePass});
  // After the BLAS rewrite: a cblas_sgemm call stays whole on chiplet 0
  // (OpenBLAS picks different kernels for a row slice than for the whole
  // matrix, so sliced GEMMs differ in the last bit); oneDNN GEMM blocks,
  // fixed by the shape, spread over the workers. Without BLAS, a matmul's
  // loops are split by rows like any linalg op.
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
