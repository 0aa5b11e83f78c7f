#include "rbln/compiler/abi/attention_problem.h"

#include <cstring>

namespace rbln::compiler {

std::vector<int64_t> MaskedAttentionProblem::Encode() const {
  uint32_t scale_bits;
  std::memcpy(&scale_bits, &scale, 4);
  std::vector<int64_t> w = {static_cast<int64_t>(query_type), static_cast<int64_t>(kv_type),
                            static_cast<int64_t>(out_type), static_cast<int64_t>(mask_type),
                            causal, batch, heads, kv_heads, q_len, kv_len, head_dim, value_dim,
                            scale_bits};
  for (const int64_t* strides : {query_strides, key_strides, value_strides, out_strides}) {
    w.insert(w.end(), strides, strides + 3);
  }
  w.insert(w.end(), mask_strides, mask_strides + 4);
  return w;
}

MaskedAttentionProblem MaskedAttentionProblem::Decode(const int64_t* w) {
  MaskedAttentionProblem p;
  p.query_type = static_cast<GemmOperandType>(w[0]);
  p.kv_type = static_cast<GemmOperandType>(w[1]);
  p.out_type = static_cast<GemmOperandType>(w[2]);
  p.mask_type = static_cast<AttentionMaskType>(w[3]);
  p.causal = w[4] != 0;
  p.batch = w[5], p.heads = w[6], p.kv_heads = w[7], p.q_len = w[8], p.kv_len = w[9];
  p.head_dim = w[10], p.value_dim = w[11];
  const uint32_t scale_bits = static_cast<uint32_t>(w[12]);
  std::memcpy(&p.scale, &scale_bits, 4);
  int n = 13;
  for (int64_t* strides : {p.query_strides, p.key_strides, p.value_strides, p.out_strides}) {
    for (int k = 0; k < 3; ++k) strides[k] = w[n++];
  }
  for (int k = 0; k < 4; ++k) p.mask_strides[k] = w[n++];
  return p;
}

}  // namespace rbln::compiler
