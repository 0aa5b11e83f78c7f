// The epilogue matcher of the GEMM rewrite (blas_rewrite_pass.cc): the
// element-wise generic after a GEMM whose work on C the library call can do
// itself as its epilogue (abi/library_epilogue.h: a per-column bias, a
// ReLU, the rounding to bf16), so that C and the pass over it go away.
#ifndef RBLN_COMPILER_TRANSFORMS_LIBRARY_EPILOGUE_MATCHER_H_
#define RBLN_COMPILER_TRANSFORMS_LIBRARY_EPILOGUE_MATCHER_H_

#include <optional>

#include "llvm/ADT/SmallPtrSet.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/IR/Operation.h"
#include "mlir/IR/Value.h"
#include "rbln/compiler/abi/library_epilogue.h"
#include "rbln/compiler/transforms/library/gemm_lowering.h"

namespace rbln::compiler {

// What an element-wise generic after a GEMM does with C that the call can
// do instead (a LibraryEpilogue): out = store([relu](C [+ bias[column]])),
// the bias (its second input, 1-D, indexed by the last dim only, f32 or
// bf16) added in f32, the store rounding to bf16 into an i16 output or
// storing f32 (a relu only with a bf16 store). C is its first input
// (identity map), the output has an identity map.
struct EpilogueGeneric {
  StoreType store = StoreType::kF32;
  mlir::Value bias;  // null if none
  // A ReLU of the rounded value, rounded again (exact): oneDNN's relu
  // before its bf16 store gives the same values, since rounding is
  // monotone and keeps zero. (Only a zero's sign can differ: a negative
  // sum that rounds to -0.0, |sum| < 2^-133, stays -0.0 through the
  // generic's relu and becomes +0.0 through oneDNN's.)
  bool relu = false;
};

// `g` as such a generic, or nothing.
std::optional<EpilogueGeneric> AsEpilogueGeneric(mlir::linalg::GenericOp g);

// The generic after `op` that rounds the GEMM's C to bf16 into another
// buffer, and that buffer as a matrix the GEMM can store into, or nothing.
// C must be a buffer of its own (memref.alloc, identity layout) that the
// GEMM writes whole (directly or through a reshape) and that nothing but
// the rounding reads (directly or through a reshape); the rounded buffer
// has the same shape as C's view or is contiguous. Nothing between `op`
// and the rounding may touch the rounded buffer: the call will write it at
// `op`.
struct Bf16Store {
  mlir::linalg::GenericOp rounding;  // the epilogue generic
  Matrix out;
  EpilogueGeneric epilogue;
};

// `replaced`: writers that will go (their f32 values are read through
// their twins only); reading C does not keep them.
std::optional<Bf16Store> Bf16StoreOf(
    const Matrix& c, mlir::Operation* op,
    const llvm::SmallPtrSetImpl<mlir::Operation*>& replaced);

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_TRANSFORMS_LIBRARY_EPILOGUE_MATCHER_H_
