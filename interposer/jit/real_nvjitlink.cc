#include "real_nvjitlink.h"

#include <dlfcn.h>
#include <link.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string_view>
#include <vector>

namespace phos::jit {
namespace {

constexpr const char* kLibraryFile = "libnvJitLink.so.13";

struct RealLibrary {
  void* handle = nullptr;
  std::string description;
};

std::string DirOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

bool SameFile(const struct stat& a, const struct stat& b) { return a.st_dev == b.st_dev && a.st_ino == b.st_ino; }

// Step 2's candidates, from the objects already loaded in the process.
std::vector<std::string> CandidatesNextToLoadedLibraries() {
  std::vector<std::string> paths;
  dl_iterate_phdr(
      [](struct dl_phdr_info* info, size_t, void* data) -> int {
        auto* out = static_cast<std::vector<std::string>*>(data);
        if (info->dlpi_name == nullptr || info->dlpi_name[0] != '/') return 0;
        const std::string path = info->dlpi_name;
        const std::string base = path.substr(path.rfind('/') + 1);
        for (std::string_view lib : {"libnvvm.so", "libnvrtc.so", "libcudart.so", "libcublas"}) {
          if (base.rfind(lib, 0) == 0) out->push_back(DirOf(path) + "/" + kLibraryFile);
        }
        for (std::string_view root : {"/site-packages/", "/dist-packages/"}) {
          const size_t at = path.find(root);
          if (at != std::string::npos)
            out->push_back(path.substr(0, at + root.size()) + "nvidia/cu13/lib/" + kLibraryFile);
        }
        return 0;
      },
      &paths);
  return paths;
}

std::vector<std::string> Candidates() {
  std::vector<std::string> c = CandidatesNextToLoadedLibraries();
  if (const char* ld = std::getenv("LD_LIBRARY_PATH"); ld != nullptr) {
    std::string_view rest = ld;
    while (!rest.empty()) {
      const size_t colon = rest.find(':');
      const std::string_view dir = rest.substr(0, colon);
      if (!dir.empty()) c.push_back(std::string(dir) + "/" + kLibraryFile);
      rest = colon == std::string_view::npos ? std::string_view() : rest.substr(colon + 1);
    }
  }
  for (const char* env : {"CUDA_HOME", "CUDA_PATH"}) {
    if (const char* root = std::getenv(env); root != nullptr && root[0] != '\0')
      c.push_back(std::string(root) + "/lib64/" + kLibraryFile);
  }
  c.push_back(std::string("/usr/local/cuda/lib64/") + kLibraryFile);
  return c;
}

RealLibrary Find() {
  RealLibrary r;
  struct stat self {};
  Dl_info info{};
  const bool know_self = dladdr(reinterpret_cast<void*>(&RealSymbol), &info) != 0 && info.dli_fname != nullptr &&
                         stat(info.dli_fname, &self) == 0;
  std::vector<std::string> candidates;
  if (const char* explicit_path = std::getenv("PHOS_NVJITLINK"); explicit_path != nullptr && explicit_path[0] != '\0') {
    candidates.push_back(explicit_path);
  } else {
    candidates = Candidates();
  }
  std::set<std::string> tried;
  std::string why;
  for (const std::string& path : candidates) {
    if (!tried.insert(path).second) continue;
    struct stat st {};
    if (stat(path.c_str(), &st) != 0) continue;
    if (know_self && SameFile(st, self)) continue;
    // RTLD_LOCAL: the real library's symbols must not interpose the shim's.
    r.handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (r.handle != nullptr) {
      r.description = path;
      return r;
    }
    const char* err = dlerror();
    why += "; " + path + ": " + (err ? err : "dlopen failed");
  }
  r.description = "not found (looked in " + std::to_string(tried.size()) + " places" + why +
                  "); set PHOS_NVJITLINK=/path/to/" + kLibraryFile;
  return r;
}

const RealLibrary& Real() {
  static const RealLibrary* real = new RealLibrary(Find());  // leaked: links may run during exit
  return *real;
}

}  // namespace

void* RealSymbol(const char* name) {
  const RealLibrary& r = Real();
  if (r.handle == nullptr) {
    LogOnce("the real " + std::string(kLibraryFile) + " was " + r.description);
    return nullptr;
  }
  void* sym = dlsym(r.handle, name);
  if (sym == nullptr) LogOnce(r.description + " has no " + name + " (an older nvJitLink than the program's)");
  return sym;
}

const std::string& RealLibraryDescription() { return Real().description; }

void LogOnce(const std::string& message) {
  static std::mutex mu;
  static std::set<std::string>* said = new std::set<std::string>();  // guarded by mu; leaked like Real()
  std::lock_guard<std::mutex> lock(mu);
  if (said->insert(message).second) std::fprintf(stderr, "phos: nvJitLink: %s\n", message.c_str());
}

}  // namespace phos::jit
