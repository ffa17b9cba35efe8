#include "fake_app.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace phos::session::testing {

namespace op = wire::op;

Status FakeApp::Connect(const std::string& path, std::unique_ptr<FakeApp>* out) {
  std::unique_ptr<FakeApp> app(new FakeApp());
  ring::Hello hello;
  hello.pid = getpid();
  hello.cmdline = std::string("fake_app\0--test", 15);
  PHOS_RETURN_IF_ERROR(ring::ChannelClient::Connect(path, hello, 5000, &app->channel_, &app->region_));
  ring::RingOptions opts;
  ring::ChannelClient* ch = app->channel_.get();
  opts.alive = [ch] { return ch->PeerAlive(); };
  opts.wait.check_period_ms = 20;
  app->client_ = std::make_unique<ring::RingClient>(app->region_->base(), app->region_->geometry(), opts);
  *out = std::move(app);
  return Status::Ok();
}

FakeApp::~FakeApp() {
  if (client_) client_->Close();
  client_.reset();
  region_.reset();
  channel_.reset();
}

WireStatus FakeApp::Finish(const ring::Reply& reply) {
  const auto w = static_cast<WireStatus>(reply.status);
  if (w != WireStatus::kSuccess) {
    message_.assign(reinterpret_cast<const char*>(reply.data.data()), reply.bytes);
  }
  return w;
}

WireStatus FakeApp::Raw(uint32_t api_id, uint32_t stream, std::span<const std::byte> payload, bool call,
                        ring::Reply* reply) {
  ring::CallHeader h;
  h.api_id = api_id;
  h.stream_id = stream;
  h.device = device_;
  ring::Reply local;
  if (reply == nullptr) reply = &local;
  Status s = call ? client_->Call(h, payload, reply) : client_->Post(h, payload);
  if (!s.ok()) {
    message_ = s.ToString();
    return wire::TransportToWire(s);
  }
  return call ? Finish(*reply) : WireStatus::kSuccess;
}

template <typename T>
static bool ReadReply(const ring::Reply& r, T* out) {
  if (r.bytes != sizeof(T)) return false;
  std::memcpy(out, r.data.data(), sizeof(T));
  return true;
}

WireStatus FakeApp::DeviceCount(int* n) {
  ring::Reply r;
  WireStatus w = Empty(op::kGetDeviceCount, 0, &r);
  wire::DeviceCountReply v{};
  if (w == WireStatus::kSuccess && ReadReply(r, &v)) *n = v.count;
  return w;
}

WireStatus FakeApp::Properties(int device, wire::WireDeviceProps* props) {
  uint32_t chunk = 0;
  const ring::RingGeometry& g = region_->geometry();
  ring::ChannelClient* ch = channel_.get();
  Status s = wire::AcquireReplyChunk(region_->base(), g, {}, [ch] { return ch->PeerAlive(); }, &chunk);
  if (!s.ok()) return wire::TransportToWire(s);
  ring::Reply r;
  WireStatus w = Send(op::kGetDeviceProperties, wire::DevicePropsRequest{device, chunk}, true, 0, &r);
  wire::ChunkReply cr{};
  if (w == WireStatus::kSuccess && ReadReply(r, &cr) && cr.bytes == sizeof(*props)) {
    std::memcpy(props, wire::ChunkBytes(region_->base(), g, chunk), sizeof(*props));
  }
  wire::ReleaseReplyChunk(region_->base(), g, chunk);
  return w;
}

WireStatus FakeApp::Attribute(int device, int attribute, int64_t* value) {
  ring::Reply r;
  WireStatus w = Send(op::kDeviceGetAttribute, wire::DeviceAttributeRequest{device, attribute}, true, 0, &r);
  wire::ValueReply v{};
  if (w == WireStatus::kSuccess && ReadReply(r, &v)) *value = v.value;
  return w;
}

WireStatus FakeApp::MemInfo(uint64_t* free_bytes, uint64_t* total_bytes) {
  ring::Reply r;
  WireStatus w = Empty(op::kMemGetInfo, 0, &r);
  wire::MemGetInfoReply v{};
  if (w == WireStatus::kSuccess && ReadReply(r, &v)) {
    *free_bytes = v.free_bytes;
    *total_bytes = v.total_bytes;
  }
  return w;
}

WireStatus FakeApp::Malloc(uint64_t bytes, uint64_t* ptr) {
  ring::Reply r;
  WireStatus w = Send(op::kMalloc, wire::MallocRequest{bytes}, true, 0, &r);
  wire::MallocReply v{};
  if (w == WireStatus::kSuccess && ReadReply(r, &v)) *ptr = v.ptr;
  return w;
}

WireStatus FakeApp::Free(uint64_t ptr) { return Send(op::kFree, wire::PointerRequest{ptr}); }

WireStatus FakeApp::AddressReserve(uint64_t bytes, uint64_t addr, uint64_t* ptr) {
  ring::Reply r;
  WireStatus w = Send(op::kMemAddressReserve, wire::AddressReserveRequest{bytes, 0, addr}, true, 0, &r);
  wire::MallocReply v{};
  if (w == WireStatus::kSuccess && ReadReply(r, &v)) *ptr = v.ptr;
  return w;
}

WireStatus FakeApp::H2D(uint64_t dst, const void* src, uint64_t bytes, uint32_t stream, bool sync,
                        bool force_staged) {
  wire::MemcpyRequest req{dst, 0, bytes, static_cast<uint32_t>(wire::CopyDir::kHostToDevice), wire::kNoChunk};
  auto data = std::span<const std::byte>(static_cast<const std::byte*>(src), bytes);
  const bool fits = sizeof(req) + bytes + ring::kFrameHeaderBytes <= client_->geometry().max_frame_bytes;
  if (fits && !force_staged) {
    std::vector<std::byte> payload(sizeof(req) + bytes);
    std::memcpy(payload.data(), &req, sizeof(req));
    if (bytes) std::memcpy(payload.data() + sizeof(req), src, bytes);
    return Raw(static_cast<uint32_t>(sync ? op::kMemcpy : op::kMemcpyAsync), stream, payload, sync);
  }
  ring::CallHeader h;
  h.api_id = static_cast<uint32_t>(op::kMemcpyAsync);
  h.stream_id = stream;
  h.device = device_;
  Status s = client_->PostBulk(h, std::as_bytes(std::span<const wire::MemcpyRequest>(&req, 1)), data);
  if (!s.ok()) {
    message_ = s.ToString();
    return wire::TransportToWire(s);
  }
  return sync ? StreamSync(stream) : WireStatus::kSuccess;
}

WireStatus FakeApp::D2H(void* dst, uint64_t src, uint64_t bytes, uint32_t stream) {
  auto* out = static_cast<std::byte*>(dst);
  if (bytes <= ring::kSlotResultBytes) {
    ring::Reply r;
    wire::MemcpyRequest req{0, src, bytes, static_cast<uint32_t>(wire::CopyDir::kDeviceToHost), wire::kNoChunk};
    WireStatus w = Send(op::kMemcpy, req, true, stream, &r);
    if (w == WireStatus::kSuccess && r.bytes == bytes && bytes) std::memcpy(out, r.data.data(), bytes);
    return w;
  }
  const ring::RingGeometry& g = region_->geometry();
  ring::ChannelClient* ch = channel_.get();
  for (uint64_t off = 0; off < bytes;) {
    const uint64_t n = std::min<uint64_t>(g.chunk_bytes, bytes - off);
    uint32_t chunk = 0;
    Status s = wire::AcquireReplyChunk(region_->base(), g, {}, [ch] { return ch->PeerAlive(); }, &chunk);
    if (!s.ok()) return wire::TransportToWire(s);
    wire::MemcpyRequest req{0, src + off, n, static_cast<uint32_t>(wire::CopyDir::kDeviceToHost), chunk};
    ring::Reply r;
    WireStatus w = Send(op::kMemcpy, req, true, stream, &r);
    if (w == WireStatus::kSuccess) std::memcpy(out + off, wire::ChunkBytes(region_->base(), g, chunk), n);
    wire::ReleaseReplyChunk(region_->base(), g, chunk);
    if (w != WireStatus::kSuccess) return w;
    off += n;
  }
  return WireStatus::kSuccess;
}

WireStatus FakeApp::D2D(uint64_t dst, uint64_t src, uint64_t bytes, uint32_t stream, bool sync) {
  wire::MemcpyRequest req{dst, src, bytes, static_cast<uint32_t>(wire::CopyDir::kDeviceToDevice), wire::kNoChunk};
  return Send(sync ? op::kMemcpy : op::kMemcpyAsync, req, sync, stream);
}

WireStatus FakeApp::Memset(uint64_t dst, uint32_t value, uint32_t element_size, uint64_t count, uint32_t stream,
                           bool sync) {
  wire::MemsetRequest req{dst, count, value, element_size};
  return Send(sync ? op::kMemset : op::kMemsetAsync, req, sync, stream);
}

WireStatus FakeApp::StreamCreate(uint32_t id, uint32_t flags) {
  return Send(op::kStreamCreate, wire::StreamCreateRequest{id, flags, 0, 0});
}
WireStatus FakeApp::StreamDestroy(uint32_t id) { return Send(op::kStreamDestroy, wire::HandleRequest{id, 0}); }
WireStatus FakeApp::StreamWaitEvent(uint32_t stream, uint32_t event) {
  return Send(op::kStreamWaitEvent, wire::HandleRequest{event, 0}, false, stream);
}
WireStatus FakeApp::EventCreate(uint32_t id, uint32_t flags) {
  return Send(op::kEventCreate, wire::EventCreateRequest{id, flags});
}
WireStatus FakeApp::EventRecord(uint32_t event, uint32_t stream) {
  return Send(op::kEventRecord, wire::HandleRequest{event, 0}, false, stream);
}
WireStatus FakeApp::EventQuery(uint32_t event) { return Send(op::kEventQuery, wire::HandleRequest{event, 0}); }
WireStatus FakeApp::EventSync(uint32_t event) { return Send(op::kEventSynchronize, wire::HandleRequest{event, 0}); }
WireStatus FakeApp::EventDestroy(uint32_t event) { return Send(op::kEventDestroy, wire::HandleRequest{event, 0}); }
WireStatus FakeApp::EventElapsed(uint32_t start, uint32_t end, float* ms) {
  ring::Reply r;
  WireStatus w = Send(op::kEventElapsedTime, wire::ElapsedTimeRequest{start, end}, true, 0, &r);
  wire::ElapsedTimeReply v{};
  if (w == WireStatus::kSuccess && ReadReply(r, &v)) *ms = v.ms;
  return w;
}

WireStatus FakeApp::ModuleLoad(uint32_t id, std::span<const std::byte> image, bool force_staged) {
  wire::ModuleLoadRequest req{id, static_cast<uint32_t>(wire::ModuleLoadPhase::kInline), image.size()};
  const bool fits = sizeof(req) + image.size() + ring::kFrameHeaderBytes <= client_->geometry().max_frame_bytes;
  if (fits && !force_staged) {
    std::vector<std::byte> payload(sizeof(req) + image.size());
    std::memcpy(payload.data(), &req, sizeof(req));
    std::memcpy(payload.data() + sizeof(req), image.data(), image.size());
    return Raw(static_cast<uint32_t>(op::kModuleLoad), 0, payload, true);
  }
  req.phase = static_cast<uint32_t>(wire::ModuleLoadPhase::kPiece);
  ring::CallHeader h;
  h.api_id = static_cast<uint32_t>(op::kModuleLoad);
  h.device = device_;
  Status s = client_->PostBulk(h, std::as_bytes(std::span<const wire::ModuleLoadRequest>(&req, 1)), image);
  if (!s.ok()) {
    message_ = s.ToString();
    return wire::TransportToWire(s);
  }
  req.phase = static_cast<uint32_t>(wire::ModuleLoadPhase::kCommit);
  return Send(op::kModuleLoad, req);
}

static std::vector<std::byte> WithName(const void* head, size_t head_bytes, const std::string& name) {
  std::vector<std::byte> p(head_bytes + name.size());
  std::memcpy(p.data(), head, head_bytes);
  std::memcpy(p.data() + head_bytes, name.data(), name.size());
  return p;
}

WireStatus FakeApp::GetFunction(uint32_t module, uint32_t function, const std::string& name) {
  wire::GetFunctionRequest req{module, function, static_cast<uint32_t>(name.size()), 0};
  return Raw(static_cast<uint32_t>(op::kModuleGetFunction), 0, WithName(&req, sizeof req, name), true);
}

WireStatus FakeApp::GetGlobal(uint32_t module, const std::string& name, uint64_t* ptr, uint64_t* bytes,
                              bool to_app) {
  wire::GetGlobalRequest req{module, static_cast<uint32_t>(name.size()),
                             to_app ? uint32_t{wire::kGlobalAddressToApp} : 0u, 0};
  ring::Reply r;
  WireStatus w = Raw(static_cast<uint32_t>(op::kModuleGetGlobal), 0, WithName(&req, sizeof req, name), true, &r);
  wire::GetGlobalReply v{};
  if (w == WireStatus::kSuccess && ReadReply(r, &v)) {
    *ptr = v.ptr;
    *bytes = v.bytes;
  }
  return w;
}

WireStatus FakeApp::Launch(uint32_t function, wire::LaunchRequest req, std::span<const std::byte> params,
                           uint32_t stream) {
  req.function_id = function;
  req.param_bytes = static_cast<uint32_t>(params.size());
  std::vector<std::byte> p(sizeof(req) + params.size());
  std::memcpy(p.data(), &req, sizeof(req));
  if (!params.empty()) std::memcpy(p.data() + sizeof(req), params.data(), params.size());
  return Raw(static_cast<uint32_t>(op::kLaunchKernel), stream, p, false);
}

}  // namespace phos::session::testing
