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
  /// Shares a pinned host segment with phosd (docs/interposer.md "Pinned
  /// host memory and copies"): sends the channel record with `memfd`, then
  /// Calls wire::op::kHostSegmentRegister, both under one lock so records
  /// and calls pair up. `memfd` stays the caller's. *kernels_reach: whether
  /// phosd mapped the segment for kernels at app_base (mapped pinned memory).
  WireStatus ShareHostSegment(uint64_t segment_id, uint64_t bytes, uint64_t app_base, int memfd,
                              bool* kernels_reach);

  /// In a child forked after this process connected (fork_guard.cc's
  /// pthread_atfork child handler; the child is single-threaded then):
  /// drops the parent's ring without touching it — nothing is unmapped,
  /// closed or written, the child's copies of the mapping and fds are just
  /// left alone — and makes every later call fail with kNotInitialized,
  /// printing one line naming the pid. A process that never connected is
  /// left as it is (it connects on its first call). Returns whether it
  /// dropped a connection.
  bool AbandonAfterFork();

  const std::string& data_socket() const { return data_socket_; }

 private:
  Connection();
  WireStatus Lost(const Status& why);
  /// Takes the kernels' printf text phosd holds (RegionHeader::
  /// device_output said so after a synchronous call) and writes it to
  /// stdout (docs/interposer.md "Device printf").
  void PrintDeviceOutput();
  struct State;
  State* state_;
  std::string data_socket_;
};

}  // namespace phos::client
