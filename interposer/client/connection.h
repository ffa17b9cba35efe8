// libphos.so's connection to phosd's data plane (docs/interposer.md
// "libphos.so and phos run").
//
// Lazy and thread-safe: the first CUDA call that needs phosd connects to
// `$PHOS_SOCKET` + ".data" (default /run/phos/phosd.sock.data) with
// ring::ChannelClient and maps the ring. If phosd is absent, or dies later,
// every call returns WireStatus::kDaemonUnavailable (cudaErrorDevicesUnavailable
// / CUDA_ERROR_DEVICE_UNAVAILABLE) and one line naming the socket is printed
// to stderr, once per process.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "protocol/wire.h"
#include "ring/ring.h"

namespace phos::client {

using wire::WireStatus;

class Connection {
 public:
  /// The process-wide connection (never destroyed: CUDA calls may come from
  /// atexit handlers and other threads during exit).
  static Connection& Get();

  /// Connects if not yet done. kSuccess or kDaemonUnavailable.
  WireStatus Ensure();
  /// Whether a connection was ever made (without trying to make one).
  bool connected() const;

  /// A synchronous call; `reply` may be null. On an error reply the message
  /// is the reply's text.
  WireStatus Call(wire::ApiId api, uint32_t stream, std::span<const std::byte> payload,
                  ring::Reply* reply = nullptr);
  /// A posted call (no round trip).
  WireStatus Post(wire::ApiId api, uint32_t stream, std::span<const std::byte> payload);
  /// Bulk bytes through the staging arena (PostBulk).
  WireStatus PostBulk(wire::ApiId api, uint32_t stream, std::span<const std::byte> meta,
                      std::span<const std::byte> data);
  /// Staging chunks for replies (D2H, device properties).
  WireStatus AcquireChunk(uint32_t* chunk);
  void ReleaseChunk(uint32_t chunk);
  std::byte* ChunkBytes(uint32_t chunk);
  uint32_t chunk_bytes() const;
  /// Largest payload one frame can carry.
  size_t max_payload_bytes() const;

  const std::string& data_socket() const { return data_socket_; }

 private:
  Connection();
  WireStatus Lost(const Status& why);
  struct State;
  State* state_;
  std::string data_socket_;
};

}  // namespace phos::client
