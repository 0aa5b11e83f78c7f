#include "rbln/runtime/dma_engine.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "rbln/core/status_macros.h"

namespace rbln::runtime {

DmaEngine::Direction DmaEngine::MakeDirection(absl::string_view name) {
  CounterRegistry& registry = CounterRegistry::Global();
  return {registry.Get(absl::StrCat("runtime/dma_", name, "_copies")),
          registry.Get(absl::StrCat("runtime/dma_", name, "_bytes"))};
}

void DmaEngine::Count(const Direction& d, uint64_t nbytes) {
  d.copies->Increment();
  d.bytes->Add(static_cast<int64_t>(nbytes));
}

DmaEngine::DmaEngine(const AddressSpace* address_space)
    : address_space_(address_space),
      h2d_(MakeDirection("h2d")),
      d2h_(MakeDirection("d2h")),
      d2d_(MakeDirection("d2d")) {}

absl::Status DmaEngine::HostToDevice(uintptr_t dst, const void* src,
                                     uint64_t nbytes) {
  if (nbytes == 0) return absl::OkStatus();
  RBLN_ASSIGN_OR_RETURN(void* to, address_space_->Translate(dst, nbytes));
  std::memcpy(to, src, nbytes);
  Count(h2d_, nbytes);
  return absl::OkStatus();
}

absl::Status DmaEngine::DeviceToHost(void* dst, uintptr_t src,
                                     uint64_t nbytes) {
  if (nbytes == 0) return absl::OkStatus();
  RBLN_ASSIGN_OR_RETURN(void* from, address_space_->Translate(src, nbytes));
  std::memcpy(dst, from, nbytes);
  Count(d2h_, nbytes);
  return absl::OkStatus();
}

absl::Status DmaEngine::DeviceToDevice(uintptr_t dst, uintptr_t src,
                                       uint64_t nbytes) {
  if (nbytes == 0) return absl::OkStatus();
  RBLN_ASSIGN_OR_RETURN(void* to, address_space_->Translate(dst, nbytes));
  RBLN_ASSIGN_OR_RETURN(void* from, address_space_->Translate(src, nbytes));
  std::memmove(to, from, nbytes);
  Count(d2d_, nbytes);
  return absl::OkStatus();
}

}  // namespace rbln::runtime
