#include "twin_test_util.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "ptx/ptx_emitter.h"

namespace phos::twin::test {

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

int RunPtxas(std::string_view ptxas, const std::string& ptx, const std::string& arch, std::string* diag) {
  char dir_tmpl[] = "/tmp/phos_twin_XXXXXX";
  char* dir = mkdtemp(dir_tmpl);
  if (dir == nullptr) return -1;
  const std::string in = std::string(dir) + "/twin.ptx";
  const std::string cubin = std::string(dir) + "/twin.cubin";
  const std::string err = std::string(dir) + "/ptxas.err";
  {
    std::ofstream f(in, std::ios::binary);
    f << ptx;
  }
  const std::string cmd = std::string(ptxas) + " -arch=" + arch + " -o " + cubin + " " + in + " 2> " + err;
  int rc = std::system(cmd.c_str());
  *diag = ReadFile(err);
  std::remove(in.c_str());
  std::remove(cubin.c_str());
  std::remove(err.c_str());
  rmdir(dir);
  if (rc == -1) return -1;
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

int CountInsertedChecks(const ptx::Function& f) {
  int n = 0;
  for (const auto& st : f.body) {
    const auto* in = std::get_if<ptx::Instruction>(&st);
    if (in == nullptr || in->info.op != ptx::Opcode::kAtom || in->operands.size() < 2) continue;
    const auto& a = in->operands[1];
    if (a.kind == ptx::Operand::Kind::kAddress && a.name == "%phos_report" && a.offset == kHeaderCountOffset) ++n;
  }
  return n;
}

int CountInsertedChecks(const ptx::Module& twin) {
  int n = 0;
  for (const auto& item : twin.items)
    if (const auto* f = std::get_if<ptx::Function>(&item)) n += CountInsertedChecks(*f);
  return n;
}

int ExpectedChecks(const ptx::Module& in, TwinMode mode) {
  int n = 0;
  for (const auto& item : in.items) {
    const auto* f = std::get_if<ptx::Function>(&item);
    if (f == nullptr || !f->has_body) continue;
    for (const auto& st : f->body) {
      const auto* ins = std::get_if<ptx::Instruction>(&st);
      if (ins == nullptr) continue;
      const auto op = ins->info.op;
      if (op == ptx::Opcode::kCp) {
        std::string full = ins->FullOpcode();
        if (full.find("async") == std::string::npos || full.find("tensor") != std::string::npos) continue;
        // cp.async.*.<dst>.<src>: the global side, if any.
        size_t s = full.find(".shared"), g = full.find(".global");
        if (g == std::string::npos || s == std::string::npos) continue;
        bool global_is_dst = g < s;
        if (global_is_dst || mode == TwinMode::kReadsAndWrites) ++n;
        continue;
      }
      bool write = op == ptx::Opcode::kSt || op == ptx::Opcode::kAtom || op == ptx::Opcode::kRed ||
                   (op == ptx::Opcode::kWmma && ins->HasMod("store"));
      bool read = op == ptx::Opcode::kLd || op == ptx::Opcode::kLdu || (op == ptx::Opcode::kWmma && ins->HasMod("load"));
      if (!write && !(read && mode == TwinMode::kReadsAndWrites)) continue;
      if (ins->info.space == ptx::Space::kGlobal) {
        ++n;
      } else if (ins->info.space == ptx::Space::kNone) {
        for (const auto& o : ins->operands) {
          if (o.kind != ptx::Operand::Kind::kAddress) continue;
          if (o.base_is_reg || o.name.empty()) {
            ++n;
          } else if (const auto* v = in.FindGlobal(o.name); v && v->space == ptx::Space::kGlobal) {
            ++n;
          }
          break;
        }
      }
    }
  }
  return n;
}

}  // namespace phos::twin::test
