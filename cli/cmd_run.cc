// phos run [--lib PATH] [--] CMD ARGS...: run an unmodified CUDA program
// against phosd by preloading libphos.so (docs/interposer.md "libphos.so and
// phos run"). Programs that link the CUDA runtime statically (nvcc's
// default) cannot be interposed and are refused.
#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"

namespace phos::cli {
namespace {

bool IsExecutableFile(const std::string& p) {
  struct stat st {};
  return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(p.c_str(), X_OK) == 0;
}

std::string ResolveOnPath(const std::string& cmd) {
  if (cmd.find('/') != std::string::npos) return IsExecutableFile(cmd) ? cmd : "";
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string dir = dirs.substr(start, end - start);
    if (dir.empty()) dir = ".";
    std::string cand = dir + "/" + cmd;
    if (IsExecutableFile(cand)) return cand;
    start = end + 1;
  }
  return "";
}

std::string SelfDir() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "";
  std::string p(buf, n);
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? "." : p.substr(0, slash);
}

// What the ELF file says about how it uses the CUDA runtime.
struct CudartLinkage {
  bool is_elf = false;
  bool needs_shared_cudart = false;  // DT_NEEDED libcudart.so*
  bool defines_cudart = false;       // defines __cudaRegisterFatBinary / cudaMalloc / ...
  bool has_fatbin = false;           // a .nv_fatbin section
};

CudartLinkage InspectElf(const std::string& path) {
  CudartLinkage out;
  std::ifstream f(path, std::ios::binary);
  std::vector<char> data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (data.size() < sizeof(Elf64_Ehdr) || std::memcmp(data.data(), ELFMAG, SELFMAG) != 0 ||
      data[EI_CLASS] != ELFCLASS64)
    return out;
  out.is_elf = true;
  Elf64_Ehdr eh;
  std::memcpy(&eh, data.data(), sizeof eh);
  if (eh.e_shoff == 0 || eh.e_shentsize != sizeof(Elf64_Shdr) ||
      eh.e_shoff + uint64_t{eh.e_shnum} * sizeof(Elf64_Shdr) > data.size())
    return out;
  std::vector<Elf64_Shdr> sh(eh.e_shnum);
  std::memcpy(sh.data(), data.data() + eh.e_shoff, eh.e_shnum * sizeof(Elf64_Shdr));
  auto in_bounds = [&](const Elf64_Shdr& s) { return s.sh_offset + s.sh_size <= data.size(); };
  auto str_at = [&](const Elf64_Shdr& strtab, uint64_t off) -> std::string {
    if (!in_bounds(strtab) || off >= strtab.sh_size) return "";
    const char* b = data.data() + strtab.sh_offset + off;
    return std::string(b, strnlen(b, strtab.sh_size - off));
  };
  const Elf64_Shdr* shstr = eh.e_shstrndx < sh.size() ? &sh[eh.e_shstrndx] : nullptr;
  for (const auto& s : sh) {
    if (shstr && str_at(*shstr, s.sh_name) == ".nv_fatbin") out.has_fatbin = true;
    if (s.sh_link >= sh.size() || !in_bounds(s)) continue;
    const Elf64_Shdr& strtab = sh[s.sh_link];
    if (s.sh_type == SHT_DYNAMIC) {
      for (uint64_t o = 0; o + sizeof(Elf64_Dyn) <= s.sh_size; o += sizeof(Elf64_Dyn)) {
        Elf64_Dyn d;
        std::memcpy(&d, data.data() + s.sh_offset + o, sizeof d);
        if (d.d_tag == DT_NULL) break;
        if (d.d_tag == DT_NEEDED && str_at(strtab, d.d_un.d_val).rfind("libcudart.so", 0) == 0)
          out.needs_shared_cudart = true;
      }
    } else if (s.sh_type == SHT_SYMTAB || s.sh_type == SHT_DYNSYM) {
      for (uint64_t o = 0; o + sizeof(Elf64_Sym) <= s.sh_size; o += sizeof(Elf64_Sym)) {
        Elf64_Sym sym;
        std::memcpy(&sym, data.data() + s.sh_offset + o, sizeof sym);
        if (sym.st_shndx == SHN_UNDEF) continue;
        const std::string name = str_at(strtab, sym.st_name);
        if (name == "__cudaRegisterFatBinary" || name == "cudaMalloc" || name == "cudaLaunchKernel")
          out.defines_cudart = true;
      }
    }
  }
  return out;
}

// A directory holding `libcuda.so.1` and `libcuda.so` as symlinks to
// libphos.so, put first on LD_LIBRARY_PATH: a program that dlopen()s the
// driver and dlsym()s through that handle (Triton, PyTorch's lazy driver
// loading) gets phos's driver exports instead of the real driver — the
// loader sees the same file as the preloaded library and returns it. The
// directory is per user and per libphos.so (by inode), mode 0700, and its
// owner is checked so another user cannot plant a library in it.
std::string DriverShimDir(const std::string& lib, std::string* error) {
  struct stat lib_st {};
  if (stat(lib.c_str(), &lib_st) != 0) {
    *error = "cannot stat " + lib + ": " + std::strerror(errno);
    return "";
  }
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  std::string base = (runtime && runtime[0] == '/') ? std::string(runtime) : "/tmp";
  base += "/phos-" + std::to_string(getuid());
  const std::string dir = base + "/driver-shim-" + std::to_string(lib_st.st_dev) + "-" + std::to_string(lib_st.st_ino);
  for (const std::string& d : {base, dir}) {
    if (mkdir(d.c_str(), 0700) != 0 && errno != EEXIST) {
      *error = "cannot create " + d + ": " + std::strerror(errno);
      return "";
    }
    struct stat st {};
    if (lstat(d.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid() || (st.st_mode & 0077) != 0) {
      *error = d + " is not a private directory owned by uid " + std::to_string(getuid());
      return "";
    }
  }
  for (const char* name : {"libcuda.so.1", "libcuda.so"}) {
    const std::string link = dir + "/" + name;
    char target[4096];
    const ssize_t n = readlink(link.c_str(), target, sizeof target - 1);
    if (n > 0 && std::string(target, n) == lib) continue;
    unlink(link.c_str());
    if (symlink(lib.c_str(), link.c_str()) != 0 && errno != EEXIST) {
      *error = "cannot create " + link + ": " + std::strerror(errno);
      return "";
    }
  }
  return dir;
}

int RunProgram(const GlobalOptions& global, std::string lib, std::vector<std::string> args) {
  if (!args.empty() && args.front() == "--") args.erase(args.begin());
  if (args.empty()) {
    std::cerr << "phos run: no command given (usage: phos run [--lib PATH] [--] CMD ARGS...)\n";
    return 2;
  }
  const std::string path = ResolveOnPath(args.front());
  if (path.empty()) {
    std::cerr << "phos run: " << args.front() << ": command not found (not an executable file on PATH)\n";
    return 127;
  }
  const CudartLinkage link = InspectElf(path);
  if (link.is_elf && !link.needs_shared_cudart && (link.defines_cudart || link.has_fatbin)) {
    std::cerr << "phos run: " << path
              << " links the CUDA runtime statically (nvcc's default), so phos cannot interpose it; "
                 "rebuild it with `nvcc -cudart shared`\n";
    return 2;
  }
  if (lib.empty()) {
    if (const char* env = std::getenv("PHOS_LIB"); env != nullptr && env[0] != '\0') lib = env;
  }
  if (lib.empty()) {
    const std::string dir = SelfDir();
    for (const char* rel : {"/../interposer/client/libphos.so", "/../lib/libphos.so", "/../lib/phos/libphos.so",
                            "/libphos.so"}) {
      if (access((dir + rel).c_str(), R_OK) == 0) {
        char real[4096];
        lib = realpath((dir + rel).c_str(), real) ? std::string(real) : dir + rel;
        break;
      }
    }
  }
  if (lib.empty() || access(lib.c_str(), R_OK) != 0) {
    std::cerr << "phos run: libphos.so not found" << (lib.empty() ? "" : " at " + lib)
              << " (give it with --lib or $PHOS_LIB)\n";
    return 2;
  }
  if (char real[4096]; realpath(lib.c_str(), real) != nullptr) lib = real;  // the shim's symlinks need it absolute
  std::string preload = lib;
  if (const char* old = std::getenv("LD_PRELOAD"); old != nullptr && old[0] != '\0') preload += ":" + std::string(old);
  setenv("LD_PRELOAD", preload.c_str(), 1);
  std::string shim_error;
  const std::string shim = DriverShimDir(lib, &shim_error);
  if (shim.empty()) {
    std::cerr << "phos run: warning: no driver shim (" << shim_error
              << "); a program that dlopen()s libcuda.so.1 itself will not be interposed\n";
  } else {
    std::string path_list = shim;
    if (const char* old = std::getenv("LD_LIBRARY_PATH"); old != nullptr && old[0] != '\0')
      path_list += ":" + std::string(old);
    setenv("LD_LIBRARY_PATH", path_list.c_str(), 1);
  }
  setenv("PHOS_SOCKET", global.socket_path.c_str(), 1);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  execv(path.c_str(), argv.data());
  std::cerr << "phos run: exec " << path << ": " << std::strerror(errno) << "\n";
  return 126;
}

}  // namespace

void AddRunCommand(CLI::App* app, const GlobalOptions* global, int* exit_code) {
  auto lib = std::make_shared<std::string>();
  CLI::App* cmd = app->add_subcommand(
      "run",
      "Run a CUDA program on phosd: preloads libphos.so so the program's CUDA calls go to the daemon "
      "(which must be running). The program must be built with `nvcc -cudart shared`. Exits with the "
      "program's status.");
  cmd->add_option("--lib", *lib, "libphos.so to preload (default $PHOS_LIB, else the one installed with phos)");
  auto positional = std::make_shared<std::vector<std::string>>();
  cmd->add_option("command", *positional, "the program and its arguments (after `--` if they look like options)");
  cmd->prefix_command();
  cmd->fallthrough(false);  // the program and its arguments are not phos options
  cmd->callback([cmd, lib, positional, global, exit_code] {
    std::vector<std::string> args = *positional;
    for (auto& a : cmd->remaining()) args.push_back(a);
    *exit_code = RunProgram(*global, *lib, std::move(args));
  });
}

}  // namespace phos::cli
