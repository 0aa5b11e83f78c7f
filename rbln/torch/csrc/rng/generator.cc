#include "rbln/torch/csrc/rng/generator.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Tensor.h>

#include <mutex>
#include <optional>
#include <vector>

#include "rbln/torch/csrc/device_state.h"

namespace rbln::torch_backend {

RblnGeneratorImpl::RblnGeneratorImpl(c10::DeviceIndex device, uint64_t seed)
    : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, device),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      engine_(at::detail::createCPUGenerator(seed)) {}

// Kernels lock the engine's mutex while they draw; Python locks this
// generator's. Taking the engine's here too keeps a state read or write
// from racing a kernel on another thread.
void RblnGeneratorImpl::set_current_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(engine_mutex());
  engine_.set_current_seed(seed);
}

void RblnGeneratorImpl::set_offset(uint64_t offset) {
  std::lock_guard<std::mutex> lock(engine_mutex());
  engine_.set_offset(offset);
}

uint64_t RblnGeneratorImpl::get_offset() const {
  std::lock_guard<std::mutex> lock(engine_mutex());
  return engine_.get_offset();
}

uint64_t RblnGeneratorImpl::current_seed() const {
  std::lock_guard<std::mutex> lock(engine_mutex());
  return engine_.current_seed();
}

uint64_t RblnGeneratorImpl::seed() {
  std::lock_guard<std::mutex> lock(engine_mutex());
  return engine_.seed();
}

void RblnGeneratorImpl::set_state(const c10::TensorImpl& new_state) {
  std::lock_guard<std::mutex> lock(engine_mutex());
  engine_.unsafeGetGeneratorImpl()->set_state(new_state);
}

c10::intrusive_ptr<c10::TensorImpl> RblnGeneratorImpl::get_state() const {
  std::lock_guard<std::mutex> lock(engine_mutex());
  return engine_.unsafeGetGeneratorImpl()->get_state();
}

RblnGeneratorImpl* RblnGeneratorImpl::clone_impl() const {
  auto* copy = new RblnGeneratorImpl(device().index());
  std::lock_guard<std::mutex> lock(engine_mutex());
  copy->engine_ = engine_.clone();
  return copy;
}

const at::Generator& DefaultGenerator(c10::DeviceIndex device) {
  // Made for the planned device count at the first call; querying the count
  // commits nothing (SPEC A6).
  static const std::vector<at::Generator>* generators = [] {
    auto* v = new std::vector<at::Generator>();
    for (c10::DeviceIndex i = 0; i < DeviceCountNoThrow(); ++i) {
      v->push_back(at::make_generator<RblnGeneratorImpl>(i));
    }
    return v;
  }();
  const c10::DeviceIndex i = device < 0 ? CurrentDevice() : device;
  CheckDeviceIndex(i);
  TORCH_CHECK(i < static_cast<c10::DeviceIndex>(generators->size()),
              "rbln: no default generator for device ", i);
  return (*generators)[i];
}

at::Generator NewGenerator(c10::DeviceIndex device) {
  const c10::DeviceIndex i = device < 0 ? CurrentDevice() : device;
  CheckDeviceIndex(i);
  return at::make_generator<RblnGeneratorImpl>(i);
}

namespace {

bool IsGeneratorArgument(const c10::Argument& argument) {
  const c10::TypePtr& type = argument.type();
  if (type->kind() == c10::TypeKind::GeneratorType) return true;
  if (const auto optional = type->cast<c10::OptionalType>()) {
    return optional->getElementType()->kind() == c10::TypeKind::GeneratorType;
  }
  return false;
}

// The rbln device an op runs for: its first rbln tensor, else its rbln
// `device` argument (factories such as randperm), else none.
std::optional<c10::Device> OpDevice(const c10::IValue* args, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const c10::IValue& v = args[i];
    if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      if (t.defined() && t.device().is_privateuseone()) return t.device();
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList().vec()) {
        if (t.defined() && t.device().is_privateuseone()) return t.device();
      }
    } else if (v.isDevice() && v.toDevice().is_privateuseone()) {
      return v.toDevice();
    }
  }
  return std::nullopt;
}

const at::Generator& EngineOf(const at::Generator& generator) {
  return static_cast<RblnGeneratorImpl*>(generator.unsafeGetGeneratorImpl())->engine();
}

}  // namespace

void ReplaceDeviceGenerators(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const std::vector<c10::Argument>& arguments = op.schema().arguments();
  const size_t n = arguments.size();
  c10::IValue* args = stack->data() + (stack->size() - n);
  for (size_t i = 0; i < n; ++i) {
    if (!IsGeneratorArgument(arguments[i])) continue;
    c10::IValue& v = args[i];
    if (v.isGenerator()) {
      const at::Generator generator = v.toGenerator();
      if (generator.device().is_privateuseone()) v = EngineOf(generator);
    } else if (v.isNone()) {
      const std::optional<c10::Device> device = OpDevice(args, n);
      if (device) v = EngineOf(DefaultGenerator(device->index()));
    }
  }
}

}  // namespace rbln::torch_backend
