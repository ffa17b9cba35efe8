// HostPid(): a test program's pid as phosd and the tests see it. Under
// `phos run` the program is pid 1 of its own pid namespace, but /proc is the
// host's, and /proc/self/status's NSpid line starts with the pid in /proc's
// namespace. Header-only, plain C library calls: included by the CUDA test
// programs (tests/integration/checkpoint_app.cu, tests/bench/process_cr_app.cu).
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

inline long HostPid() {
  FILE* f = std::fopen("/proc/self/status", "r");
  char line[256];
  long pid = getpid();
  while (f != nullptr && std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, "NSpid:", 6) == 0) {
      pid = std::strtol(line + 6, nullptr, 10);
      break;
    }
  }
  if (f != nullptr) std::fclose(f);
  return pid;
}
