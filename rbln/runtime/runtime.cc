#include "rbln/runtime/runtime.h"

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "rbln/core/env.h"
#include "rbln/core/status_macros.h"

namespace rbln::runtime {

absl::StatusOr<Runtime*> Runtime::Get() {
  static const auto* const runtime =
      new absl::StatusOr<std::unique_ptr<Runtime>>([] {
        absl::StatusOr<DeviceProfile> profile = DeviceProfile::FromEnvironment();
        if (!profile.ok()) {
          return absl::StatusOr<std::unique_ptr<Runtime>>(profile.status());
        }
        absl::StatusOr<RuntimeOptions> options = OptionsFromEnvironment();
        if (!options.ok()) {
          return absl::StatusOr<std::unique_ptr<Runtime>>(options.status());
        }
        return Create(*profile, *options);
      }());
  if (!runtime->ok()) return runtime->status();
  return runtime->value().get();
}

absl::StatusOr<RuntimeOptions> Runtime::OptionsFromEnvironment() {
  RuntimeOptions options;
  RBLN_ASSIGN_OR_RETURN(options.eager_malloc,
                        env::GetBool("TORCH_RBLN_EAGER_MALLOC", false));
  return options;
}

absl::StatusOr<std::unique_ptr<Runtime>> Runtime::Create(
    const DeviceProfile& profile, RuntimeOptions options) {
  std::vector<Npu> npus(profile.num_npus);
  for (int i = 0; i < profile.num_npus; ++i) {
    RBLN_ASSIGN_OR_RETURN(
        npus[i].memory,
        DeviceMemory::Create(i, profile.chiplets_per_npu,
                             profile.memory_per_chiplet));
    for (int c = 0; c < profile.chiplets_per_npu; ++c) {
      npus[i].chiplets.push_back(std::make_unique<ChipletHeap>(
          profile.memory_per_chiplet, profile.allocation_unit));
    }
  }
  return std::unique_ptr<Runtime>(
      new Runtime(profile, options, std::move(npus)));
}

std::vector<const DeviceMemory*> Runtime::Memories(const std::vector<Npu>& npus) {
  std::vector<const DeviceMemory*> out;
  for (const Npu& npu : npus) out.push_back(npu.memory.get());
  return out;
}

// Virtual addresses per NPU: room for its memory several times over, so
// fragmentation of the virtual range never limits what physical memory allows.
constexpr uint64_t kVirtualRangeFactor = 4;

Runtime::Runtime(const DeviceProfile& profile, RuntimeOptions options,
                 std::vector<Npu> npus)
    : profile_(profile),
      npus_(std::move(npus)),
      address_space_(Memories(npus_)),
      dma_(&address_space_),
      storage_(profile.num_npus, kVirtualRangeFactor * profile.memory_per_npu(),
               this, &dma_, options.eager_malloc),
      executor_(&storage_) {}

absl::Status Runtime::CheckNpuIndex(int npu) const {
  if (npu < 0 || npu >= num_npus()) {
    return absl::OutOfRangeError(absl::StrFormat(
        "rbln: NPU index %d is out of range: this process has %d NPU(s) "
        "(valid: 0..%d)",
        npu, num_npus(), num_npus() - 1));
  }
  return absl::OkStatus();
}

absl::StatusOr<DeviceAllocation> Runtime::AllocatePhysical(int npu,
                                                           uint64_t nbytes) {
  RBLN_RETURN_IF_ERROR(CheckNpuIndex(npu));
  const Npu& n = npus_[npu];
  int best = 0;
  uint64_t best_free = 0;
  for (int c = 0; c < static_cast<int>(n.chiplets.size()); ++c) {
    const uint64_t free = n.chiplets[c]->free_bytes();
    if (free > best_free) {
      best = c;
      best_free = free;
    }
  }
  absl::StatusOr<uint64_t> offset = n.chiplets[best]->Allocate(nbytes);
  if (!offset.ok()) {
    uint64_t npu_free = 0;
    for (const auto& heap : n.chiplets) npu_free += heap->free_bytes();
    return absl::ResourceExhaustedError(absl::StrFormat(
        "rbln: out of device memory on NPU %d chiplet %d: tried to allocate "
        "%d bytes; chiplet %d has %d bytes free (largest block %d) of %d; "
        "the NPU's %d chiplet(s) have %d bytes free in total",
        npu, best, nbytes, best, best_free, n.chiplets[best]->largest_free_block(),
        profile_.memory_per_chiplet, n.chiplets.size(), npu_free));
  }
  DeviceAllocation a;
  a.npu = npu;
  a.chiplet = best;
  a.address = n.memory->chiplet_base(best) + *offset;
  a.size = n.chiplets[best]->BlockSize(*offset);
  return a;
}

absl::Status Runtime::FreePhysical(const DeviceAllocation& block) {
  RBLN_ASSIGN_OR_RETURN(const DeviceMemory* memory,
                        address_space_.Owner(block.address, 1));
  const int chiplet = memory->ChipletOf(block.address);
  const Npu& n = npus_[memory->npu_index()];
  return n.chiplets[chiplet]->Free(block.address - memory->chiplet_base(chiplet));
}

absl::StatusOr<void*> Runtime::HostView(const DeviceAllocation& block) {
  return address_space_.Translate(block.address, block.size);
}

uint64_t Runtime::UsedBytes(int npu, int chiplet) const {
  return npus_[npu].chiplets[chiplet]->used_bytes();
}

uint64_t Runtime::FreeBytes(int npu, int chiplet) const {
  return npus_[npu].chiplets[chiplet]->free_bytes();
}

}  // namespace rbln::runtime
