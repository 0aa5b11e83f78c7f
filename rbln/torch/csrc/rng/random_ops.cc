// Random ops whose CPU kernel draws from the CPU's default generator without
// a Generator argument the fallback could replace (generator.h). On rbln they
// run CPU's algorithm on the device's tensors, so their draws come from the
// rbln generator and a restored rbln RNG state replays them.
//   native_dropout  F.dropout / nn.Dropout on rbln (at::dropout takes the
//                   fused path for PrivateUse1 tensors)
#include <ATen/ATen.h>
#include <torch/library.h>

#include <optional>
#include <tuple>

namespace rbln::torch_backend {
namespace {

// aten/src/ATen/native/Dropout.cpp's native_dropout_cpu, step for step: the
// mask's bernoulli_ reaches the rbln fallback with no generator, which draws
// from the device's default generator.
std::tuple<at::Tensor, at::Tensor> NativeDropout(const at::Tensor& input, double p,
                                                 std::optional<bool> train) {
  if (input.numel() == 0) {
    return std::make_tuple(input, at::empty_like(input, input.options()));
  }
  if (train.has_value() && !*train) {
    return std::make_tuple(input.clone(),
                           at::ones_like(input, input.options().dtype(at::kBool)));
  }
  const double p1m = 1. - p;
  // A probability of zero must not divide by zero.
  const double scale = p1m == 0 ? 0. : 1. / p1m;
  at::Tensor mask = at::empty_like(input, input.options().dtype(at::kBool));
  mask.bernoulli_(p1m);
  at::Tensor output = input.mul(mask).mul_(scale);
  return std::make_tuple(output, mask);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("native_dropout", TORCH_FN(NativeDropout));
}

}  // namespace
}  // namespace rbln::torch_backend
