#include "interposer/client/handles.h"

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <span>
#include <unordered_map>
#include <vector>

#include "interposer/client/connection.h"
#include "interposer/client/devices.h"
#include "protocol/wire.h"

namespace phos::client {
namespace {
constexpr uint32_t kFirstStreamId = 16;  // above cudaStreamLegacy / cudaStreamPerThread
constexpr uintptr_t kLegacyHandle = 1;     // cudaStreamLegacy
constexpr uintptr_t kPerThreadHandle = 2;  // cudaStreamPerThread / CU_STREAM_PER_THREAD
// Never minted, so phosd answers "unknown stream" for it: what a call gets
// when its per-thread stream could not be created.
constexpr uint32_t kNoPerThreadStream = 2;

std::atomic<uint32_t> g_stream{kFirstStreamId};
std::atomic<uint32_t> g_event{1};
std::atomic<uint32_t> g_module{1};
std::atomic<uint32_t> g_function{1};

// Per-thread streams of all threads. A thread's stream belongs to the
// generation it was created in; ForgetPerThreadStreams (cudaDeviceReset)
// starts a new generation, so every thread creates a fresh one.
struct PerThreadRegistry {
  std::mutex mu;                            // guards `live`
  std::unordered_map<uint32_t, int> live;   // ids of current per-thread streams -> their app GPU
  std::atomic<uint64_t> generation{1};
  std::atomic<bool> reported{false};   // a creation failure was printed
};
PerThreadRegistry& Registry() {
  static PerThreadRegistry* r = new PerThreadRegistry();  // leaked: used from thread exit
  return *r;
}

// The calling thread's per-thread streams, one per GPU it used one on (CUDA
// has one per thread and device), by the app's ordinal of the GPU; the
// destructor runs when the thread exits (also for the main thread, inside
// exit()).
struct PerThreadStream {
  struct OnDevice {
    int device = 0;
    uint32_t id = 0;
  };
  std::vector<OnDevice> ids;  // few: a thread uses few GPUs
  uint64_t generation = 0;

  ~PerThreadStream() {
    if (ids.empty()) return;
    PerThreadRegistry& r = Registry();
    {
      std::lock_guard<std::mutex> lock(r.mu);
      for (const OnDevice& s : ids) r.live.erase(s.id);
    }
    // Only a stream of the current generation still exists in phosd, and
    // only a connected process (not a forked child) may talk to it. Posted:
    // no round trip at thread exit; phosd releases everything on
    // disconnect anyway. Each is destroyed on its GPU (phosd runs a call on
    // its stream's GPU).
    Connection& c = Connection::Get();
    if (generation == r.generation.load(std::memory_order_acquire) && c.connected()) {
      for (const OnDevice& s : ids) {
        const wire::HandleRequest req{s.id, 0};
        (void)c.Post(wire::op::kStreamDestroy, 0, std::as_bytes(std::span<const wire::HandleRequest>(&req, 1)));
      }
    }
    ids.clear();  // a CUDA call from a later thread-exit destructor makes new ones (freed at disconnect)
  }
};
thread_local PerThreadStream t_stream;

}  // namespace

uint32_t NewStreamId() { return g_stream.fetch_add(1, std::memory_order_relaxed); }
uint32_t NewEventId() { return g_event.fetch_add(1, std::memory_order_relaxed); }
uint32_t NewModuleId() { return g_module.fetch_add(1, std::memory_order_relaxed); }
uint32_t NewFunctionId() { return g_function.fetch_add(1, std::memory_order_relaxed); }

uint32_t PerThreadStreamId() {
  PerThreadRegistry& r = Registry();
  const uint64_t gen = r.generation.load(std::memory_order_acquire);
  PerThreadStream& t = t_stream;
  const int device = CurrentDevice();
  if (t.generation != gen && !t.ids.empty()) {
    std::lock_guard<std::mutex> lock(r.mu);
    for (const auto& s : t.ids) r.live.erase(s.id);
    t.ids.clear();
  }
  for (const auto& s : t.ids) {
    if (s.device == device) return s.id;
  }
  Connection& c = Connection::Get();
  if (c.Ensure() != wire::WireStatus::kSuccess) return kNoPerThreadStream;  // the call reports it
  const uint32_t id = NewStreamId();
  // Flags 0: a blocking stream, which synchronises with the legacy default
  // stream as CUDA's per-thread default stream does.
  const wire::StreamCreateRequest req{id, 0, 0, 0};
  ring::Reply reply;
  wire::WireStatus w =
      c.Call(wire::op::kStreamCreate, 0, std::as_bytes(std::span<const wire::StreamCreateRequest>(&req, 1)), &reply);
  if (w != wire::WireStatus::kSuccess) {
    if (w != wire::WireStatus::kDaemonUnavailable && !r.reported.exchange(true)) {
      std::fprintf(stderr, "phos: cannot create the per-thread default stream (%s: %.*s)\n",
                   std::string(wire::WireStatusName(w)).c_str(), static_cast<int>(reply.bytes),
                   reinterpret_cast<const char*>(reply.data.data()));
    }
    return kNoPerThreadStream;
  }
  t.ids.push_back({device, id});
  t.generation = gen;
  std::lock_guard<std::mutex> lock(r.mu);
  r.live.emplace(id, device);
  return id;
}

void ForgetPerThreadStreams() {
  PerThreadRegistry& r = Registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.live.clear();
  r.generation.fetch_add(1, std::memory_order_acq_rel);
}

namespace {
struct StreamTable {
  std::mutex mu;  // guards `info`
  struct Info {
    unsigned flags = 0;
    int priority = 0;
    int device = 0;  // the app's ordinal of the GPU it was made on
  };
  std::unordered_map<uint32_t, Info> info;
};
StreamTable& Streams() {
  static StreamTable* t = new StreamTable();  // leaked: used from thread exit
  return *t;
}
}  // namespace

void NoteStreamCreated(uint32_t id, unsigned flags, int priority) {
  StreamTable& t = Streams();
  const int device = CurrentDevice();
  std::lock_guard<std::mutex> lock(t.mu);
  t.info[id] = {flags, priority, device};
}

void NoteStreamDestroyed(uint32_t id) {
  StreamTable& t = Streams();
  std::lock_guard<std::mutex> lock(t.mu);
  t.info.erase(id);
}

namespace {
/// What the process knows of stream `id`: default streams are blocking, of
/// priority 0, on the current GPU (legacy) or the one they were made on
/// (per-thread); false for an unknown id.
bool LookUpStream(uint32_t id, StreamTable::Info* out) {
  if (id == 0) {
    *out = {0, 0, CurrentDevice()};
    return true;
  }
  {
    PerThreadRegistry& r = Registry();
    std::lock_guard<std::mutex> lock(r.mu);
    if (auto it = r.live.find(id); it != r.live.end()) {
      *out = {0, 0, it->second};
      return true;
    }
  }
  StreamTable& t = Streams();
  std::lock_guard<std::mutex> lock(t.mu);
  auto it = t.info.find(id);
  if (it == t.info.end()) return false;
  *out = it->second;
  return true;
}
}  // namespace

bool StreamInfo(uint32_t id, unsigned* flags, int* priority) {
  StreamTable::Info info;
  if (!LookUpStream(id, &info)) return false;
  *flags = info.flags;
  *priority = info.priority;
  return true;
}

bool StreamDevice(uint32_t id, int* device) {
  StreamTable::Info info;
  if (!LookUpStream(id, &info)) return false;
  *device = info.device;
  return true;
}

void ForgetCreatedStreams() {
  StreamTable& t = Streams();
  std::lock_guard<std::mutex> lock(t.mu);
  t.info.clear();
}

uint32_t StreamIdOf(const void* stream, DefaultStream zero) {
  const auto v = reinterpret_cast<uintptr_t>(stream);
  if (v == kPerThreadHandle || (v == 0 && zero == DefaultStream::kPerThread)) return PerThreadStreamId();
  if (v == 0 || v == kLegacyHandle || v < kFirstStreamId) return 0;
  return static_cast<uint32_t>(v);
}
void* StreamHandleOf(uint32_t id) { return reinterpret_cast<void*>(static_cast<uintptr_t>(id)); }
uint32_t EventIdOf(const void* event) { return static_cast<uint32_t>(reinterpret_cast<uintptr_t>(event)); }
void* EventHandleOf(uint32_t id) { return reinterpret_cast<void*>(static_cast<uintptr_t>(id)); }

}  // namespace phos::client
