// The narrow (bf16, f16) values behind the f32 buffers a GEMM or a
// convolution reads and writes, for the library rewrites
// (blas_rewrite_pass.cc, conv_rewrite_pass.cc): which generic widened an
// operand and from what, its narrow twin, the frontend's bf16 rounding of a
// result, and the buffer bookkeeping they share (who last wrote a buffer,
// whether anything in between may write it, erasing what the call made
// unread). Operates on bufferized linalg (memrefs).
#ifndef RBLN_COMPILER_TRANSFORMS_LIBRARY_NARROW_OPERANDS_H_
#define RBLN_COMPILER_TRANSFORMS_LIBRARY_NARROW_OPERANDS_H_

#include <cstdint>
#include <optional>
#include <utility>

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/DenseMap.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/Operation.h"
#include "mlir/IR/Value.h"

namespace rbln::compiler {

// The narrow float formats the f32 operands of a GEMM or convolution may be
// widened from,
// each read by oneDNN as it is stored: bf16 as i16 bits (the frontend keeps
// bf16 in i16), f16 as f16.
enum class NarrowFloat { kBF16, kF16 };

// A narrow value that an f32 value is the exact widening of.
struct Widened {
  mlir::Value narrow;  // i16 bits (kBF16) or f16 (kF16)
  NarrowFloat format;
};

// What `v` is the widening of: the frontend's bf16 widening of i16 bits
// (Bf16ToF32: bitcast<f32>(extui<i32>(bits) << 16)) or arith.extf of an
// f16 value; nothing otherwise.
std::optional<Widened> WidenedFrom(mlir::Value v);

// The element type a narrow format is stored as in kernels.
mlir::Type StorageType(mlir::MLIRContext* context, NarrowFloat format);

// What a generic that copies a GEMM operand into an f32 buffer does, if it
// is one: a widening of its narrow input (WidenedFrom) or a plain f32 copy,
// each element for element (identity maps) or as a 2-D transpose (the
// input map swaps the two dims: a permute/t before the GEMM, fused with the
// widening).
struct OperandCopy {
  std::optional<NarrowFloat> widens;  // the format widened; none: f32 copy
  bool transposed = false;            // out[i, j] = in[j, i]
};

std::optional<OperandCopy> AsOperandCopy(mlir::linalg::GenericOp generic);

// The buffer `v` is a view of: its memref.alloc or block argument.
mlir::Value BaseBuffer(mlir::Value v);

// True if nothing between `from` and `to` (same block) may write or free
// `source`: every op with memory effects in between allocates, frees
// another buffer, or is a linalg op or memref.copy writing other buffers
// (allocations or kernel arguments other than `source`'s; distinct
// arguments never overlap, SPEC P4: the caller copies inputs that overlap
// an output, aliased_inputs.h).
bool UnwrittenBetween(mlir::Value source, mlir::Operation* from,
                      mlir::Operation* to);

// --- bf16 / f16 operands recovered from the f32 buffers the GEMM reads ---
//
// In a bf16 (f16) program every value between two ops is rounded to bf16
// (f16), so the f32 operands of a GEMM hold such values: the generic that
// writes one ends in their widening (WidenedFrom), either of an input (a
// copy) or of a value it computed itself (the rounding of a layer norm,
// bias add, ... fused with the widening). oneDNN reads the narrow values
// as they are: a copy's source directly, computed ones from a narrow twin
// of the writer (the same generic storing the narrow value instead of its
// widening). Products of bf16 or f16 values are exact in f32 (8 + 8 or
// 11 + 11 significant bits), so only the f32 summation order differs from
// the f32 GEMM.

bool IsAllocOrArgument(mlir::Value buffer);

// True if `generic` writes every element of `buffer` (its only init, with
// an identity map, all loops parallel) and reads nothing of it.
bool OverwritesWhole(mlir::linalg::GenericOp generic, mlir::Value buffer);

// The generic that last wrote `buffer` (a memref.alloc) before `op`, in
// op's block, if it overwrote all of it and nothing in between may have
// written it; else null.
mlir::linalg::GenericOp LastWholeWriter(mlir::Value buffer, mlir::Operation* op);

// Where the narrow values of a GEMM operand come from.
struct NarrowOperand {
  mlir::linalg::GenericOp writer;  // wrote the f32 buffer the GEMM reads
  mlir::memref::CollapseShapeOp collapse;  // the GEMM's view of it, or null
  NarrowFloat format = NarrowFloat::kBF16;
  mlir::Value source;             // a copy: the narrow buffer it widened, else null
  bool transposed = false;  // a copy: out[i, j] = source[j, i]
};

// The narrow values of `operand`, an f32 buffer of its own that `op` reads
// directly or through one collapse_shape, or nothing.
std::optional<NarrowOperand> NarrowOperandOf(mlir::Value operand, mlir::Operation* op);

// The narrow twin of `writer`, which yields the widening of a `format`
// value (created once, right after it): the same generic storing the narrow
// value instead into a buffer of its own, freed at the end of the block.
mlir::Value NarrowTwin(mlir::linalg::GenericOp writer, NarrowFloat format,
                 llvm::DenseMap<mlir::Operation*, mlir::Value>& twins);

// True if an op after `writer` may read what it wrote into its buffer
// before the buffer is overwritten whole or the block ends.
bool WrittenValuesRead(mlir::linalg::GenericOp writer);

// Erases the views nothing uses, and then `writers` whose values nothing
// reads, and their buffers once only deallocations use them.
void EraseUnreadWriters(llvm::ArrayRef<mlir::linalg::GenericOp> writers);

// The linalg.fill of +0.0 that directly precedes `op` (only ops free of
// memory effects in between) and writes exactly `c`, or null.
mlir::linalg::FillOp ZeroFillOf(mlir::Value c, mlir::Operation* op);

bool IsConstantInt(mlir::Value v, int64_t expected);

// The operands of a commutative op, the one `first` accepts first, or
// nothing.
template <typename Pred>
std::optional<std::pair<mlir::Value, mlir::Value>> Ordered(mlir::Operation* op,
                                               Pred first) {
  if (!op || op->getNumOperands() != 2) return std::nullopt;
  mlir::Value l = op->getOperand(0), r = op->getOperand(1);
  if (first(l)) return std::pair{l, r};
  if (first(r)) return std::pair{r, l};
  return std::nullopt;
}

// The f32 value whose bf16 bits `v` is, if `v` is the frontend's rounding
// (F32ToBf16: trunci(select(cmpf uno x x, 0x7fc0, (u + (0x7fff + ((u >> 16)
// & 1))) >> 16)), u = bitcast x: nearest even, NaN -> 0x7fc0), else null:
// what oneDNN's bf16 store computes (RoundToBf16).
mlir::Value RoundedToBf16(mlir::Value v);

// True if `v` is `bits` (i16) widened from bf16 to f32 (Bf16ToF32).
bool IsBf16Widening(mlir::Value v, mlir::Value bits);

// The bf16 bits `b` (i16) if `v` is the frontend's ReLU of the value they
// hold, widened: select(b below zero, +0.0, Bf16ToF32(b)), the compare done
// on the bits (ops/elementwise_util.cc, HalfCompare: the sign-magnitude
// bits as an ordered key, and not NaN: a magnitude up to infinity's);
// else null. -0.0 and NaN pass unchanged.
mlir::Value Bf16ReluInput(mlir::Value v);

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_TRANSFORMS_LIBRARY_NARROW_OPERANDS_H_
