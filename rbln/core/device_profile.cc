#include "rbln/core/device_profile.h"

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "rbln/core/env.h"
#include "rbln/core/status_macros.h"

namespace rbln {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;
// Allocations are rounded to whole 4 KiB pages of device memory.
constexpr uint64_t kAllocationUnit = 4096;
// Up to 32 NPUs form one RSD group; more NPUs than that per host is unusual.
constexpr int64_t kMaxNpus = 64;

}  // namespace

DeviceProfile DeviceProfile::ForFamily(DeviceFamily family) {
  DeviceProfile p;
  p.family = family;
  p.allocation_unit = kAllocationUnit;
  p.num_npus = 1;
  // Both families sit on PCIe Gen5 x16 (64 GB/s raw, ~50 GB/s effective).
  p.host_dma_bytes_per_second = 50e9;
  switch (family) {
    case DeviceFamily::kRebel100:
      // A Rebel100 (RBLN-CR) card: 4 chiplets with 36 GiB HBM each.
      p.name = "rebel100";
      p.chiplets_per_npu = 4;
      p.memory_per_chiplet = 36 * kGiB;
      break;
    case DeviceFamily::kAtom:
      // An ATOM NPU: one compute unit with 16 GiB.
      p.name = "atom";
      p.chiplets_per_npu = 1;
      p.memory_per_chiplet = 16 * kGiB;
      break;
  }
  return p;
}

absl::StatusOr<DeviceProfile> DeviceProfile::FromEnvironment() {
  RBLN_ASSIGN_OR_RETURN(
      std::string family_name,
      env::GetChoice(kEnvSimProfile, "rebel100", {"rebel100", "atom"}));
  DeviceProfile p = ForFamily(family_name == "atom" ? DeviceFamily::kAtom
                                                    : DeviceFamily::kRebel100);
  RBLN_ASSIGN_OR_RETURN(p.num_npus, env::GetInt(kEnvSimNpus, 1, 1, kMaxNpus));
  RBLN_ASSIGN_OR_RETURN(
      p.memory_per_chiplet,
      env::GetByteSize(kEnvSimMemoryPerChiplet, p.memory_per_chiplet));
  if (p.memory_per_chiplet % p.allocation_unit != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "environment variable %s has invalid value %d: expected a multiple of "
        "the allocation unit (%d bytes)",
        kEnvSimMemoryPerChiplet, p.memory_per_chiplet, p.allocation_unit));
  }
  return p;
}

std::string DeviceProfile::DebugString() const {
  return absl::StrFormat(
      "%s: %d NPU(s) x %d chiplet(s) x %d bytes (allocation unit %d)", name,
      num_npus, chiplets_per_npu, memory_per_chiplet, allocation_unit);
}

}  // namespace rbln
