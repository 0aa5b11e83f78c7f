#include "rbln/core/device_map.h"

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "rbln/core/env.h"
#include "rbln/core/status_macros.h"

namespace rbln {
namespace {

// RSD group sizes the hardware supports (SPEC A2).
constexpr int kGroupSizes[] = {1, 2, 4, 8, 16, 32};
constexpr absl::string_view kGroupSizesText = "1, 2, 4, 8, 16 or 32";
constexpr absl::string_view kDeviceMapForm =
    "groups of NPU indices such as [0,1],[2,3]";

// Same wording as env.cc, plus what exactly is wrong.
absl::Status BadValue(absl::string_view name, absl::string_view value,
                      absl::string_view problem, absl::string_view expected) {
  return absl::InvalidArgumentError(absl::StrFormat(
      "environment variable %s has invalid value '%s': %s; expected %s", name,
      value, problem, expected));
}

// Treats an empty value as unset even if an injected lookup returns one.
std::optional<std::string> Lookup(const EnvLookup& env,
                                  absl::string_view name) {
  std::optional<std::string> value = env(name);
  if (value.has_value() && value->empty()) return std::nullopt;
  return value;
}

bool IsGroupSize(int n) {
  return std::find(std::begin(kGroupSizes), std::end(kGroupSizes), n) !=
         std::end(kGroupSizes);
}

bool AllDigits(absl::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return absl::ascii_isdigit(static_cast<unsigned char>(c));
  });
}

// "NPU 4, 5", plus the physical ids when RBLN_VISIBLE_DEVICES renumbered them,
// because rbln-smi shows physical ids.
std::string DescribeNpus(const std::vector<int>& indices,
                         const std::vector<int>& visible) {
  std::string text = absl::StrCat("NPU ", absl::StrJoin(indices, ", "));
  std::vector<int> physical;
  bool renumbered = false;
  for (int i : indices) {
    physical.push_back(visible[i]);
    renumbered |= visible[i] != i;
  }
  if (renumbered) {
    absl::StrAppend(&text, " (physical ", absl::StrJoin(physical, ", "), ")");
  }
  return text;
}

// Visible indices that belong to no logical device.
std::vector<int> UnusedNpus(const std::vector<LogicalDevice>& devices,
                            int visible_count) {
  std::vector<bool> used(visible_count, false);
  for (const LogicalDevice& d : devices) {
    for (int i : d.npus) used[i] = true;
  }
  std::vector<int> unused;
  for (int i = 0; i < visible_count; ++i) {
    if (!used[i]) unused.push_back(i);
  }
  return unused;
}

// Parses "0,2,3" (physical ids, whitespace allowed) for `name`.
absl::StatusOr<std::vector<int>> ParseVisible(absl::string_view name,
                                              absl::string_view value,
                                              int num_npus) {
  const std::string expected = absl::StrFormat(
      "comma-separated physical NPU ids in [0, %d] such as 0,2,3, each at "
      "most once",
      num_npus - 1);
  std::vector<int> ids;
  std::vector<bool> seen(num_npus, false);
  for (absl::string_view item : absl::StrSplit(value, ',')) {
    absl::string_view text = absl::StripAsciiWhitespace(item);
    if (text.empty()) return BadValue(name, value, "empty entry", expected);
    if (!AllDigits(text)) {
      return BadValue(name, value,
                      absl::StrFormat("'%s' is not an NPU id", text), expected);
    }
    int id = 0;
    if (!absl::SimpleAtoi(text, &id) || id >= num_npus) {
      return BadValue(
          name, value,
          absl::StrFormat("NPU %s does not exist (the machine has %d NPU%s)",
                          text, num_npus, num_npus == 1 ? "" : "s"),
          expected);
    }
    if (seen[id]) {
      return BadValue(name, value,
                      absl::StrFormat("NPU %d is listed twice", id), expected);
    }
    seen[id] = true;
    ids.push_back(id);
  }
  return ids;
}

// Recursive-descent parser for RBLN_DEVICE_MAP's syntax:
//   groups := group (',' group)*      group := '[' [index (',' index)*] ']'
// with whitespace between tokens. Errors carry only the problem; the caller
// adds the variable, value and expected form. Semantics (range, sizes,
// overlap) are checked by the caller.
class GroupParser {
 public:
  explicit GroupParser(absl::string_view text) : text_(text) {}

  absl::StatusOr<std::vector<std::vector<int>>> Parse() {
    std::vector<std::vector<int>> groups;
    do {
      RBLN_ASSIGN_OR_RETURN(std::vector<int> group, ParseGroup());
      groups.push_back(std::move(group));
    } while (Consume(','));
    SkipSpace();
    if (pos_ != text_.size()) return Unexpected("',' or the end");
    return groups;
  }

 private:
  absl::StatusOr<std::vector<int>> ParseGroup() {
    if (!Consume('[')) return Unexpected("'['");
    std::vector<int> group;
    if (Consume(']')) return group;  // Empty; rejected later by its size.
    do {
      RBLN_ASSIGN_OR_RETURN(int index, ParseIndex());
      group.push_back(index);
    } while (Consume(','));
    if (!Consume(']')) return Unexpected("',' or ']'");
    return group;
  }

  absl::StatusOr<int> ParseIndex() {
    SkipSpace();
    size_t end = pos_;
    while (end < text_.size() &&
           absl::ascii_isdigit(static_cast<unsigned char>(text_[end]))) {
      ++end;
    }
    if (end == pos_) return Unexpected("an NPU index");
    absl::string_view digits = text_.substr(pos_, end - pos_);
    int index = 0;
    if (!absl::SimpleAtoi(digits, &index)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("NPU index %s is too large", digits));
    }
    pos_ = end;
    return index;
  }

  void SkipSpace() {
    while (pos_ < text_.size() &&
           absl::ascii_isspace(static_cast<unsigned char>(text_[pos_]))) {
      ++pos_;
    }
  }

  bool Consume(char c) {
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  absl::Status Unexpected(absl::string_view wanted) const {
    if (pos_ >= text_.size()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("the value ends where %s should be", wanted));
    }
    // 1-based, as a user counts characters.
    return absl::InvalidArgumentError(
        absl::StrFormat("character %d is '%c' where %s should be", pos_ + 1,
                        text_[pos_], wanted));
  }

  absl::string_view text_;
  size_t pos_ = 0;
};

absl::StatusOr<std::vector<LogicalDevice>> ParseDeviceMap(
    absl::string_view value, int visible_count) {
  absl::StatusOr<std::vector<std::vector<int>>> groups =
      GroupParser(value).Parse();
  if (!groups.ok()) {
    return BadValue(kEnvDeviceMap, value, groups.status().message(),
                    kDeviceMapForm);
  }
  const std::string expected = absl::StrFormat(
      "%s, using indices in [0, %d] into the %d visible NPU%s, each index in "
      "at most one group, %s NPUs per group",
      kDeviceMapForm, visible_count - 1, visible_count,
      visible_count == 1 ? "" : "s", kGroupSizesText);
  std::vector<int> owner(visible_count, -1);  // Group holding each index.
  std::vector<LogicalDevice> devices;
  for (size_t g = 0; g < groups->size(); ++g) {
    std::vector<int>& group = (*groups)[g];
    if (!IsGroupSize(static_cast<int>(group.size()))) {
      return BadValue(
          kEnvDeviceMap, value,
          absl::StrFormat("group %d [%s] has %d NPUs", g,
                          absl::StrJoin(group, ","), group.size()),
          expected);
    }
    for (int index : group) {
      if (index >= visible_count) {
        return BadValue(
            kEnvDeviceMap, value,
            absl::StrFormat("NPU index %d is out of range (%d NPU%s visible)",
                            index, visible_count,
                            visible_count == 1 ? " is" : "s are"),
            expected);
      }
      if (owner[index] != -1) {
        return BadValue(
            kEnvDeviceMap, value,
            owner[index] == static_cast<int>(g)
                ? absl::StrFormat("NPU index %d appears twice in group %d",
                                  index, g)
                : absl::StrFormat("NPU index %d is in group %d and group %d",
                                  index, owner[index], g),
            expected);
      }
      owner[index] = static_cast<int>(g);
    }
    devices.push_back(LogicalDevice{std::move(group)});
  }
  return devices;
}

absl::StatusOr<int> ParseNpusPerDevice(absl::string_view value,
                                       int visible_count) {
  absl::string_view text = absl::StripAsciiWhitespace(value);
  const std::string expected =
      absl::StrFormat("one of %s (NPUs per logical device)", kGroupSizesText);
  int k = 0;
  if (!AllDigits(text) || !absl::SimpleAtoi(text, &k)) {
    return BadValue(kEnvNpusPerDevice, value, "not a number", expected);
  }
  if (!IsGroupSize(k)) {
    return BadValue(kEnvNpusPerDevice, value,
                    "not a supported RSD group size", expected);
  }
  if (k > visible_count) {
    return BadValue(
        kEnvNpusPerDevice, value,
        absl::StrFormat("only %d NPU%s visible", visible_count,
                        visible_count == 1 ? " is" : "s are"),
        absl::StrFormat("at most %d, or make more NPUs visible (%s, %s)",
                        visible_count, kEnvVisibleDevices, kEnvSimNpus));
  }
  return k;
}

// Rebel100's RSD-4 group is inside the card, so there is nothing to group:
// a set group variable is a misunderstanding we report rather than ignore
// (SPEC A4).
absl::Status RejectGroupVariables(const DeviceProfile& profile,
                                  const EnvLookup& env) {
  std::vector<std::string> set;
  std::string first_value;
  for (absl::string_view name : {kEnvDeviceMap, kEnvNpusPerDevice}) {
    std::optional<std::string> value = Lookup(env, name);
    if (!value.has_value()) continue;
    if (set.empty()) first_value = *value;
    set.emplace_back(name);
  }
  if (set.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "environment variable %s is set to '%s', but the %s profile has no "
      "configurable NPU groups: each Rebel100 card is a fixed RSD-%d group of "
      "its %d chiplets, so a logical device is always one card. Unset %s; to "
      "run across several cards use torch.distributed with the rbln-ccl "
      "backend (one card per process)",
      set.front(), first_value, profile.name, profile.chiplets_per_npu,
      profile.chiplets_per_npu, absl::StrJoin(set, " and ")));
}

}  // namespace

EnvLookup ProcessEnv() {
  return [](absl::string_view name) { return env::GetRaw(name); };
}

std::string DeviceMap::DebugString() const {
  std::vector<std::string> parts;
  for (size_t i = 0; i < devices.size(); ++i) {
    parts.push_back(absl::StrFormat("rbln:%d -> NPU [%s]", i,
                                    absl::StrJoin(devices[i].npus, ",")));
  }
  return absl::StrJoin(parts, "; ");
}

absl::StatusOr<DeviceMap> PlanDeviceMap(const DeviceProfile& profile,
                                        const EnvLookup& env) {
  if (profile.num_npus < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "device profile '%s' has %d NPUs; expected at least 1", profile.name,
        profile.num_npus));
  }
  DeviceMap map;

  // Visible NPUs. The deprecated alias still works so old launch scripts keep
  // running, but it never overrides the new name.
  std::optional<std::string> visible = Lookup(env, kEnvVisibleDevices);
  std::optional<std::string> deprecated = Lookup(env, kEnvDevicesDeprecated);
  absl::string_view visible_name = kEnvVisibleDevices;
  if (deprecated.has_value()) {
    if (visible.has_value()) {
      map.warnings.push_back(absl::StrFormat(
          "%s='%s' is ignored because %s is set; %s is deprecated, unset it",
          kEnvDevicesDeprecated, *deprecated, kEnvVisibleDevices,
          kEnvDevicesDeprecated));
    } else {
      map.warnings.push_back(
          absl::StrFormat("%s is deprecated; use %s instead",
                          kEnvDevicesDeprecated, kEnvVisibleDevices));
      visible = std::move(deprecated);
      visible_name = kEnvDevicesDeprecated;
    }
  }
  if (visible.has_value()) {
    RBLN_ASSIGN_OR_RETURN(
        map.visible_npus,
        ParseVisible(visible_name, *visible, profile.num_npus));
  } else {
    for (int i = 0; i < profile.num_npus; ++i) map.visible_npus.push_back(i);
  }
  const int visible_count = map.physical_device_count();

  // Logical devices.
  if (profile.family == DeviceFamily::kRebel100) {
    RBLN_RETURN_IF_ERROR(RejectGroupVariables(profile, env));
  }
  std::optional<std::string> device_map = Lookup(env, kEnvDeviceMap);
  std::optional<std::string> npus_per_device = Lookup(env, kEnvNpusPerDevice);
  if (device_map.has_value()) {
    if (npus_per_device.has_value()) {
      map.warnings.push_back(absl::StrFormat(
          "%s='%s' is ignored because %s is set (it takes precedence)",
          kEnvNpusPerDevice, *npus_per_device, kEnvDeviceMap));
    }
    RBLN_ASSIGN_OR_RETURN(map.devices,
                          ParseDeviceMap(*device_map, visible_count));
  } else {
    int k = 1;
    if (npus_per_device.has_value()) {
      RBLN_ASSIGN_OR_RETURN(
          k, ParseNpusPerDevice(*npus_per_device, visible_count));
    }
    for (int first = 0; first + k <= visible_count; first += k) {
      LogicalDevice device;
      for (int i = first; i < first + k; ++i) device.npus.push_back(i);
      map.devices.push_back(std::move(device));
    }
  }

  std::vector<int> unused = UnusedNpus(map.devices, visible_count);
  if (!unused.empty()) {
    absl::string_view source = device_map.has_value()
                                   ? absl::string_view(kEnvDeviceMap)
                                   : absl::string_view(kEnvNpusPerDevice);
    map.warnings.push_back(absl::StrFormat(
        "%s='%s' leaves %s of the %d visible NPU%s in no logical device; "
        "%s unused",
        source, device_map.has_value() ? *device_map : *npus_per_device,
        DescribeNpus(unused, map.visible_npus), visible_count,
        visible_count == 1 ? "" : "s",
        unused.size() == 1 ? "it stays" : "they stay"));
  }
  return map;
}

}  // namespace rbln
