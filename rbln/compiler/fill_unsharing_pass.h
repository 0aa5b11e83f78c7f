// One linalg.fill per destination it initializes (SPEC P4, P5).
//
// CSE merges identical fills: the q, k and v projections of an attention
// layer then all start from one zero-filled tensor. One-shot bufferization
// gives each matmul its own buffer as a copy of the filled one (each
// matmul writes its destination), so every GEMM pays a memref.copy of its
// whole C and, with the fill no longer its direct producer, the BLAS
// rewrite must accumulate into C instead of overwriting it -- no
// zero-fill elision, no bf16 store epilogue, and chiplet workers' column
// blocks of C copied in and out. The same happens, without the copy, when
// a fill sits apart from its GEMM (the rewrite drops a zero fill only if
// it directly precedes the GEMM). This pass, on tensors before
// bufferization, gives every linalg destination use of a fill its own
// clone of the fill and of the tensor.empty it fills, right before the
// destination's op, so that after bufferization each C is allocated and
// zero-filled just before the op that writes it. The same for the
// destinations of tensor.insert_slice: a tensor.pad is a fill and an
// insert_slice into it, and CSE lets pads of one shape share the fill, which
// bufferization then copies whole for each pad (a convolution's padded input
// written twice; the conv rewrite reads the unpadded input only when the
// fill and the copy are its own).
#ifndef RBLN_COMPILER_FILL_UNSHARING_PASS_H_
#define RBLN_COMPILER_FILL_UNSHARING_PASS_H_

#include <memory>

#include "mlir/Pass/Pass.h"

namespace rbln::compiler {

std::unique_ptr<mlir::Pass> CreateFillUnsharingPass();

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_FILL_UNSHARING_PASS_H_
