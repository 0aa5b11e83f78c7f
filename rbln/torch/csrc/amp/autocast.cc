// torch.autocast("rbln") (AutocastPrivateUse1): CUDA's autocast policy.
//
// Porting code written for `torch.autocast("cuda")` must get the same dtypes
// on rbln, so the op lists are ATen's own (the AT_FORALL_* macros of
// ATen/autocast_mode.h that aten/src/ATen/autocast_mode.cpp registers for
// AutocastCUDA), registered for AutocastPrivateUse1:
//   lower_precision_fp  matmul/linear/conv/bmm/baddbmm/addmm/sdpa ... run in
//                       the autocast dtype (float16 by default, bfloat16 with
//                       torch.autocast("rbln", dtype=torch.bfloat16))
//   fp32                exp/log/pow, norms, losses, softplus ... in float32
//   fp32_set_opt_dtype  softmax/log_softmax/sum/prod/cumsum ... accumulate in
//                       float32 unless the caller passed a dtype
//   fp32_append_dtype   norm.Scalar, norm.ScalarOpt_dim
//   promote             addcmul/addcdiv/atan2/cross/dot/index_put/... widest
// and binary_cross_entropy raises as it does on CUDA. Every other op falls
// through to the rbln kernels (the boxed fallthrough below), so autocast never
// blocks an op. Inside torch.compile(backend="rbln") Dynamo traces the same
// kernels, so the casts land in the captured graph.
#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace rbln::torch_backend {
namespace {

at::Tensor BinaryCrossEntropyBanned(const at::Tensor&, const at::Tensor&,
                                    const std::optional<at::Tensor>&, int64_t) {
  // The message of CUDA's autocast, so the fix it names is the same.
  TORCH_CHECK(false,
              "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are "
              "unsafe to autocast.\n"
              "Many models use a sigmoid layer right before the binary cross "
              "entropy layer.\n"
              "In this case, combine the two layers using "
              "torch.nn.functional.binary_cross_entropy_with_logits\n"
              "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits "
              "and BCEWithLogits are\n"
              "safe to autocast.");
}

// AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE spells its signatures as ATen's
// autocast_mode.cpp sees them, inside namespace at.
using at::IntArrayRef;
using at::Scalar;
using at::ScalarType;
using at::Tensor;

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
#define RBLN_AUTOCAST_LOWER_PRECISION_FP(...) \
  KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
  AT_FORALL_LOWER_PRECISION_FP(RBLN_AUTOCAST_LOWER_PRECISION_FP)
#undef RBLN_AUTOCAST_LOWER_PRECISION_FP

#define RBLN_AUTOCAST_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
  AT_FORALL_FP32(RBLN_AUTOCAST_FP32)
#undef RBLN_AUTOCAST_FP32

#define RBLN_AUTOCAST_FP32_SET_OPT_DTYPE(...) \
  KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
  AT_FORALL_FP32_SET_OPT_DTYPE(RBLN_AUTOCAST_FP32_SET_OPT_DTYPE)
#undef RBLN_AUTOCAST_FP32_SET_OPT_DTYPE

  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(
      KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)

#define RBLN_AUTOCAST_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_PROMOTE(RBLN_AUTOCAST_PROMOTE)
#undef RBLN_AUTOCAST_PROMOTE

  m.impl(TORCH_SELECTIVE_NAME("aten::binary_cross_entropy"),
         TORCH_FN(BinaryCrossEntropyBanned));
}

}  // namespace
}  // namespace rbln::torch_backend
