// Quoting CRIU's log in phos errors. CRIU writes its log into the images
// directory; when an operation fails, the Status quotes the error lines at
// the end of that log and names the file, so the user needs no second look
// to know why (docs/criu.md "Logs").
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace phos::criu {

/// The last `max_lines` lines of `log_text` that report an error (CRIU's
/// "Error (file:line): ..." lines, and lines saying "error"/"failed"), in
/// log order. When no line matches, the last min(3, max_lines) non-empty
/// lines instead. Each line is trimmed and cut to 300 characters.
std::vector<std::string> CriuLogErrorLines(std::string_view log_text, std::size_t max_lines);

/// "; criu log LOG_PATH:\n  line\n  line" from the log at `log_path`, or
/// "; no criu log at LOG_PATH (...)" when it cannot be read.
std::string QuoteCriuLog(const std::string& log_path, std::size_t max_lines = 10);

}  // namespace phos::criu
