#include "real_library.h"

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

std::string DirOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

bool SameFile(const struct stat& a, const struct stat& b) { return a.st_dev == b.st_dev && a.st_ino == b.st_ino; }

struct Search {
  const char* file;
  std::vector<std::string>* out;
};

// Step 2's candidates, from the objects already loaded in the process.
std::vector<std::string> CandidatesNextToLoadedLibraries(const char* file) {
  std::vector<std::string> paths;
  Search search{file, &paths};
  dl_iterate_phdr(
      [](struct dl_phdr_info* info, size_t, void* data) -> int {
        auto* s = static_cast<Search*>(data);
        if (info->dlpi_name == nullptr || info->dlpi_name[0] != '/') return 0;
        const std::string path = info->dlpi_name;
        const std::string base = path.substr(path.rfind('/') + 1);
        for (std::string_view lib : {"libnvvm.so", "libnvrtc.so", "libnvJitLink.so", "libcudart.so", "libcublas"}) {
          if (base.rfind(lib, 0) == 0) s->out->push_back(DirOf(path) + "/" + s->file);
        }
        for (std::string_view root : {"/site-packages/", "/dist-packages/"}) {
          const size_t at = path.find(root);
          if (at != std::string::npos)
            s->out->push_back(path.substr(0, at + root.size()) + "nvidia/cu13/lib/" + s->file);
        }
        return 0;
      },
      &search);
  return paths;
}

std::vector<std::string> Candidates(const char* file) {
  std::vector<std::string> c = CandidatesNextToLoadedLibraries(file);
  if (const char* ld = std::getenv("LD_LIBRARY_PATH"); ld != nullptr) {
    std::string_view rest = ld;
    while (!rest.empty()) {
      const size_t colon = rest.find(':');
      const std::string_view dir = rest.substr(0, colon);
      if (!dir.empty()) c.push_back(std::string(dir) + "/" + file);
      rest = colon == std::string_view::npos ? std::string_view() : rest.substr(colon + 1);
    }
  }
  for (const char* env : {"CUDA_HOME", "CUDA_PATH"}) {
    if (const char* root = std::getenv(env); root != nullptr && root[0] != '\0')
      c.push_back(std::string(root) + "/lib64/" + file);
  }
  c.push_back(std::string("/usr/local/cuda/lib64/") + file);
  return c;
}

}  // namespace

RealLibrary::RealLibrary(const char* file, const char* env) : file_(file), env_(env) {}

void RealLibrary::Find() {
  struct stat self {};
  Dl_info info{};
  const bool know_self = dladdr(reinterpret_cast<void*>(&LogOnce), &info) != 0 && info.dli_fname != nullptr &&
                         stat(info.dli_fname, &self) == 0;
  std::vector<std::string> candidates;
  if (const char* explicit_path = std::getenv(env_); explicit_path != nullptr && explicit_path[0] != '\0') {
    candidates.push_back(explicit_path);
  } else {
    candidates = Candidates(file_);
  }
  std::set<std::string> tried;
  std::string why;
  for (const std::string& path : candidates) {
    if (!tried.insert(path).second) continue;
    struct stat st {};
    if (stat(path.c_str(), &st) != 0) continue;
    if (know_self && SameFile(st, self)) continue;
    // RTLD_LOCAL: the real library's symbols must not interpose the shim's.
    handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle_ != nullptr) {
      description_ = path;
      return;
    }
    const char* err = dlerror();
    why += "; " + path + ": " + (err ? err : "dlopen failed");
  }
  description_ = "not found (looked in " + std::to_string(tried.size()) + " places" + why + "); set " + env_ +
                 "=/path/to/" + file_;
}

void* RealLibrary::Symbol(const char* name) {
  static std::mutex mu;  // serialises the one search per library
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!searched_) {
      Find();
      searched_ = true;
    }
  }
  if (handle_ == nullptr) {
    LogOnce(file_, std::string("the real ") + file_ + " was " + description_);
    return nullptr;
  }
  void* sym = dlsym(handle_, name);
  if (sym == nullptr) LogOnce(file_, description_ + " has no " + name + " (an older library than the program's)");
  return sym;
}

void LogOnce(const std::string& what, const std::string& message) {
  static std::mutex mu;
  static std::set<std::string>* said = new std::set<std::string>();  // guarded by mu; leaked: used until exit
  std::lock_guard<std::mutex> lock(mu);
  if (said->insert(what + message).second) std::fprintf(stderr, "phos: %s: %s\n", what.c_str(), message.c_str());
}

}  // namespace phos::jit
