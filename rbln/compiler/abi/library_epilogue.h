// The epilogue a GEMM or convolution library call applies to its f32
// results before it stores them: what the rewrites take over from the
// element-wise generic that followed the op
// (transforms/library/epilogue_matcher.h), as data that the kernel passes
// to the call (oneDNN post-ops, kernels/onednn_gemm.h,
// kernels/onednn_conv.h). No MLIR, no oneDNN.
//
// Per-channel operands (a bias, batch norm's mean and scale) are rows of one
// f32 array `sides` [rows, channels] that the kernel computes before the
// call; a channel is a GEMM's output column or a convolution's output
// channel.
#ifndef RBLN_COMPILER_ABI_LIBRARY_EPILOGUE_H_
#define RBLN_COMPILER_ABI_LIBRARY_EPILOGUE_H_

#include <cstdint>
#include <string>
#include <vector>

namespace rbln::compiler {

// Element-wise functions (oneDNN eltwise post-ops).
enum class EltwiseFn : int64_t {
  kRelu = 0,      // x < 0 ? 0 : x (NaN passes)
  kGeluErf = 1,   // x/2 * (1 + erf(x/sqrt(2)))
  kGeluTanh = 2,  // x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))
  kSilu = 3,      // x / (1 + exp(-x))
  kSigmoid = 4,   // 1 / (1 + exp(-x))
  kTanh = 5,
  kLinear = 6,  // alpha * x + beta
};

// x (op) side[channel] (oneDNN binary post-ops, per channel).
enum class BinaryFn : int64_t { kAdd = 0, kSub = 1, kMul = 2, kDiv = 3 };

enum class StoreType : int64_t { kF32 = 0, kBF16 = 1 };

struct EpilogueOp {
  bool binary = false;  // else element-wise
  int64_t fn = 0;       // EltwiseFn or BinaryFn
  float alpha = 0, beta = 0;  // kLinear's
  int64_t row = 0;            // binary: the row of `sides`

  bool operator==(const EpilogueOp& o) const;
};

struct LibraryEpilogue {
  // A row of `sides` added first (the library's bias argument), or -1.
  int64_t bias_row = -1;
  std::vector<EpilogueOp> ops;
  // How results are stored (bf16: rounded to nearest even, NaN quiet).
  StoreType store = StoreType::kF32;

  // Nothing to do but store f32.
  bool IsPlain() const {
    return bias_row < 0 && ops.empty() && store == StoreType::kF32;
  }
  // Rows of `sides` read (1 + the highest row used; 0 if none).
  int64_t SideRows() const;

  // As i64 words (the kernel's constant problem description), and back;
  // Parse advances `words` past what it read.
  void AppendTo(std::vector<int64_t>& words) const;
  static LibraryEpilogue Parse(const int64_t*& words);

  // The reference: x after the epilogue for `channel` (before the store
  // rounding), `sides` rows of `channels` floats.
  float Apply(float x, const float* sides, int64_t channels,
              int64_t channel) const;
  // Stores `x` (an Apply result) at `out` in the store type.
  void Store(float x, void* out) const;
  std::string ToString() const;
  bool operator==(const LibraryEpilogue& o) const;
};

// The reference element-wise function.
float ApplyEltwise(EltwiseFn fn, float alpha, float beta, float x);
// c10::BFloat16's rounding of `x` (nearest even; NaN -> 0x7fc0).
uint16_t RoundToBf16(float x);

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_ABI_LIBRARY_EPILOGUE_H_
