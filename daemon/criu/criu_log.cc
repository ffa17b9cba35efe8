#include "criu/criu_log.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace phos::criu {
namespace {

constexpr std::size_t kMaxLineChars = 300;
// Logs at level 4 reach megabytes on big trees; only the tail can hold the
// failure, so read at most this much from the end.
constexpr std::streamoff kMaxTailBytes = 256 * 1024;

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

bool Contains(std::string_view hay, std::string_view needle) {
  return hay.find(needle) != std::string_view::npos;
}

// CRIU's pr_err/pr_perror lines read "(00.012) Error (criu/x.c:12): ...";
// some subsystems say "error" or "failed" in a pr_warn/pr_info line.
bool IsErrorLine(std::string_view line) {
  return Contains(line, "Error") || Contains(line, "error") || Contains(line, "ERROR") ||
         Contains(line, "failed") || Contains(line, "Failed") || Contains(line, "FAILED");
}

std::string Cut(std::string_view line) {
  if (line.size() <= kMaxLineChars) return std::string(line);
  return std::string(line.substr(0, kMaxLineChars)) + "...";
}

}  // namespace

std::vector<std::string> CriuLogErrorLines(std::string_view log_text, std::size_t max_lines) {
  std::vector<std::string_view> lines;
  std::size_t pos = 0;
  while (pos < log_text.size()) {
    std::size_t end = log_text.find('\n', pos);
    if (end == std::string_view::npos) end = log_text.size();
    std::string_view line = Trim(log_text.substr(pos, end - pos));
    if (!line.empty()) lines.push_back(line);
    pos = end + 1;
  }
  std::vector<std::string> out;
  if (max_lines == 0) return out;
  for (auto it = lines.rbegin(); it != lines.rend() && out.size() < max_lines; ++it) {
    if (IsErrorLine(*it)) out.push_back(Cut(*it));
  }
  if (out.empty()) {
    std::size_t n = std::min<std::size_t>({3, max_lines, lines.size()});
    for (std::size_t i = 0; i < n; ++i) out.push_back(Cut(lines[lines.size() - 1 - i]));
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::string QuoteCriuLog(const std::string& log_path, std::size_t max_lines) {
  std::ifstream in(log_path, std::ios::binary);
  if (!in) {
    int err = errno;
    return "; no criu log at " + log_path + " (" + std::strerror(err) + ")";
  }
  in.seekg(0, std::ios::end);
  std::streamoff size = in.tellg();
  std::streamoff start = size > kMaxTailBytes ? size - kMaxTailBytes : 0;
  in.seekg(start);
  std::ostringstream buf;
  buf << in.rdbuf();
  std::string text = buf.str();
  if (start > 0) {
    // Drop the partial first line of the tail window.
    std::size_t nl = text.find('\n');
    text.erase(0, nl == std::string::npos ? text.size() : nl + 1);
  }
  std::vector<std::string> lines = CriuLogErrorLines(text, max_lines);
  if (lines.empty()) return "; criu log " + log_path + " is empty";
  std::string out = "; criu log " + log_path + ":";
  for (const std::string& l : lines) out += "\n  " + l;
  return out;
}

}  // namespace phos::criu
