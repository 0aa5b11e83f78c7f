// The differences between the MLIR/LLVM versions the compiler builds with
// (16 on Debian 12, 19 on Debian 13 and with --config=mlir19), in one place.
// Everything else in rbln/compiler is written against the API both share.
// Pass names that changed live in the per-version tables of pipelines.cc.
//
// RBLN_MLIR_VERSION is the major version, defined by @local_llvm//:mlir.
#ifndef RBLN_COMPILER_PIPELINES_MLIR_COMPAT_H_
#define RBLN_COMPILER_PIPELINES_MLIR_COMPAT_H_

#include "llvm/ADT/SmallVector.h"
#include "llvm/ExecutionEngine/JITSymbol.h"
#include "llvm/ExecutionEngine/Orc/Core.h"
#include "llvm/Support/CodeGen.h"
#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Types.h"

// llvm/Support/Host.h moved to llvm/TargetParser/Host.h in LLVM 17.
#if RBLN_MLIR_VERSION >= 17
#include "llvm/TargetParser/Host.h"  // IWYU pragma: export
#else
#include "llvm/Support/Host.h"  // IWYU pragma: export
#endif

#if !defined(RBLN_MLIR_VERSION) || \
    (RBLN_MLIR_VERSION != 16 && RBLN_MLIR_VERSION != 19)
#error "rbln/compiler supports MLIR 16 and 19 (RBLN_MLIR_VERSION)"
#endif

namespace rbln::compiler::compat {

// The MLIR major version this build uses.
inline constexpr int kMlirVersion = RBLN_MLIR_VERSION;

// ExecutionEngineOptions::jitCodeGenOptLevel's enum: llvm::CodeGenOpt::Level
// on 16, llvm::CodeGenOptLevel from 18.
#if RBLN_MLIR_VERSION >= 18
using CodeGenOptLevel = llvm::CodeGenOptLevel;
#else
using CodeGenOptLevel = llvm::CodeGenOpt::Level;
#endif
inline constexpr CodeGenOptLevel kCodeGenOptDefault = CodeGenOptLevel::Default;

// The affine dialect moved into namespace mlir::affine in 17.
#if RBLN_MLIR_VERSION >= 17
using AffineApplyOp = mlir::affine::AffineApplyOp;
using AffineDialect = mlir::affine::AffineDialect;
#else
using AffineApplyOp = mlir::AffineApplyOp;
using AffineDialect = mlir::AffineDialect;
#endif

// 2-D grouped convolution reading its kernel as [G, F/G, C/G, KH, KW] (a
// PyTorch weight [F, C/G, KH, KW] expanded, groups major). MLIR 16's
// conv_2d_ngchw_fgchw indexes its kernel (g, f, c, ...) despite its name;
// by 19 that op reads (f, g, c, ...) and the (g, f, c, ...) one is
// conv_2d_ngchw_gfchw.
#if RBLN_MLIR_VERSION >= 19
using GroupedConv2DOp = mlir::linalg::Conv2DNgchwGfchwOp;
#else
using GroupedConv2DOp = mlir::linalg::Conv2DNgchwFgchwOp;
#endif

// True when every operand of `op` is a buffer (or scalar): the linalg op has
// been bufferized. (16: hasBufferSemantics; 19: hasPureBufferSemantics.)
bool HasBufferSemantics(mlir::linalg::LinalgOp op);

// The init (output) operands of `op`. (16: getDpsInitOperands(); 19 has
// only getDpsInitsMutable().)
llvm::SmallVector<mlir::OpOperand*> DpsInitOperands(mlir::linalg::LinalgOp op);

// The pointer type of a cblas_sgemm matrix argument: typed !llvm.ptr<f32> on
// 16, opaque !llvm.ptr from 18 (typed pointers are gone).
mlir::Type MatrixPointerType(mlir::MLIRContext* context);

// A host function exported to JIT'd code under the name it is interned as.
// (16: llvm::JITEvaluatedSymbol; 17+: llvm::orc::ExecutorSymbolDef.)
template <typename Fn>
llvm::orc::SymbolMap::mapped_type ExportedSymbol(Fn* function) {
#if RBLN_MLIR_VERSION >= 17
  return llvm::orc::ExecutorSymbolDef(
      llvm::orc::ExecutorAddr::fromPtr(function),
      llvm::JITSymbolFlags::Exported);
#else
  return llvm::JITEvaluatedSymbol(llvm::pointerToJITTargetAddress(function),
                                  llvm::JITSymbolFlags::Exported);
#endif
}

}  // namespace rbln::compiler::compat

#endif  // RBLN_COMPILER_PIPELINES_MLIR_COMPAT_H_
