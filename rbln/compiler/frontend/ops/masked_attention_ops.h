// The attention converter's kernel path (attention_ops.cc): scaled
// dot-product attention as one linalg.generic marked kMaskedAttentionAttr,
// which the masked attention rewrite (transforms/library/
// masked_attention_rewrite_pass.cc) replaces after bufferization with
// rbln_masked_attention calls (kernels/masked_attention.h). Those visit only
// the keys each query's mask leaves visible: a static KV cache's empty
// slots cost nothing, where the composed lowering's GEMMs and softmax span
// the whole cache.
//
// The generic's body is also a correct lowering by itself (one output
// element per iteration, an online softmax over all keys, reading the
// operands in place: q and k in the inner product, then the mask, then v,
// the order the rewrite identifies them by); in the full pipeline an op the
// rewrite cannot take is a compile error (kMaskedAttentionKeysAttr).
#ifndef RBLN_COMPILER_FRONTEND_OPS_MASKED_ATTENTION_OPS_H_
#define RBLN_COMPILER_FRONTEND_OPS_MASKED_ATTENTION_OPS_H_

#include <string>

#include "absl/status/statusor.h"
#include "mlir/IR/Value.h"
#include "rbln/compiler/frontend/graph_importer.h"

namespace rbln::compiler {

struct MaskedAttentionOperands {
  // q [B, H, L, E], k [B, Hkv, S, E], v [B, Hkv, S, Ev]; mask ("" for none)
  // broadcasting to [B, H, L, S], bool or float.
  std::string query, key, value, mask;
  bool causal = false;
  double scale = 1.0;
  ir::DType out_dtype = ir::FLOAT32;
};

// Whether the kernel takes these operands: rank-4 query, keys and values
// with equal batch, H a multiple of Hkv, f32/bf16/f16 (keys and values of
// one type), a bool or float mask of rank 1-4 over the keys (last dim S)
// that broadcasts -- or causal, or without either for at most 32 query
// rows per kv head (with many rows and nothing to skip, the composition's
// GEMMs are faster).
bool MaskedAttentionApplies(GraphImporter& im, const MaskedAttentionOperands& ops);

// The attention's output [B, H, L, Ev] in out_dtype (the marked generic).
absl::StatusOr<mlir::Value> EmitMaskedAttention(GraphImporter& im,
                                                const MaskedAttentionOperands& ops);

}  // namespace rbln::compiler

#endif  // RBLN_COMPILER_FRONTEND_OPS_MASKED_ATTENTION_OPS_H_
