#include "rbln/core/env.h"

#include <cstdlib>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace rbln::env {
namespace {

absl::Status BadValue(absl::string_view name, absl::string_view value,
                      absl::string_view expected) {
  return absl::InvalidArgumentError(absl::StrFormat(
      "environment variable %s has invalid value '%s': expected %s", name,
      value, expected));
}

constexpr absl::string_view kByteSizeForm =
    "a positive byte count such as 1073741824, 64KiB, 16MiB or 2GiB";

}  // namespace

std::optional<std::string> GetRaw(absl::string_view name) {
  const char* value = std::getenv(std::string(name).c_str());
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text) {
  absl::string_view s = absl::StripAsciiWhitespace(text);
  size_t digits = 0;
  while (digits < s.size() && absl::ascii_isdigit(s[digits])) ++digits;
  if (digits == 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("'%s' is not %s", text, kByteSizeForm));
  }
  uint64_t number = 0;
  if (!absl::SimpleAtoi(s.substr(0, digits), &number)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("'%s' is too large", text));
  }
  std::string unit = absl::AsciiStrToLower(
      absl::StripAsciiWhitespace(s.substr(digits)));
  int shift = 0;
  if (unit.empty() || unit == "b") {
    shift = 0;
  } else if (unit == "k" || unit == "kb" || unit == "kib") {
    shift = 10;
  } else if (unit == "m" || unit == "mb" || unit == "mib") {
    shift = 20;
  } else if (unit == "g" || unit == "gb" || unit == "gib") {
    shift = 30;
  } else if (unit == "t" || unit == "tb" || unit == "tib") {
    shift = 40;
  } else {
    return absl::InvalidArgumentError(absl::StrFormat(
        "'%s' has unknown unit '%s'; expected %s", text, unit, kByteSizeForm));
  }
  if (number == 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("'%s' is zero; expected %s", text, kByteSizeForm));
  }
  if (shift > 0 && number > (std::numeric_limits<uint64_t>::max() >> shift)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("'%s' is too large", text));
  }
  return number << shift;
}

absl::StatusOr<bool> GetBool(absl::string_view name, bool default_value) {
  std::optional<std::string> raw = GetRaw(name);
  if (!raw) return default_value;
  std::string v = absl::AsciiStrToLower(absl::StripAsciiWhitespace(*raw));
  if (v == "1" || v == "on" || v == "true" || v == "yes") return true;
  if (v == "0" || v == "off" || v == "false" || v == "no") return false;
  return BadValue(name, *raw, "one of 1/0, ON/OFF, true/false, yes/no");
}

absl::StatusOr<int64_t> GetInt(absl::string_view name, int64_t default_value,
                               int64_t min_value, int64_t max_value) {
  std::optional<std::string> raw = GetRaw(name);
  if (!raw) return default_value;
  int64_t v = 0;
  if (!absl::SimpleAtoi(*raw, &v) || v < min_value || v > max_value) {
    return BadValue(name, *raw,
                    absl::StrFormat("an integer in [%d, %d]", min_value,
                                    max_value));
  }
  return v;
}

absl::StatusOr<uint64_t> GetByteSize(absl::string_view name,
                                     uint64_t default_value) {
  std::optional<std::string> raw = GetRaw(name);
  if (!raw) return default_value;
  absl::StatusOr<uint64_t> v = ParseByteSize(*raw);
  if (!v.ok()) return BadValue(name, *raw, kByteSizeForm);
  return v;
}

absl::StatusOr<std::string> GetChoice(
    absl::string_view name, absl::string_view default_value,
    absl::Span<const absl::string_view> choices) {
  std::optional<std::string> raw = GetRaw(name);
  if (!raw) return std::string(default_value);
  std::string v = absl::AsciiStrToLower(absl::StripAsciiWhitespace(*raw));
  for (absl::string_view choice : choices) {
    if (absl::AsciiStrToLower(choice) == v) return std::string(choice);
  }
  return BadValue(name, *raw,
                  absl::StrFormat("one of: %s", absl::StrJoin(choices, ", ")));
}

}  // namespace rbln::env
