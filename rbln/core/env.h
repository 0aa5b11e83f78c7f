// Typed parsing of environment variables.
//
// Every parser names the variable and the expected form in its error, so a
// user who mistypes `RBLN_SIM_MEMORY_PER_CHIPLET=16GB` learns what to write.
// Callers read each variable once (at first use of the runtime) and keep the
// parsed value; later changes to the environment are ignored.
#ifndef RBLN_CORE_ENV_H_
#define RBLN_CORE_ENV_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace rbln::env {

// The raw value, or nullopt when unset. An empty value counts as unset.
std::optional<std::string> GetRaw(absl::string_view name);

// Parses "123", "4096B", "64KiB", "16MiB", "2GiB", "1TiB" (also KB/MB/GB as
// binary units, case-insensitive). Rejects zero, negatives and overflow.
absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text);

// Accepts 1/0, on/off, true/false, yes/no (case-insensitive).
absl::StatusOr<bool> GetBool(absl::string_view name, bool default_value);

// An integer in [min_value, max_value].
absl::StatusOr<int64_t> GetInt(absl::string_view name, int64_t default_value,
                               int64_t min_value, int64_t max_value);

// A byte size, see ParseByteSize.
absl::StatusOr<uint64_t> GetByteSize(absl::string_view name,
                                     uint64_t default_value);

// One of `choices` (case-insensitive); returns the choice as spelled there.
absl::StatusOr<std::string> GetChoice(absl::string_view name,
                                      absl::string_view default_value,
                                      absl::Span<const absl::string_view> choices);

}  // namespace rbln::env

#endif  // RBLN_CORE_ENV_H_
