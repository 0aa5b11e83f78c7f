#include "rbln/compiler/pipelines/mlir_setup.h"

#include <mutex>

#include "llvm/Support/TargetSelect.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"

namespace rbln::compiler {

void InitializeMlirOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    mlir::registerAllPasses();
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });
}

std::unique_ptr<mlir::MLIRContext> CreateCompilerContext() {
  InitializeMlirOnce();
  mlir::DialectRegistry registry;
  mlir::registerAllDialects(registry);
  mlir::registerAllToLLVMIRTranslations(registry);
  // Compiles run one at a time per context; MLIR's own thread pool would
  // compete with the runtime's chiplet workers on small machines.
  auto context = std::make_unique<mlir::MLIRContext>(
      registry, mlir::MLIRContext::Threading::DISABLED);
  context->loadAllAvailableDialects();
  return context;
}

}  // namespace rbln::compiler
