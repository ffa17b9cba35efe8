#include "interposer/client/jit_ptx.h"

#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <unordered_map>

#include "fatbin/fatbin_writer.h"
#include "fatbin/nv_info.h"

namespace phos::client {
namespace {

// How much PTX the table keeps: a program that JIT-compiles without end
// (a new kernel per shape) must not grow the process without bound. The
// oldest pairs go first; a cubin loaded after its pair was dropped loads
// without PTX (SASS only), as it would without phos's shim.
constexpr size_t kMaxEntries = 4096;
constexpr size_t kMaxPtxBytes = size_t{256} << 20;

// A cubin by content: its XXH3-128 and size, computed once per attach or
// load and used by both the in-memory table and the on-disk store.
struct Key {
  uint64_t high, low;
  size_t size;
  bool operator==(const Key&) const = default;
};
struct KeyHash {
  size_t operator()(const Key& k) const { return k.low ^ (k.size * 0x9E3779B97F4A7C15ull); }
};

Key KeyOf(std::span<const std::byte> cubin) {
  const XXH128_hash_t h = XXH3_128bits(cubin.data(), cubin.size());
  return {h.high64, h.low64, cubin.size()};
}

// ---- the on-disk store ------------------------------------------------------
// Frameworks cache compiled cubins on disk (CuPy's kernel cache) and load
// them in later processes without compiling, so the shim never sees them
// again: every attached pair is also written to a per-user directory and
// looked up there when a cubin is not in the table. A file is named by the
// cubin's XXH3-128 and size, holds the PTX, and is written whole (a
// temporary file renamed into place). $PHOS_JIT_PTX_CACHE names the
// directory ("off": none); default $XDG_CACHE_HOME/phos/jit-ptx, else
// ~/.cache/phos/jit-ptx. Deleting it loses nothing but the PTX of cubins
// the shim will not see compiled again.
constexpr size_t kMaxStoreFiles = 100000;  // beyond this, stop adding (said once)

std::string StoreDir() {
  if (const char* d = std::getenv("PHOS_JIT_PTX_CACHE"); d != nullptr && d[0] != '\0')
    return std::string(d) == "off" ? std::string() : std::string(d);
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && x[0] == '/') return std::string(x) + "/phos/jit-ptx";
  if (const char* h = std::getenv("HOME"); h != nullptr && h[0] == '/') return std::string(h) + "/.cache/phos/jit-ptx";
  return "";
}

std::string StorePath(const std::string& dir, const Key& key) {
  char name[64];
  std::snprintf(name, sizeof name, "%016llx%016llx-%zu.ptx", static_cast<unsigned long long>(key.high),
                static_cast<unsigned long long>(key.low), key.size);
  return dir + "/" + name;
}

// mkdir -p with mode 0700 for the directories it makes.
bool MakeDirs(const std::string& dir) {
  for (size_t at = 1; at != std::string::npos;) {
    at = dir.find('/', at + 1);
    const std::string part = dir.substr(0, at);
    if (mkdir(part.c_str(), 0700) != 0 && errno != EEXIST) return false;
  }
  return true;
}

void StorePut(const Key& key, std::string_view ptx) {
  const std::string dir = StoreDir();
  if (dir.empty()) return;
  const std::string path = StorePath(dir, key);
  if (access(path.c_str(), F_OK) == 0) return;
  if (!MakeDirs(dir)) return;
  static std::atomic<size_t> files{0};
  if (files.load() == 0) {
    std::error_code ec;
    size_t n = 0;
    for (auto it = std::filesystem::directory_iterator(dir, ec); !ec && it != std::filesystem::directory_iterator();
         it.increment(ec))
      ++n;
    files.store(n + 1);
  }
  if (files.fetch_add(1) >= kMaxStoreFiles) {
    static std::atomic<bool> said{false};
    if (!said.exchange(true))
      std::fprintf(stderr, "phos: %s holds %zu JIT PTX files; not adding more (delete it to start over)\n",
                   dir.c_str(), kMaxStoreFiles);
    return;
  }
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(ptx.data(), static_cast<std::streamsize>(ptx.size()));
    if (!out) {
      std::remove(tmp.c_str());
      return;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) std::remove(tmp.c_str());
}

bool StoreGet(const Key& key, std::string* ptx) {
  const std::string dir = StoreDir();
  if (dir.empty()) return false;
  std::ifstream in(StorePath(dir, key), std::ios::binary);
  if (!in) return false;
  ptx->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return !ptx->empty();
}

// Every attached pair. `mu` guards all of it; the shim attaches from
// whichever thread completes a link, loads look up from any thread.
struct JitPtxTable {
  std::mutex mu;
  std::unordered_map<Key, std::string, KeyHash> ptx_by_cubin;
  std::deque<Key> age;  // oldest first
  size_t ptx_bytes = 0;
};
JitPtxTable& Table() {
  static JitPtxTable* t = new JitPtxTable();  // leaked: loads may run during static destruction
  return *t;
}

// The in-memory table only.
void RememberJitPtx(const Key& key, std::string_view ptx) {
  JitPtxTable& t = Table();
  std::lock_guard<std::mutex> lock(t.mu);
  auto [it, inserted] = t.ptx_by_cubin.try_emplace(key);
  if (!inserted) t.ptx_bytes -= it->second.size();
  it->second.assign(ptx);
  t.ptx_bytes += ptx.size();
  if (inserted) t.age.push_back(key);
  while (!t.age.empty() && (t.ptx_by_cubin.size() > kMaxEntries || t.ptx_bytes > kMaxPtxBytes)) {
    auto old = t.ptx_by_cubin.find(t.age.front());
    t.ptx_bytes -= old->second.size();
    t.ptx_by_cubin.erase(old);
    t.age.pop_front();
  }
}

}  // namespace

void AttachJitPtx(std::span<const std::byte> cubin, std::string_view ptx) {
  const Key key = KeyOf(cubin);
  RememberJitPtx(key, ptx);
  StorePut(key, ptx);
}

bool ImageWithAttachedPtx(std::span<const std::byte> image, std::vector<std::byte>* out) {
  if (image.size() < 4 || std::memcmp(image.data(), "\x7f" "ELF", 4) != 0) return false;
  const Key key = KeyOf(image);
  std::string ptx;
  {
    JitPtxTable& t = Table();
    std::lock_guard<std::mutex> lock(t.mu);
    auto it = t.ptx_by_cubin.find(key);
    if (it != t.ptx_by_cubin.end()) ptx = it->second;
  }
  if (ptx.empty()) {
    if (!StoreGet(key, &ptx)) return false;
    RememberJitPtx(key, ptx);
  }
  const std::span<const uint8_t> cubin(reinterpret_cast<const uint8_t*>(image.data()), image.size());
  fatbin::CubinInfo info;
  if (!fatbin::ReadCubinInfo(cubin, &info).ok() || info.sm_arch == 0) return false;
  // The PTX entry claims the cubin's architecture: that is what it was
  // compiled for (its .target), and what a loader matching entries to the
  // device compares.
  const fatbin::FatbinImage images[] = {
      {fatbin::EntryKind::kElf, info.sm_arch, cubin},
      {fatbin::EntryKind::kPtx, info.sm_arch,
       std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(ptx.data()), ptx.size())}};
  std::vector<uint8_t> written;
  if (!fatbin::WriteFatbin(images, &written).ok()) return false;
  out->resize(written.size());
  std::memcpy(out->data(), written.data(), written.size());
  return true;
}

}  // namespace phos::client

extern "C" __attribute__((visibility("default"))) int phosJitAttachPtx(const void* cubin, size_t cubin_size, const char* ptx, size_t ptx_size) {
  if (cubin == nullptr || cubin_size == 0 || ptx == nullptr) return -1;
  while (ptx_size > 0 && ptx[ptx_size - 1] == '\0') --ptx_size;
  if (ptx_size == 0) return -1;
  phos::client::AttachJitPtx(std::span<const std::byte>(static_cast<const std::byte*>(cubin), cubin_size),
                             std::string_view(ptx, ptx_size));
  return 0;
}
