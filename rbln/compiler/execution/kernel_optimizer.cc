#include "rbln/compiler/execution/kernel_optimizer.h"

#include "llvm/Analysis/CGSCCPassManager.h"
#include "llvm/Analysis/LoopAnalysisManager.h"
#include "llvm/IR/PassManager.h"
#include "llvm/Passes/OptimizationLevel.h"
#include "llvm/Passes/PassBuilder.h"

namespace rbln::compiler {

llvm::Error OptimizeKernelModule(llvm::Module& module,
                                 llvm::TargetMachine* machine) {
  llvm::PipelineTuningOptions tuning;
  tuning.LoopInterleaving = true;
  tuning.LoopVectorization = true;
  tuning.SLPVectorization = true;
  tuning.LoopUnrolling = false;

  llvm::LoopAnalysisManager loops;
  llvm::FunctionAnalysisManager functions;
  llvm::CGSCCAnalysisManager sccs;
  llvm::ModuleAnalysisManager modules;
  llvm::PassBuilder builder(machine, tuning);
  builder.registerModuleAnalyses(modules);
  builder.registerCGSCCAnalyses(sccs);
  builder.registerFunctionAnalyses(functions);
  builder.registerLoopAnalyses(loops);
  builder.crossRegisterProxies(loops, functions, sccs, modules);

  llvm::ModulePassManager pipeline =
      builder.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O2);
  pipeline.run(module, modules);
  return llvm::Error::success();
}

}  // namespace rbln::compiler
