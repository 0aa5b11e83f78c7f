// The logical-device mapping (SPEC A2-A5): which physical NPUs the process
// sees and how they are grouped into the logical devices rbln:0, rbln:1, ...
//   RBLN_VISIBLE_DEVICES  physical NPU ids to expose, in order, e.g. "0,2,3"
//                         (RBLN_DEVICES is a deprecated alias)
//   RBLN_NPUS_PER_DEVICE  ATOM only: consecutive groups of k NPUs
//   RBLN_DEVICE_MAP       ATOM only: explicit groups, e.g. "[0,1],[2,3]";
//                         wins over RBLN_NPUS_PER_DEVICE
// Group variables hold indices into the visible list, not physical ids.
//
// Planning only reads variables; it occupies no NPU, so query APIs can call
// it freely (SPEC A6). Committing the plan is the runtime's business.
#ifndef RBLN_CORE_DEVICE_MAP_H_
#define RBLN_CORE_DEVICE_MAP_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "rbln/core/device_profile.h"

namespace rbln {

// Looks up an environment variable; nullopt when unset or empty. Injectable
// for tests.
using EnvLookup =
    std::function<std::optional<std::string>(absl::string_view)>;

// Reads the process environment (env::GetRaw).
EnvLookup ProcessEnv();

struct LogicalDevice {
  // Indices into DeviceMap::visible_npus: the ids device_summary() prints
  // (SPEC A3).
  std::vector<int> npus;
};

struct DeviceMap {
  // Physical NPU ids of the machine, in RBLN_VISIBLE_DEVICES order.
  std::vector<int> visible_npus;
  // rbln:0, rbln:1, ...
  std::vector<LogicalDevice> devices;
  // To print once: deprecated alias, unused NPUs, ignored variable.
  std::vector<std::string> warnings;

  int physical_device_count() const {
    return static_cast<int>(visible_npus.size());
  }

  // E.g. "rbln:0 -> NPU [0,1]; rbln:1 -> NPU [2,3]".
  std::string DebugString() const;
};

// Plans the mapping for `profile.num_npus` physical NPUs from the variables
// above. A malformed value, or a group variable on Rebel100, is an
// InvalidArgumentError naming the variable, the value and the expected form.
absl::StatusOr<DeviceMap> PlanDeviceMap(const DeviceProfile& profile,
                                        const EnvLookup& env = ProcessEnv());

inline constexpr char kEnvVisibleDevices[] = "RBLN_VISIBLE_DEVICES";
inline constexpr char kEnvDevicesDeprecated[] = "RBLN_DEVICES";
inline constexpr char kEnvNpusPerDevice[] = "RBLN_NPUS_PER_DEVICE";
inline constexpr char kEnvDeviceMap[] = "RBLN_DEVICE_MAP";

}  // namespace rbln

#endif  // RBLN_CORE_DEVICE_MAP_H_
