#include "common/proc_stat.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

namespace phos {

bool ReadProcStat(pid_t pid, ProcStat* out) {
  if (pid <= 0) return false;
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return false;
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so
  // the fields start after the LAST ')'.
  const size_t paren = line.rfind(')');
  if (paren == std::string::npos || paren + 2 >= line.size()) return false;
  std::istringstream rest(line.substr(paren + 2));
  // Fields 3.. (proc(5)): state ppid pgrp session tty_nr tpgid flags minflt
  // cminflt majflt cmajflt utime stime cutime cstime priority nice
  // num_threads itrealvalue starttime.
  std::string field;
  ProcStat st;
  for (int i = 3; i <= 22 && rest >> field; ++i) {
    if (i == 3) st.state = field.empty() ? '\0' : field[0];
    if (i == 4) st.parent = static_cast<pid_t>(std::strtol(field.c_str(), nullptr, 10));
    if (i == 22) st.start_ticks = std::strtoull(field.c_str(), nullptr, 10);
  }
  if (st.state == '\0') return false;
  *out = st;
  return true;
}

bool ProcessRunning(pid_t pid) {
  ProcStat st;
  return ReadProcStat(pid, &st) && st.running();
}

}  // namespace phos
