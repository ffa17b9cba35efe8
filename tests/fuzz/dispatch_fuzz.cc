// libFuzzer target for phosd's call dispatch (daemon/session/call_handlers.h
// Dispatch, the table interposer/protocol/calls.def): what an untrusted app
// writes into its ring, decoded, against a live session on the sim backend.
// phosd must never crash and never touch another session's memory.
//
// Two sessions share one sim backend (as in phosd, one address space):
//   * the victim: a context holding a buffer of known bytes;
//   * the fuzzed session A: a fresh SessionState per input (its own context,
//     ring region, setup channel (a socketpair), executor, one pinned host
//     segment, two buffers), which
//     runs a sequence of records built from the input, then is released as
//     a session's teardown does.
// Checked per input: the victim's buffer keeps its bytes; device memory is
// all free again once A is released (no leak); every range the
// executor admits for A (its access set) lies in a buffer or global of A;
// a successful reply has the row's reply size and fits the slot.
//
// Input, read front to back (little-endian): records until the input runs
// out (at most 16), each:
//   u8 selector   < 2*rows: row (selector % rows) of wire::kCalls; < 250: a
//                 u32 id follows; else an id just past the table (0x10003,
//                 kApiCount, ...)
//   u8 flags      bit 0 call (wants a reply), bit 1 staged, bits 2-3 stream
//                 id 0..3 (bit 4: a u32 stream id follows instead), bit 5 the
//                 row's exact request size (Tail rows: + a u8 tail length),
//                 bit 6 send a host segment channel record first
//   u16 length    payload bytes (only when bit 5 is clear), then the payload;
//   bit 6: u8 mode of the channel record (SendSegmentRecord);
//   staged: u8 chunk, u32 bytes, u64 offset, then the piece's bytes.
// 8-byte words of the payload whose top 16 bits are a marker become real
// addresses (so the fuzzer reaches the checks past "invalid pointer"):
//   0xA0A0 / 0xA1A1: A's buffers + low 20 bits; 0xB0B0: the victim's buffer
//   + low bits; 0xC0C0: A's pinned segment (app address) + low bits;
//   0xC1C1: a range where segments the input registers may go + low 32 bits.
// Sizes that only make the sim slow, not phosd wrong, are clamped (grid and
// block dims, 2D heights, allocation and module image sizes).
// Seeds: tests/fuzz/corpus/dispatch/ (made by make_dispatch_seeds.py).
// PHOS_DISPATCH_FUZZ_TRACE=1 prints every record's op and answer (to check
// what a seed or a crash input does: dispatch_fuzz -runs=0 FILE).
#include <atomic>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend_factory.h"
#include "protocol/calls.h"
#include "ring/channel.h"
#include "ring/ring.h"
#include "session/call_handlers.h"
#include "session/executor.h"

using namespace phos;
using session::SessionState;

namespace {

constexpr uint64_t kVictimBytes = 64 << 10;
constexpr uint64_t kBufferBytes[2] = {4096, 256 << 10};
constexpr uint64_t kSegmentBytes = 2 << 20;
constexpr uint64_t kSegmentApp = 0x6a0000000000ull;  // A's pinned segment, as the app would see it
constexpr uint64_t kSegmentApp2 = 0x6b0000000000ull;  // where the fuzzer's own segments go (marker 0xC1C1)
constexpr uint64_t kMaxFuzzSegmentBytes = 8 << 20;
constexpr uint32_t kChunkCount = 4;
constexpr uint32_t kChunkBytes = 64 << 10;

[[noreturn]] void Die(const char* what) {
  std::fprintf(stderr, "dispatch_fuzz: %s\n", what);
  __builtin_trap();
}

bool Inside(const std::map<uint64_t, uint64_t>& m, uint64_t ptr, uint64_t bytes) {
  auto it = m.upper_bound(ptr);
  if (it == m.begin()) return false;
  --it;
  return ptr >= it->first && bytes <= it->second && ptr - it->first <= it->second - bytes;
}

// [ptr, ptr + bytes) covered by buffers of `buffers` that follow each other
// with no gap, all inside one range of `reserved` (the app's cuMemMap
// mappings of one cuMemAddressReserve range, which a copy may cross).
// Written apart from phosd's own check (session::InMappedRun), which it
// checks.
bool InsideMappedRun(const std::map<uint64_t, uint64_t>& buffers, const std::map<uint64_t, uint64_t>& reserved,
                     uint64_t ptr, uint64_t bytes) {
  if (!Inside(reserved, ptr, bytes)) return false;
  auto r = std::prev(reserved.upper_bound(ptr));
  uint64_t at = ptr;
  const uint64_t end = ptr + bytes;
  while (at < end) {
    auto b = buffers.upper_bound(at);
    if (b == buffers.begin()) return false;
    --b;
    if (at >= b->first + b->second || b->first < r->first || b->first + b->second > r->first + r->second) {
      return false;
    }
    at = b->first + b->second;
  }
  return true;
}

/// Admits everything, but checks that every range of an admitted call is
/// memory of the fuzzed session.
class IsolationHook final : public session::AdmissionHook {
 public:
  explicit IsolationHook(const SessionState* st) : st_(st) {}
  Status BeforeCall(const session::CallView& call) override {
    for (const session::AccessRange& r : call.ranges) {
      // A kernel's range may be a whole reserved range of the session
      // (AddMappedRangeAccess): the session's own address space.
      if (!Inside(st_->buffers, r.ptr, r.bytes) && !Inside(st_->globals, r.ptr, r.bytes) &&
          !InsideMappedRun(st_->buffers, st_->reserved_ranges, r.ptr, r.bytes) &&
          !(call.kind != session::AccessKind::kExact && Inside(st_->reserved_ranges, r.ptr, r.bytes))) {
        std::fprintf(stderr, "api %u: range [0x%llx, +%llu) is not memory of the session\n",
                     static_cast<unsigned>(call.api), static_cast<unsigned long long>(r.ptr),
                     static_cast<unsigned long long>(r.bytes));
        Die("an admitted call names memory outside its session");
      }
    }
    return Status::Ok();
  }
  void AfterCall(const session::CallView&, const Status&) override {}

 private:
  const SessionState* st_;
};

struct World {
  std::unique_ptr<backend::Backend> backend;
  std::unique_ptr<backend::Context> victim;
  backend::DevicePtr victim_ptr = 0;
  std::vector<std::byte> victim_bytes;
  int segment_fd = -1;  // sealed memfd of A's pinned segment (dup'ed per input)
  uint64_t free_bytes = 0;  // device memory free with only the victim's buffer

  World() {
    spdlog::set_level(spdlog::level::err);  // a session's teardown logs every kernel fault at info
    backend::SimOptions sim;
    sim.device_count = 2;  // a frame may name either GPU (several_devices.cc), or one phosd lacks
    if (!backend::CreateSimBackend(sim, &backend).ok()) Die("no sim backend");
    if (!backend->CreateContext(0, &victim).ok()) Die("no victim context");
    if (!victim->Allocate(kVictimBytes, 0, &victim_ptr).ok()) Die("victim allocation");
    victim_bytes.resize(kVictimBytes);
    for (size_t i = 0; i < victim_bytes.size(); ++i) victim_bytes[i] = static_cast<std::byte>(i * 131 + 7);
    if (!victim->MemcpyAsync(victim_ptr, reinterpret_cast<uint64_t>(victim_bytes.data()), kVictimBytes,
                             backend::CopyKind::kHostToDevice, backend::kDefaultStream)
             .ok() ||
        !victim->Synchronize().ok()) {
      Die("victim fill");
    }
    segment_fd = memfd_create("dispatch-fuzz-pinned", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (segment_fd < 0 || ftruncate(segment_fd, kSegmentBytes) != 0 ||
        fcntl(segment_fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
      Die("pinned segment memfd");
    }
    uint64_t total = 0;
    if (!victim->GetMemoryInfo(&free_bytes, &total).ok()) Die("memory info");
  }

  void CheckVictim() {
    std::vector<std::byte> now(kVictimBytes);
    if (!victim->MemcpyAsync(reinterpret_cast<uint64_t>(now.data()), victim_ptr, kVictimBytes,
                             backend::CopyKind::kDeviceToHost, backend::kDefaultStream)
             .ok() ||
        !victim->Synchronize().ok()) {
      Die("victim read back");
    }
    if (std::memcmp(now.data(), victim_bytes.data(), kVictimBytes) != 0) Die("the victim session's buffer changed");
    // The fuzzed session is gone: everything it allocated is free again.
    uint64_t free_now = 0, total = 0;
    if (!victim->GetMemoryInfo(&free_now, &total).ok()) Die("memory info");
    if (free_now != free_bytes) {
      std::fprintf(stderr, "free device memory %llu, %llu before the session\n",
                   static_cast<unsigned long long>(free_now), static_cast<unsigned long long>(free_bytes));
      Die("a released session left device memory allocated");
    }
  }
};

World& TheWorld() {
  static World* w = new World();  // never destroyed: libFuzzer exits without unwinding
  return *w;
}

/// The fuzzed session: what phosd's Session sets up for an app.
struct Fuzzed {
  std::unique_ptr<backend::Context> ctx;
  std::map<int, std::unique_ptr<backend::Context>> other_ctx;  // SessionState::other_contexts
  std::unique_ptr<ring::SharedRegion> region;
  std::unique_ptr<ring::RingServer> ring;
  std::unique_ptr<session::Executor> executor;
  std::unique_ptr<ring::ChannelConnection> channel;  // phosd's end of the setup channel
  int app_fd = -1;                                   // the app's end
  SessionState st;
  backend::DevicePtr buffers[2] = {};

  explicit Fuzzed(World& w) {
    if (!w.backend->CreateContext(0, &ctx).ok()) Die("no context");
    ring::RingConfig c;
    c.ring_bytes = 64 << 10;
    c.slot_count = 8;
    c.chunk_count = kChunkCount;
    c.chunk_bytes = kChunkBytes;
    if (!ring::SharedRegion::CreateAnonymous(c, 2, &region).ok()) Die("no region");
    ring = std::make_unique<ring::RingServer>(region->base(), region->geometry(), ring::RingOptions{});
    executor = std::make_unique<session::Executor>(std::make_unique<IsolationHook>(&st));
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) Die("socketpair");
    channel = ring::ChannelConnection::Adopt(sv[0], getpid(), getuid(), ring::Hello{});
    app_fd = sv[1];
    st.session_id = 2;
    st.device = 0;
    // The fuzzed app has no peers: an ncclCommInitRank that would wait for
    // other ranks gives up at once (as when a session stops).
    static const std::atomic<bool> kNoPeers{true};
    st.stopping = &kNoPeers;
    st.backend = w.backend.get();
    st.ctx = ctx.get();
    st.ring = ring.get();
    st.region_base = static_cast<std::byte*>(region->base());
    st.geometry = region->geometry();
    st.executor = executor.get();
    st.channel = channel.get();
    st.replace_context = [this, &w]() -> Status {
      std::unique_ptr<backend::Context> fresh;
      PHOS_RETURN_IF_ERROR(w.backend->CreateContext(0, &fresh));
      ctx = std::move(fresh);
      st.ctx = ctx.get();
      return Status::Ok();
    };
    st.add_context = [this, &w](int device) -> Status {
      std::unique_ptr<backend::Context> fresh;
      PHOS_RETURN_IF_ERROR(w.backend->CreateContext(device, &fresh));
      st.other_contexts[device] = fresh.get();
      other_ctx[device] = std::move(fresh);
      return Status::Ok();
    };
    for (int i = 0; i < 2; ++i) {
      if (!ctx->Allocate(kBufferBytes[i], 0, &buffers[i]).ok()) Die("buffer allocation");
      st.buffers.Add(buffers[i], kBufferBytes[i]);
    }
    if (!st.host_segments.Add(1, kSegmentApp, kSegmentBytes, dup(w.segment_fd), ctx.get()).ok()) {
      Die("pinned segment");
    }
    // Nobody answers A's host functions (kLaunchHostFunc): a gate would
    // hold its stream, and the input's next synchronisation, until the
    // session ends. Cancelled from the start, every gate passes at once
    // (what a session's end does); the handler's decoding and translation
    // are still exercised.
    st.host_gates->Cancel();
  }
  ~Fuzzed() {
    session::ReleaseAll(st);  // the teardown a session runs when its app goes
    close(app_fd);
  }
};

/// Reads the input front to back (little-endian); zeros past its end.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  size_t remaining() const { return size_ - at_; }
  template <typename T>
  T Int() {
    T v{};
    const size_t n = std::min(sizeof(T), remaining());
    if (n > 0) std::memcpy(&v, data_ + at_, n);
    at_ += n;
    return v;
  }
  std::vector<uint8_t> Bytes(size_t n) {
    n = std::min(n, remaining());
    std::vector<uint8_t> v(data_ + at_, data_ + at_ + n);
    at_ += n;
    return v;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
};

uint64_t Word(const std::vector<uint8_t>& p, size_t at) {
  uint64_t w = 0;
  std::memcpy(&w, p.data() + at, sizeof w);
  return w;
}
void SetWord(std::vector<uint8_t>* p, size_t at, uint64_t w) { std::memcpy(p->data() + at, &w, sizeof w); }

void Substitute(std::vector<uint8_t>* p, const Fuzzed& a, const World& w) {
  for (size_t at = 0; at + 8 <= p->size(); at += 8) {
    const uint64_t v = Word(*p, at);
    const uint64_t low = v & 0xFFFFF;
    switch (v >> 48) {
      case 0xA0A0: SetWord(p, at, a.buffers[0] + low); break;
      case 0xA1A1: SetWord(p, at, a.buffers[1] + low); break;
      case 0xB0B0: SetWord(p, at, w.victim_ptr + low); break;
      case 0xC0C0: SetWord(p, at, kSegmentApp + low); break;
      case 0xC1C1: SetWord(p, at, kSegmentApp2 + (v & 0xFFFFFFFFull)); break;
      default: break;
    }
  }
}

template <typename T>
bool As(std::vector<uint8_t>& p, T* out) {
  if (p.size() < sizeof(T)) return false;
  std::memcpy(out, p.data(), sizeof(T));
  return true;
}
template <typename T>
void Put(std::vector<uint8_t>& p, const T& v) {
  std::memcpy(p.data(), &v, sizeof(T));
}

/// The app side of kHostSegmentRegister: a channel record (channel.cc's
/// SegmentWire) with a memfd, before the call. `mode` (from the input):
/// bit 0 seal the memfd, bit 1 a record that disagrees with the call,
/// bit 2 a bad magic, bit 3 no fd.
void SendSegmentRecord(int fd, const std::vector<uint8_t>& payload, uint8_t mode) {
  wire::HostSegmentRequest req{};
  if (payload.size() >= sizeof req) std::memcpy(&req, payload.data(), sizeof req);
  struct {
    uint32_t magic, version;
    uint64_t segment_id, bytes, app_base;
  } w{(mode & 4) ? 0x12345678u : 0x47534850u, 1, req.segment_id + ((mode & 2) ? 1 : 0), req.bytes, req.app_base};
  int memfd = -1;
  if (!(mode & 8)) {
    memfd = memfd_create("dispatch-fuzz-seg", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (memfd < 0) Die("memfd_create");
    // Add() wants a file of exactly `bytes`; big requests get a small file.
    if (ftruncate(memfd, req.bytes <= kMaxFuzzSegmentBytes ? static_cast<off_t>(req.bytes) : 4096) != 0) {
      Die("ftruncate");
    }
    if (mode & 1) (void)fcntl(memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
  }
  iovec iov{&w, sizeof w};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (memfd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &memfd, sizeof(int));
  }
  (void)sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);  // a full socket just drops the record
  if (memfd >= 0) close(memfd);
}

/// Keeps work that is legal but only slow on the sim small.
void Clamp(wire::ApiId api, std::vector<uint8_t>& p) {
  namespace op = wire::op;
  if (api == op::kLaunchKernel) {
    wire::LaunchRequest r{};
    if (!As(p, &r)) return;
    for (int i = 0; i < 3; ++i) {
      r.grid[i] %= 3;
      r.block[i] %= 33;
    }
    Put(p, r);
  } else if (api == op::kMalloc) {
    wire::MallocRequest r{};
    if (!As(p, &r)) return;
    if (r.bytes > (4u << 20) && r.bytes < (1ull << 44)) r.bytes %= (4u << 20);
    Put(p, r);
  } else if (api == op::kMemcpy2D || api == op::kMemcpy2DAsync) {
    wire::Memcpy2DRequest r{};
    if (!As(p, &r)) return;
    if (r.height > 4096 && r.height < (1ull << 60)) r.height %= 4096;
    Put(p, r);
  } else if (api == op::kMemset2D || api == op::kMemset2DAsync) {
    wire::Memset2DRequest r{};
    if (!As(p, &r)) return;
    if (r.height > 4096 && r.height < (1ull << 60)) r.height %= 4096;
    Put(p, r);
  } else if (api == op::kModuleLoad) {
    wire::ModuleLoadRequest r{};
    if (!As(p, &r)) return;
    if (r.total_bytes > (4u << 20) && r.total_bytes <= wire::kMaxModuleImageBytes) r.total_bytes %= (4u << 20);
    Put(p, r);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  World& w = TheWorld();
  Reader in(data, size);
  {
    Fuzzed a(w);
    for (int n = 0; n < 16 && in.remaining() > 0; ++n) {
      const uint8_t sel = in.Int<uint8_t>();
      uint32_t api = 0;
      const wire::CallRow* row = nullptr;
      if (sel < 2 * wire::kCallCount) {
        row = &wire::kCalls[sel % wire::kCallCount];
        api = static_cast<uint32_t>(row->id);
      } else if (sel < 250) {
        api = in.Int<uint32_t>();
        row = wire::FindCallRow(static_cast<wire::ApiId>(api));
      } else {
        // Ids no row has: the first phos-private id after the last used one
        // (0x10000 stats, 0x10001 the cuBLAS probe, 0x10002 device output), past the generated ones, ...
        const uint32_t past[] = {0x10003, static_cast<uint32_t>(interposer::kApiCount), 0, 0xffffffffu,
                                 0x0fffffffu, 0x10000 - 1};
        api = past[(sel - 250) % std::size(past)];
      }
      const uint8_t flags = in.Int<uint8_t>();
      const bool call = flags & 1;
      const bool staged = flags & 2;
      uint32_t stream = (flags >> 2) & 3;
      if (flags & 0x10) stream = in.Int<uint32_t>();
      size_t len = 0;
      if ((flags & 0x20) && row != nullptr) {
        len = row->request_bytes + (row->shape == wire::PayloadShape::kTail ? in.Int<uint8_t>() : 0);
      } else {
        len = in.Int<uint16_t>() % 2048;
      }
      std::vector<uint8_t> payload = in.Bytes(len);
      Substitute(&payload, a, w);
      Clamp(static_cast<wire::ApiId>(api), payload);
      if (flags & 0x40) SendSegmentRecord(a.app_fd, payload, in.Int<uint8_t>());

      ring::Record rec;
      rec.header.kind = static_cast<uint8_t>(ring::FrameKind::kCall);
      rec.header.api_id = api;
      rec.header.stream_id = stream;
      rec.header.device = in.Int<uint8_t>() % 3;  // GPU 0, GPU 1, or one phosd does not have
      rec.header.flags = call ? ring::kFlagWantsReply : 0;
      if (staged) {
        // What DecodeRecord lets through: chunk < chunk_count, bytes <=
        // chunk_bytes, offset <= 2^56; the piece's bytes are in the chunk.
        rec.has_staging = true;
        rec.header.flags |= ring::kFlagStaging;
        rec.staging.chunk = in.Int<uint8_t>() % kChunkCount;
        rec.staging.bytes = in.Int<uint32_t>() % (kChunkBytes + 1);
        rec.staging.offset = in.Int<uint64_t>() & ((uint64_t{1} << 56) - 1);
        std::vector<uint8_t> piece = in.Bytes(rec.staging.bytes);
        if (!piece.empty()) {
          std::memcpy(wire::ChunkBytes(a.region->base(), a.region->geometry(), rec.staging.chunk), piece.data(),
                      piece.size());
        }
      }
      const auto* p = reinterpret_cast<const std::byte*>(payload.data());
      rec.payload = {p, payload.size()};
      session::Outcome out;
      // As Session::Run: the call runs on its GPU's context.
      if (Status d = session::SelectCallDevice(a.st, session::CallDevice(a.st, rec)); d.ok()) {
        session::Dispatch(a.st, rec, {p, payload.size()}, &out);
      } else {
        out.Fail(d);
      }
      session::SelectHomeDevice(a.st);
      static const bool trace = std::getenv("PHOS_DISPATCH_FUZZ_TRACE") != nullptr;
      if (trace) {
        std::fprintf(stderr, "  %-20s api %u stream %u %s%s: %d %s\n", row ? row->op : "?", api, stream,
                     call ? "call" : "post", staged ? " staged" : "", static_cast<int>(out.status),
                     out.ok() ? "" : out.message.c_str());
      }
      if (out.bytes > ring::kSlotResultBytes || out.reply().size() > ring::kSlotResultBytes) {
        Die("reply larger than a completion slot");
      }
      if (out.ok() && row != nullptr && !row->reply_variable && out.bytes != row->reply_bytes) {
        std::fprintf(stderr, "%s: %u reply bytes, the row says %u\n", row->op, out.bytes, row->reply_bytes);
        Die("reply size disagrees with the table");
      }
      if (!out.ok() && row == nullptr && out.status != wire::WireStatus::kNotSupported) {
        Die("an unknown api id was not answered NotSupported");
      }
      if (!call && !out.ok()) a.st.Defer(Status::InvalidArgument(out.message));  // as Session::Run
      (void)a.st.buffers.TakeChanged();
    }
  }
  w.CheckVictim();
  return 0;
}
