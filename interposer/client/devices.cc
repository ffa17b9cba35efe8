#include "interposer/client/devices.h"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cctype>
#include <cstring>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "interposer/client/client_internal.h"
#include "interposer/client/connection.h"

namespace phos::client {
namespace {

namespace op = wire::op;
using wire::WireStatus;

// The app's GPUs (index = app ordinal, value = phosd's ordinal), resolved
// once from phosd's GPU count and CUDA_VISIBLE_DEVICES. Written under
// `mu` once; read after `resolved` is set.
struct Visible {
  std::mutex mu;
  std::atomic<bool> resolved{false};
  std::vector<int> physical;
};
Visible& Vis() {
  static Visible* v = new Visible();  // leaked: used by static destructors of the app
  return *v;
}

// The calling thread's current GPU (CUDA's current device is per thread;
// every thread starts on the app's GPU 0), as the app's ordinal and as
// phosd's (-1: not translated yet, CUDA_VISIBLE_DEVICES unresolved).
thread_local int t_device = 0;
thread_local int t_physical = -1;
// Set while this thread resolves the visible GPUs: its own calls (device
// queries, which run in no context) carry GPU 0 rather than recurse.
thread_local bool t_resolving = false;

bool StartsWithNoCase(const std::string& text, const std::string& prefix) {
  if (prefix.size() > text.size()) return false;
  for (std::size_t i = 0; i < prefix.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(text[i])) != std::tolower(static_cast<unsigned char>(prefix[i]))) {
      return false;
    }
  }
  return true;
}

// The phosd GPU a "GPU-..." entry names: the one whose uuid starts with it
// (CUDA allows any prefix that names one GPU alone); -1 for none or several.
int GpuOfUuid(const std::string& entry, int daemon_count, const std::function<std::string(int)>& uuid_of) {
  int found = -1;
  for (int d = 0; d < daemon_count; ++d) {
    if (!StartsWithNoCase(uuid_of(d), entry)) continue;
    if (found >= 0) return -1;  // ambiguous: as CUDA, not a GPU
    found = d;
  }
  return found;
}

// CUDA's parse: entries separated by commas, each an ordinal or a GPU uuid
// ("GPU-" and enough of the uuid nvidia-smi prints to name one GPU); the
// list ends at the first entry that is not a GPU (or repeats one).
// `uuid_of(d)`: phosd's GPU d's uuid, asked only for uuid entries.
std::vector<int> ParseVisible(const char* env, int daemon_count, const std::function<std::string(int)>& uuid_of) {
  std::vector<int> out;
  if (env == nullptr) {
    for (int d = 0; d < daemon_count; ++d) out.push_back(d);
    return out;
  }
  std::string list(env);
  std::size_t start = 0;
  while (start <= list.size()) {
    std::size_t comma = list.find(',', start);
    std::string entry = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    while (!entry.empty() && entry.front() == ' ') entry.erase(entry.begin());
    while (!entry.empty() && entry.back() == ' ') entry.pop_back();
    long v = -1;
    if (StartsWithNoCase(entry, "GPU-")) {
      v = GpuOfUuid(entry, daemon_count, uuid_of);
    } else if (StartsWithNoCase(entry, "MIG-")) {
      SayOnce("phos: CUDA_VISIBLE_DEVICES entry '" + entry +
              "': MIG devices are not supported by phos (use ordinals or GPU- uuids); the list ends there");
    } else if (!entry.empty()) {
      char* end = nullptr;
      errno = 0;
      v = std::strtol(entry.c_str(), &end, 10);
      if (errno != 0 || *end != '\0') v = -1;
    }
    if (v < 0 || v >= daemon_count) break;
    bool repeated = false;
    for (int d : out) repeated = repeated || d == static_cast<int>(v);
    if (repeated) break;
    out.push_back(static_cast<int>(v));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

cudaError_t Resolve() {
  // Usable only while the connection is (not in a child forked after
  // CUDA was initialised, not once phosd is gone).
  if (WireStatus w = Connection::Get().Ensure(); w != WireStatus::kSuccess) return static_cast<cudaError_t>(w);
  Visible& v = Vis();
  if (v.resolved.load(std::memory_order_acquire)) return cudaSuccess;
  // The calls below name GPU 0 (device queries run in no context) rather
  // than resolve again to find the thread's GPU.
  struct Resolving {
    bool was = t_resolving;
    Resolving() { t_resolving = true; }
    ~Resolving() { t_resolving = was; }
  } resolving;
  ring::Reply r;
  WireStatus w = Connection::Get().Call(op::kGetDeviceCount, 0, {}, &r);
  if (w != WireStatus::kSuccess) return static_cast<cudaError_t>(w);
  wire::DeviceCountReply c{};
  if (r.bytes != sizeof(c)) return cudaErrorUnknown;
  std::memcpy(&c, r.data.data(), sizeof(c));
  std::lock_guard<std::mutex> lock(v.mu);
  if (!v.resolved.load(std::memory_order_relaxed)) {
    v.physical = ParseVisible(std::getenv("CUDA_VISIBLE_DEVICES"), c.count, [](int physical) {
      wire::WireDeviceProps props{};
      return FetchDeviceProps(physical, &props) == WireStatus::kSuccess ? std::string(props.uuid) : std::string();
    });
    v.resolved.store(true, std::memory_order_release);
  }
  return cudaSuccess;
}

}  // namespace

WireStatus FetchDeviceProps(int physical, wire::WireDeviceProps* props) {
  Connection& c = Connection::Get();
  uint32_t chunk = 0;
  if (WireStatus w = c.AcquireChunk(&chunk); w != WireStatus::kSuccess) return w;
  ring::Reply r;
  WireStatus w = c.Call(op::kGetDeviceProperties, 0, Bytes(wire::DevicePropsRequest{physical, chunk}), &r);
  if (w == WireStatus::kSuccess) {
    wire::ChunkReply cr{};
    if (r.bytes == sizeof(cr)) std::memcpy(&cr, r.data.data(), sizeof(cr));
    if (cr.bytes == sizeof(*props)) {
      std::memcpy(props, c.ChunkBytes(chunk), sizeof(*props));
      props->name[sizeof(props->name) - 1] = '\0';
      props->uuid[sizeof(props->uuid) - 1] = '\0';
    } else {
      w = WireStatus::kUnknown;
    }
  }
  c.ReleaseChunk(chunk);
  return w;
}

cudaError_t VisibleDeviceCount(int* count) {
  if (cudaError_t e = Resolve(); e != cudaSuccess) return e;
  *count = static_cast<int>(Vis().physical.size());
  return cudaSuccess;
}

cudaError_t PhysicalDevice(int device, int* physical) {
  if (cudaError_t e = Resolve(); e != cudaSuccess) return e;
  const std::vector<int>& p = Vis().physical;
  if (device < 0 || static_cast<std::size_t>(device) >= p.size()) return cudaErrorInvalidDevice;
  *physical = p[static_cast<std::size_t>(device)];
  return cudaSuccess;
}

int CurrentDevice() { return t_device; }

bool IsCurrentDevice(int device) { return device == t_device; }

cudaError_t SelectDevice(int device) {
  int physical = 0;
  if (cudaError_t e = PhysicalDevice(device, &physical); e != cudaSuccess) return e;
  // phosd learns it from the thread's next call (its frame's device byte):
  // cudaSetDevice itself costs no round trip (device guards call it often).
  t_device = device;
  t_physical = physical;
  return cudaSuccess;
}

uint8_t CurrentPhysicalDevice() {
  if (t_physical >= 0) return static_cast<uint8_t>(t_physical);
  if (t_resolving) return 0;
  int physical = 0;
  // No GPU visible (CUDA_VISIBLE_DEVICES=""): every device call says so;
  // the byte does not matter then.
  if (PhysicalDevice(t_device, &physical) != cudaSuccess) return 0;
  t_physical = physical;
  return static_cast<uint8_t>(physical);
}

}  // namespace phos::client
