// Frontend: graph IR -> MLIR `func` of linalg on tensors.
//
// The kernel is one `func.func @kernel` taking the graph inputs, then one
// tensor per graph output marked {bufferization.writable = true}, and
// returning the outputs (destination passing, see transforms/bind_outputs_pass.cc).
// Element storage types: f16 -> f16, f32 -> f32, bf16 -> i16 (converted to and
// from f32 in the kernel body with PyTorch's rounding, since LLVM 16 cannot
// lower bf16 arithmetic), int32/int64 -> i32/i64.
// Half types compute in f32 and round once, as PyTorch's CPU kernels do.
#ifndef RBLN_COMPILER_FRONTEND_FRONTEND_H_
#define RBLN_COMPILER_FRONTEND_FRONTEND_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"
#include "rbln/compiler/abi/kernel_abi.h"
#include "rbln/compiler/ir/graph.pb.h"

namespace rbln::compiler {

// Unimplemented, with "The following operators are not implemented: [...]",
// when the graph has ops the frontend cannot convert (SPEC J6).
absl::StatusOr<mlir::OwningOpRef<mlir::ModuleOp>> ImportGraph(
    const ir::Graph& graph, mlir::MLIRContext* context);

// Unimplemented, with the message ImportGraph() gives, if `graph` has ops
// the frontend cannot convert (every such op listed once).
absl::Status CheckOpsImplemented(const ir::Graph& graph);

// True if the frontend converts IR op `op` (e.g. "add", "softmax"). Callers
// that cut graphs (torch.compile's host ops, SPEC J6) use it to decide which
// ops must run outside the device program before compiling.
bool IsOpImplemented(absl::string_view op);

// Every op name the frontend converts, sorted.
std::vector<std::string> ImplementedOps();

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_FRONTEND_FRONTEND_H_
