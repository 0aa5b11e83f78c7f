// spec: P6 (the kernel's machine code: vectorized, compiled without unrolling).
#include "rbln/compiler/execution/kernel_optimizer.h"

#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "llvm/AsmParser/Parser.h"
#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/IR/Instructions.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"

namespace rbln::compiler {
namespace {

// out[i] = a[i] + b[i] over 64 floats: the shape of an element-wise kernel
// loop. The arguments may alias, so the vectorizer keeps a scalar loop
// behind a runtime check -- the loop that unrolling used to copy 64 times.
constexpr char kElementwiseLoop[] = R"(
define void @add(ptr %a, ptr %b, ptr %out) {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %loop ]
  %pa = getelementptr float, ptr %a, i64 %i
  %pb = getelementptr float, ptr %b, i64 %i
  %po = getelementptr float, ptr %out, i64 %i
  %x = load float, ptr %pa
  %y = load float, ptr %pb
  %s = fadd float %x, %y
  store float %s, ptr %po
  %next = add i64 %i, 1
  %done = icmp eq i64 %next, 64
  br i1 %done, label %exit, label %loop
exit:
  ret void
}
)";

std::unique_ptr<llvm::TargetMachine> HostMachine() {
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  auto builder = llvm::orc::JITTargetMachineBuilder::detectHost();
  if (!builder) {
    llvm::consumeError(builder.takeError());
    return nullptr;
  }
  auto machine = builder->createTargetMachine();
  if (!machine) {
    llvm::consumeError(machine.takeError());
    return nullptr;
  }
  return std::move(*machine);
}

TEST(KernelOptimizerTest, VectorizesAnElementwiseLoopWithoutUnrollingIt) {
  std::unique_ptr<llvm::TargetMachine> machine = HostMachine();
  ASSERT_NE(machine, nullptr);
  llvm::LLVMContext context;
  llvm::SMDiagnostic diagnostic;
  std::unique_ptr<llvm::Module> module =
      llvm::parseAssemblyString(kElementwiseLoop, diagnostic, context);
  ASSERT_NE(module, nullptr) << diagnostic.getMessage().str();
  module->setTargetTriple(machine->getTargetTriple().str());
  module->setDataLayout(machine->createDataLayout());

  llvm::Error error = OptimizeKernelModule(*module, machine.get());
  ASSERT_FALSE(static_cast<bool>(error)) << llvm::toString(std::move(error));

  int vector_adds = 0;
  int scalar_adds = 0;
  for (const llvm::BasicBlock& block : *module->getFunction("add")) {
    for (const llvm::Instruction& inst : block) {
      if (inst.getOpcode() != llvm::Instruction::FAdd) continue;
      (inst.getType()->isVectorTy() ? vector_adds : scalar_adds)++;
    }
  }
  std::string text;
  llvm::raw_string_ostream os(text);
  module->print(os, nullptr);
  // Vectorized (SSE at least on any x86-64 host), and the scalar loop the
  // runtime alias check falls back to is still one loop, not 64 copies.
  EXPECT_GE(vector_adds, 1) << text;
  EXPECT_LE(scalar_adds, 1) << text;
  // Without unrolling the vector loop is interleaved at most 4 times.
  EXPECT_LE(vector_adds, 4) << text;
}

}  // namespace
}  // namespace rbln::compiler
