// Masked attention as a kernel hands it to rbln_masked_attention
// (kernels/masked_attention.h): the problem and its encoding as i64 words,
// a constant of the kernel. The masked attention rewrite
// (transforms/library/) writes it; the kernel reads it. No MLIR.
#ifndef RBLN_COMPILER_ABI_ATTENTION_PROBLEM_H_
#define RBLN_COMPILER_ABI_ATTENTION_PROBLEM_H_

#include <cstdint>
#include <vector>

#include "rbln/compiler/abi/gemm_problem.h"

namespace rbln::compiler {

// The mask's element type.
enum class AttentionMaskType : int64_t { kNone = 0, kBool = 1, kF32 = 2, kBF16 = 3, kF16 = 4 };

// Query [B, H, L, E], keys [B, Hkv, S, E], values [B, Hkv, S, Ev], output
// [B, H, L, Ev]; strides in elements (unit along E and Ev).
struct MaskedAttentionProblem {
  GemmOperandType query_type = GemmOperandType::kF32;
  GemmOperandType kv_type = GemmOperandType::kF32;  // keys' and values'
  GemmOperandType out_type = GemmOperandType::kF32;
  AttentionMaskType mask_type = AttentionMaskType::kNone;
  bool causal = false;
  int64_t batch = 0, heads = 0, kv_heads = 0, q_len = 0, kv_len = 0, head_dim = 0,
          value_dim = 0;
  float scale = 1.0f;
  // Strides of dims (batch, head, row) of the query, keys, values and
  // output; (batch, head, row, key) of the mask (0 along a broadcast dim).
  int64_t query_strides[3] = {}, key_strides[3] = {}, value_strides[3] = {},
          out_strides[3] = {}, mask_strides[4] = {};

  // kWords words: the fields in order, the scale as its f32 bits.
  static constexpr int kWords = 29;
  std::vector<int64_t> Encode() const;
  static MaskedAttentionProblem Decode(const int64_t* words);
};

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_ABI_ATTENTION_PROBLEM_H_
