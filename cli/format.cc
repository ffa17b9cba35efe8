#include "cli/format.h"

#include <algorithm>
#include <cstdio>

namespace phos::cli {

std::string HumanBytes(std::uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int unit = 0;
  while (v >= 1024.0 && unit < 5) {
    v /= 1024.0;
    ++unit;
  }
  char buf[32];
  if (unit == 0) std::snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(bytes));
  else std::snprintf(buf, sizeof(buf), "%.1f %s", v, kUnits[unit]);
  return buf;
}

std::string HumanMicros(std::uint64_t us) {
  char buf[32];
  const double ms = static_cast<double>(us) / 1000.0;
  if (ms >= 1000.0) std::snprintf(buf, sizeof(buf), "%.2f s", ms / 1000.0);
  else if (ms >= 10.0) std::snprintf(buf, sizeof(buf), "%.1f ms", ms);
  else std::snprintf(buf, sizeof(buf), "%.2f ms", ms);
  return buf;
}

std::string HumanDuration(std::uint64_t ms) {
  std::uint64_t s = ms / 1000;
  std::uint64_t d = s / 86400, h = (s / 3600) % 24, m = (s / 60) % 60, sec = s % 60;
  std::string out;
  if (d) out += std::to_string(d) + "d ";
  if (d || h) out += std::to_string(h) + "h ";
  if (d || h || m) out += std::to_string(m) + "m ";
  out += std::to_string(sec) + "s";
  return out;
}

std::string FormatTable(const std::vector<std::string>& header,
                        const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> width(header.size());
  for (std::size_t i = 0; i < header.size(); ++i) width[i] = header[i].size();
  for (const auto& row : rows) {
    for (std::size_t i = 0; i < row.size() && i < width.size(); ++i) {
      width[i] = std::max(width[i], row[i].size());
    }
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out;
    for (std::size_t i = 0; i < width.size(); ++i) {
      std::string cell = i < cells.size() ? cells[i] : "";
      out += cell;
      if (i + 1 < width.size()) out += std::string(width[i] - cell.size() + 2, ' ');
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    return out + "\n";
  };
  std::string out = line(header);
  for (const auto& row : rows) out += line(row);
  return out;
}

}  // namespace phos::cli
