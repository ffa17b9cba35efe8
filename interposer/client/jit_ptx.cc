#include "interposer/client/jit_ptx.h"

#include <xxhash.h>

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

struct Key {
  uint64_t hash;
  size_t size;
  bool operator==(const Key&) const = default;
};
struct KeyHash {
  size_t operator()(const Key& k) const { return k.hash ^ (k.size * 0x9E3779B97F4A7C15ull); }
};

Key KeyOf(std::span<const std::byte> cubin) { return {XXH3_64bits(cubin.data(), cubin.size()), cubin.size()}; }

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

}  // namespace

void AttachJitPtx(std::span<const std::byte> cubin, std::string_view ptx) {
  const Key key = KeyOf(cubin);
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

bool ImageWithAttachedPtx(std::span<const std::byte> image, std::vector<std::byte>* out) {
  if (image.size() < 4 || std::memcmp(image.data(), "\x7f" "ELF", 4) != 0) return false;
  std::string ptx;
  {
    JitPtxTable& t = Table();
    std::lock_guard<std::mutex> lock(t.mu);
    auto it = t.ptx_by_cubin.find(KeyOf(image));
    if (it == t.ptx_by_cubin.end()) return false;
    ptx = it->second;
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
