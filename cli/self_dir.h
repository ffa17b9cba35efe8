// The directory of the running `phos` binary: what it finds next to
// itself (libphos.so for `phos run`, phosd for `phos daemon`) is found
// from there, in the build tree and in an installation alike.
#pragma once

#include <unistd.h>

#include <string>

namespace phos::cli {

/// "" when /proc/self/exe cannot be read.
inline std::string SelfDir() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "";
  std::string p(buf, static_cast<size_t>(n));
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? "." : p.substr(0, slash);
}

}  // namespace phos::cli
