// A test "app" that speaks the phos wire protocol directly (what libphos.so
// will do): connects to phosd's data-plane socket with ring::ChannelClient,
// maps the ring and issues wire calls through a RingClient. Every helper
// returns the call's WireStatus; message() is the last error's text.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "protocol/wire.h"
#include "ring/channel.h"
#include "ring/ring.h"

namespace phos::session::testing {

using wire::WireStatus;

class FakeApp {
 public:
  static Status Connect(const std::string& data_socket, std::unique_ptr<FakeApp>* out);
  ~FakeApp();

  /// Any call: `call` = wait for the reply, else post.
  WireStatus Raw(uint32_t api_id, uint32_t stream, std::span<const std::byte> payload, bool call,
                 ring::Reply* reply = nullptr);
  template <typename T>
  WireStatus Send(wire::ApiId api, const T& req, bool call = true, uint32_t stream = 0,
                  ring::Reply* reply = nullptr) {
    return Raw(static_cast<uint32_t>(api), stream, std::as_bytes(std::span<const T>(&req, 1)), call, reply);
  }
  WireStatus Empty(wire::ApiId api, uint32_t stream = 0, ring::Reply* reply = nullptr) {
    return Raw(static_cast<uint32_t>(api), stream, {}, true, reply);
  }

  WireStatus DeviceCount(int* n);
  WireStatus Properties(int device, wire::WireDeviceProps* props);
  WireStatus Attribute(int device, int attribute, int64_t* value);
  WireStatus MemInfo(uint64_t* free_bytes, uint64_t* total_bytes);
  WireStatus Malloc(uint64_t bytes, uint64_t* ptr);
  WireStatus Free(uint64_t ptr);
  /// The driver's virtual-memory API as libphos.so sends it (kMemAddressReserve,
  /// kMemAddressFree, kMemMap, kMemUnmap).
  WireStatus AddressReserve(uint64_t bytes, uint64_t addr, uint64_t* ptr);
  WireStatus AddressFree(uint64_t ptr, uint64_t bytes) {
    return Send(wire::op::kMemAddressFree, wire::AddressRangeRequest{ptr, bytes});
  }
  WireStatus Map(uint64_t ptr, uint64_t bytes) { return Send(wire::op::kMemMap, wire::AddressRangeRequest{ptr, bytes}); }
  WireStatus Unmap(uint64_t ptr, uint64_t bytes) {
    return Send(wire::op::kMemUnmap, wire::AddressRangeRequest{ptr, bytes});
  }
  /// Inline when it fits one frame (or !force_staged), else staged pieces;
  /// `sync` = cudaMemcpy semantics (waits, reports errors).
  WireStatus H2D(uint64_t dst, const void* src, uint64_t bytes, uint32_t stream = 0, bool sync = true,
                 bool force_staged = false);
  /// D2H: inline reply for small copies, reply chunks otherwise.
  WireStatus D2H(void* dst, uint64_t src, uint64_t bytes, uint32_t stream = 0);
  WireStatus D2D(uint64_t dst, uint64_t src, uint64_t bytes, uint32_t stream = 0, bool sync = true);
  WireStatus Memset(uint64_t dst, uint32_t value, uint32_t element_size, uint64_t count, uint32_t stream = 0,
                    bool sync = true);
  WireStatus StreamCreate(uint32_t id, uint32_t flags = 0);
  WireStatus StreamDestroy(uint32_t id);
  WireStatus StreamSync(uint32_t id) { return Empty(wire::op::kStreamSynchronize, id); }
  WireStatus StreamQuery(uint32_t id) { return Empty(wire::op::kStreamQuery, id); }
  WireStatus StreamWaitEvent(uint32_t stream, uint32_t event);
  WireStatus EventCreate(uint32_t id, uint32_t flags = 0);
  WireStatus EventRecord(uint32_t event, uint32_t stream);
  WireStatus EventQuery(uint32_t event);
  WireStatus EventSync(uint32_t event);
  WireStatus EventElapsed(uint32_t start, uint32_t end, float* ms);
  WireStatus EventDestroy(uint32_t event);
  WireStatus DeviceSync() { return Empty(wire::op::kDeviceSynchronize); }
  WireStatus GetLastError() { return Empty(wire::op::kGetLastError); }
  WireStatus ModuleLoad(uint32_t id, std::span<const std::byte> image, bool force_staged = false);
  WireStatus GetFunction(uint32_t module, uint32_t function, const std::string& name);
  /// `to_app`: the app keeps the address (wire::kGlobalAddressToApp, as
  /// cudaGetSymbolAddress); false as libphos's own symbol copies ask.
  WireStatus GetGlobal(uint32_t module, const std::string& name, uint64_t* ptr, uint64_t* bytes,
                       bool to_app = true);
  /// Posted (as cuLaunchKernel is); errors surface at the next sync.
  WireStatus Launch(uint32_t function, wire::LaunchRequest geometry, std::span<const std::byte> params,
                    uint32_t stream = 0);

  /// The GPU (phosd's ordinal) every later call of this app names, as
  /// libphos.so's calls name their thread's current GPU.
  void UseDevice(uint8_t device) { device_ = device; }

  const std::string& message() const { return message_; }
  ring::RingClient* client() { return client_.get(); }
  /// The setup channel (pinned host segment records travel on it).
  ring::ChannelClient* channel() { return channel_.get(); }

 private:
  FakeApp() = default;
  WireStatus Finish(const ring::Reply& reply);

  std::unique_ptr<ring::ChannelClient> channel_;
  std::unique_ptr<ring::SharedRegion> region_;
  std::unique_ptr<ring::RingClient> client_;
  std::string message_;
  uint8_t device_ = 0;
};

}  // namespace phos::session::testing
