// The simulated hardware: which NPU family, how many NPUs, how their memory is
// split into chiplets. Chosen by environment (SPEC A9):
//   RBLN_SIM_PROFILE            rebel100 (default; 4 chiplets per card) | atom
//   RBLN_SIM_NPUS               number of physical NPUs (default 1)
//   RBLN_SIM_MEMORY_PER_CHIPLET bytes, e.g. 64MiB (default: the family's)
#ifndef RBLN_CORE_DEVICE_PROFILE_H_
#define RBLN_CORE_DEVICE_PROFILE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace rbln {

enum class DeviceFamily { kRebel100, kAtom };

struct DeviceProfile {
  DeviceFamily family = DeviceFamily::kRebel100;
  std::string name;             // "rebel100" or "atom".
  int num_npus = 1;             // Physical NPUs in the machine.
  int chiplets_per_npu = 4;     // 4 on rebel100 (fixed RSD-4), 1 on atom.
  uint64_t memory_per_chiplet = 0;
  uint64_t allocation_unit = 0;  // Every device allocation is a multiple.
  // Host link DMA rate: asynchronous host<->device transfers take at least
  // bytes / rate on their stream (SPEC A9, M4). PCIe Gen5 x16, effective.
  double host_dma_bytes_per_second = 0;

  uint64_t memory_per_npu() const {
    return memory_per_chiplet * static_cast<uint64_t>(chiplets_per_npu);
  }

  // The family's defaults: a realistic card.
  static DeviceProfile ForFamily(DeviceFamily family);

  // Reads RBLN_SIM_PROFILE, RBLN_SIM_NPUS, RBLN_SIM_MEMORY_PER_CHIPLET. A bad
  // value is an InvalidArgumentError naming the variable and the expected form.
  static absl::StatusOr<DeviceProfile> FromEnvironment();

  std::string DebugString() const;
};

inline constexpr char kEnvSimProfile[] = "RBLN_SIM_PROFILE";
inline constexpr char kEnvSimNpus[] = "RBLN_SIM_NPUS";
inline constexpr char kEnvSimMemoryPerChiplet[] = "RBLN_SIM_MEMORY_PER_CHIPLET";

}  // namespace rbln

#endif  // RBLN_CORE_DEVICE_PROFILE_H_
