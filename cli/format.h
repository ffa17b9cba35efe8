// Text formatting helpers for CLI output.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace phos::cli {

/// 1536 -> "1.5 KiB", 80 GiB -> "80.0 GiB".
std::string HumanBytes(std::uint64_t bytes);
/// A short duration in microseconds, in the unit a person reads it in:
/// 420 -> "0.42 ms", 5862271 -> "5.86 s", 12345 -> "12.3 ms".
std::string HumanMicros(std::uint64_t us);
/// 93784000 ms -> "1d 2h 3m 4s".
std::string HumanDuration(std::uint64_t ms);

/// A left-aligned text table: header row, then rows; columns sized to fit.
std::string FormatTable(const std::vector<std::string>& header,
                        const std::vector<std::vector<std::string>>& rows);

}  // namespace phos::cli
