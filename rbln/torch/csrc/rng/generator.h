// The rbln random number generators: one default generator per logical
// device (torch.rbln.default_generators, seeded by torch.manual_seed) and
// the ones torch.Generator(device="rbln") makes.
//
// Random ops run on the host: their CPU kernels draw from a CPU-algorithm
// engine (mt19937 plus the cached normal sample). So an rbln generator owns
// such an engine, its state is the CPU generator's (a 5056-byte ByteTensor,
// what get_rng_state() returns), and a seed gives the same numbers as a CPU
// generator with that seed. Before a random op's CPU kernel runs, the
// fallback hands it the engine of the op's rbln generator, or of the
// device's default generator when the op got none (ReplaceDeviceGenerators),
// so restoring an rbln state replays the op.
#ifndef RBLN_TORCH_CSRC_RNG_GENERATOR_H_
#define RBLN_TORCH_CSRC_RNG_GENERATOR_H_

#include <ATen/core/Generator.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/GeneratorImpl.h>

#include <mutex>

namespace rbln::torch_backend {

class RblnGeneratorImpl final : public c10::GeneratorImpl {
 public:
  explicit RblnGeneratorImpl(c10::DeviceIndex device,
                             uint64_t seed = c10::default_rng_seed_val);

  void set_current_seed(uint64_t seed) override;
  // The CPU engine has no offset (Philox's); both raise as on the CPU.
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;
  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

  // The CPU generator the host kernels draw from; shares this generator's
  // state (it *is* the state).
  const at::Generator& engine() const { return engine_; }

 private:
  RblnGeneratorImpl* clone_impl() const override;
  std::mutex& engine_mutex() const { return engine_.unsafeGetGeneratorImpl()->mutex_; }

  at::Generator engine_;
};

// The default generator of logical device `device` (-1: the current one).
const at::Generator& DefaultGenerator(c10::DeviceIndex device);
at::Generator NewGenerator(c10::DeviceIndex device);

// For an op about to run through a CPU kernel on behalf of rbln tensors:
// replaces each Generator argument on `stack` that is an rbln generator by
// its engine, and each absent one (None) by the engine of the default
// generator of the op's device (its first rbln tensor, else its rbln
// `device` argument). Ops without Generator arguments are left alone.
void ReplaceDeviceGenerators(const c10::OperatorHandle& op, torch::jit::Stack* stack);

}  // namespace rbln::torch_backend

#endif  // RBLN_TORCH_CSRC_RNG_GENERATOR_H_
