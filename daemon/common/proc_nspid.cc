#include "common/proc_nspid.h"

#include <fstream>
#include <sstream>
#include <string>

namespace phos {

Status ReadNsPids(pid_t pid, std::vector<long>* ids) {
  ids->clear();
  const std::string path = "/proc/" + std::to_string(pid) + "/status";
  std::ifstream f(path);
  if (!f) return Status::NotFound("pid " + std::to_string(pid) + " does not exist (" + path + ")");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("NSpid:", 0) != 0) continue;
    std::istringstream in(line.substr(6));
    for (long v; in >> v;) ids->push_back(v);
    break;
  }
  return Status::Ok();
}

}  // namespace phos
