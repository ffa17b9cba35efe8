#include "interposer/client/connection.h"
#include "interposer/client/devices.h"

#include <cstring>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <new>

#include "ring/channel.h"

namespace phos::client {

namespace {
constexpr const char* kDefaultControlSocket = "/run/phos/phosd.sock";

std::string ReadCmdline() {
  std::string out;
  int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0 && out.size() < ring::kMaxCmdlineBytes) out.append(buf, n);
  close(fd);
  if (out.size() > ring::kMaxCmdlineBytes) out.resize(ring::kMaxCmdlineBytes);
  return out;
}
}  // namespace

struct Connection::State {
  std::mutex mu;                 // serialises connecting
  std::atomic<int> phase{0};     // 0 = not tried, 1 = connected, 2 = unavailable, 3 = forked child
  std::atomic<bool> reported{false};
  std::unique_ptr<ring::ChannelClient> channel;
  std::unique_ptr<ring::SharedRegion> region;
  std::unique_ptr<ring::RingClient> client;
  ring::WaitPolicy wait;
  bool trace_errors = false;  // $PHOS_TRACE_ERRORS: print phosd's message of every failed call
  std::mutex segment_mu;      // pairs a host segment's channel record with its call
  std::mutex output_mu;       // held by the thread printing the device's printf text (try_lock only)
};

Connection& Connection::Get() {
  static Connection* c = new Connection();  // leaked on purpose (see header)
  return *c;
}

Connection::Connection() : state_(new State()) {
  const char* env = std::getenv("PHOS_SOCKET");
  data_socket_ = std::string(env != nullptr && env[0] != '\0' ? env : kDefaultControlSocket) + ".data";
  state_->wait.check_period_ms = 20;
  const char* trace = std::getenv("PHOS_TRACE_ERRORS");
  state_->trace_errors = trace != nullptr && trace[0] != '\0' && trace[0] != '0';
}

bool Connection::connected() const { return state_->phase.load(std::memory_order_acquire) == 1; }

WireStatus Connection::Lost(const Status& why) {
  state_->phase.store(2, std::memory_order_release);
  if (!state_->reported.exchange(true)) {
    std::fprintf(stderr, "phos: phosd is unavailable at %s (%s); CUDA calls fail with cudaErrorDevicesUnavailable\n",
                 data_socket_.c_str(), why.ToString().c_str());
    std::fflush(stderr);
  }
  return WireStatus::kDaemonUnavailable;
}

bool Connection::AbandonAfterFork() {
  if (state_->phase.load(std::memory_order_acquire) == 0) return false;
  // Leak the parent's objects: their destructors would unmap, close or
  // signal on state the parent still uses through its own copies.
  (void)state_->client.release();
  (void)state_->region.release();
  (void)state_->channel.release();
  new (&state_->mu) std::mutex();  // another thread may have held it at fork()
  state_->reported.store(false, std::memory_order_relaxed);
  state_->phase.store(3, std::memory_order_release);
  return true;
}

WireStatus Connection::Ensure() {
  int p = state_->phase.load(std::memory_order_acquire);
  if (p == 1) return WireStatus::kSuccess;
  if (p == 2) return WireStatus::kDaemonUnavailable;
  if (p == 3) {
    if (!state_->reported.exchange(true)) {
      std::fprintf(stderr, "phos: CUDA cannot be used in a child forked after CUDA was initialised (pid %d)\n",
                   static_cast<int>(getpid()));
      std::fflush(stderr);
    }
    return WireStatus::kNotInitialized;
  }
  std::lock_guard<std::mutex> lock(state_->mu);
  p = state_->phase.load(std::memory_order_acquire);
  if (p != 0) return p == 1 ? WireStatus::kSuccess : (p == 3 ? WireStatus::kNotInitialized : WireStatus::kDaemonUnavailable);
  ring::Hello hello;
  hello.pid = getpid();
  hello.cmdline = ReadCmdline();
  Status s = ring::ChannelClient::Connect(data_socket_, hello, 5000, &state_->channel, &state_->region);
  if (!s.ok()) return Lost(s);
  ring::RingOptions opts;
  ring::ChannelClient* ch = state_->channel.get();
  opts.alive = [ch] { return ch->PeerAlive(); };
  opts.wait = state_->wait;
  state_->client = std::make_unique<ring::RingClient>(state_->region->base(), state_->region->geometry(), opts);
  state_->phase.store(1, std::memory_order_release);
  // A session starts on phosd's GPU 0; the app's GPU 0 may be another
  // (CUDA_VISIBLE_DEVICES): its first call names that GPU, and phosd moves
  // the empty session there.
  return WireStatus::kSuccess;
}

WireStatus Connection::Call(wire::ApiId api, uint32_t stream, std::span<const std::byte> payload,
                            ring::Reply* reply) {
  if (WireStatus w = Ensure(); w != WireStatus::kSuccess) return w;
  ring::Reply local;
  if (reply == nullptr) reply = &local;
  ring::CallHeader h;
  h.api_id = static_cast<uint32_t>(api);
  h.stream_id = stream;
  h.device = CurrentPhysicalDevice();
  Status s = state_->client->Call(h, payload, reply);
  if (!s.ok()) return s.code() == Status::Code::kInvalidArgument ? WireStatus::kInvalidValue : Lost(s);
  if (reply->status != 0 && state_->trace_errors) {
    std::fprintf(stderr, "phos: %s failed (%d): %.*s\n", interposer::ApiName(api), reply->status,
                 static_cast<int>(reply->bytes), reinterpret_cast<const char*>(reply->data.data()));
  }
  const auto status = static_cast<WireStatus>(reply->status);
  if (api != wire::op::kTakeDeviceOutput && state_->client->device_output_pending()) PrintDeviceOutput();
  return status;
}

void Connection::PrintDeviceOutput() {
  // One thread prints; another that finds the word set meanwhile goes on
  // (the printing thread takes all there is). Never waiting for the lock
  // keeps a thread that still holds a staging chunk (a D2H copy) out of a
  // cycle with the printer, which may wait for a chunk.
  std::unique_lock<std::mutex> lock(state_->output_mu, std::try_to_lock);
  if (!lock.owns_lock()) return;
  uint32_t chunk = 0;
  if (AcquireChunk(&chunk) != WireStatus::kSuccess) return;
  for (;;) {
    const wire::DeviceOutputRequest req{chunk, 0};
    ring::Reply r;
    if (Call(wire::op::kTakeDeviceOutput, 0, std::as_bytes(std::span(&req, 1)), &r) != WireStatus::kSuccess ||
        r.bytes < sizeof(wire::ChunkReply)) {
      break;
    }
    wire::ChunkReply got{};
    std::memcpy(&got, r.data.data(), sizeof got);
    const size_t n = std::min<uint64_t>(got.bytes, chunk_bytes());
    // The app's own stdout stream, as the driver prints device printf: in
    // order with what the app printed before the synchronizing call.
    if (n > 0) std::fwrite(ChunkBytes(chunk), 1, n, stdout);
    if (n < chunk_bytes()) break;
  }
  ReleaseChunk(chunk);
}

WireStatus Connection::Post(wire::ApiId api, uint32_t stream, std::span<const std::byte> payload) {
  if (WireStatus w = Ensure(); w != WireStatus::kSuccess) return w;
  ring::CallHeader h;
  h.api_id = static_cast<uint32_t>(api);
  h.stream_id = stream;
  h.device = CurrentPhysicalDevice();
  Status s = state_->client->Post(h, payload);
  if (!s.ok()) return s.code() == Status::Code::kInvalidArgument ? WireStatus::kInvalidValue : Lost(s);
  return WireStatus::kSuccess;
}

WireStatus Connection::PostBulk(wire::ApiId api, uint32_t stream, std::span<const std::byte> meta,
                                std::span<const std::byte> data) {
  if (WireStatus w = Ensure(); w != WireStatus::kSuccess) return w;
  ring::CallHeader h;
  h.api_id = static_cast<uint32_t>(api);
  h.stream_id = stream;
  h.device = CurrentPhysicalDevice();
  Status s = state_->client->PostBulk(h, meta, data);
  if (!s.ok()) return s.code() == Status::Code::kInvalidArgument ? WireStatus::kInvalidValue : Lost(s);
  return WireStatus::kSuccess;
}

WireStatus Connection::AcquireChunk(uint32_t* chunk) {
  if (WireStatus w = Ensure(); w != WireStatus::kSuccess) return w;
  ring::ChannelClient* ch = state_->channel.get();
  Status s = wire::AcquireReplyChunk(state_->region->base(), state_->region->geometry(), state_->wait,
                                     [ch] { return ch->PeerAlive(); }, chunk);
  return s.ok() ? WireStatus::kSuccess : Lost(s);
}

void Connection::ReleaseChunk(uint32_t chunk) {
  wire::ReleaseReplyChunk(state_->region->base(), state_->region->geometry(), chunk);
}

std::byte* Connection::ChunkBytes(uint32_t chunk) {
  return wire::ChunkBytes(state_->region->base(), state_->region->geometry(), chunk);
}

// Both are 0 without a ring (before Ensure succeeded, or in a forked child).
uint32_t Connection::chunk_bytes() const { return state_->region ? state_->region->geometry().chunk_bytes : 0; }

size_t Connection::max_payload_bytes() const { return state_->client ? state_->client->max_payload_bytes() : 0; }

WireStatus Connection::ShareHostSegment(uint64_t segment_id, uint64_t bytes, uint64_t app_base, int memfd,
                                        bool* kernels_reach) {
  *kernels_reach = false;
  if (WireStatus w = Ensure(); w != WireStatus::kSuccess) return w;
  std::lock_guard<std::mutex> lock(state_->segment_mu);
  Status s = state_->channel->SendHostSegment(ring::HostSegmentRecord{segment_id, bytes, app_base}, memfd);
  if (!s.ok()) return Lost(s);
  const wire::HostSegmentRequest req{segment_id, bytes, app_base};
  ring::Reply r;
  const WireStatus w =
      Call(wire::op::kHostSegmentRegister, 0, std::as_bytes(std::span<const wire::HostSegmentRequest>(&req, 1)), &r);
  wire::HostSegmentReply reply{};
  if (w == WireStatus::kSuccess && r.bytes == sizeof(reply)) {
    std::memcpy(&reply, r.data.data(), sizeof(reply));
    *kernels_reach = reply.kernels_reach == 1;
  }
  return w;
}

}  // namespace phos::client
