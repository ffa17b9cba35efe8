// The data channel of an image transfer (proto/peer.proto
// OpenDataChannel, docs/migration.md "Data channel"): a plain TCP
// connection beside the gRPC channel, carrying the ReceiveImage stream
// with the bulk bytes raw instead of inside protobuf messages inside HTTP/2
// frames — gRPC copied every byte several times and reached ~0.3x of the
// disk on loopback (docs/benchmarks.md).
//
// On the wire, after the connection opens:
//   source -> destination: kMagic (8 bytes), the ticket (32 bytes), then
//     frames: u64 little-endian length L (1..kMaxMessageBytes), L bytes of
//     a serialized ImageChunk; a FileData with raw_bytes = N (data empty)
//     is followed by N raw bytes (1..kMaxRawBytes).
//   destination -> source, once the stream ended (ImageEnd, or a refusal
//     at any point): one frame of a DataChannelReply, then it closes.
// Nothing else; anything else is refused (the receiver's reply says why).
//
// This file: the framing both sides share, over a file descriptor or (for
// the fuzzer) any ReadExact function. Threading: a reader or writer belongs
// to one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include <google/protobuf/message_lite.h>

#include "common/status.h"
#include "peer.pb.h"

namespace phos::peer {

inline constexpr char kDataChannelMagic[8] = {'P', 'H', 'O', 'S', 'D', 'C', '0', '1'};
inline constexpr std::size_t kTicketBytes = 32;
/// Largest serialized message in a frame (messages here are headers: the
/// bytes travel raw).
inline constexpr std::uint64_t kMaxMessageBytes = 1ull << 20;
/// Largest raw run after one FileData (as ReceiveImage's largest chunk).
inline constexpr std::uint64_t kMaxRawBytes = 16ull << 20;

/// Reads exactly `n` bytes into `p`. Ok; NotFound("end of stream") when
/// the stream ended before the first byte; IoError for anything else
/// (an end inside the n bytes included).
using ReadExactFn = std::function<Status(void* p, std::size_t n)>;

/// ReadExactFn over a socket (EINTR retried; a receive timeout set on the
/// socket ends a stalled read as IoError).
ReadExactFn SocketReader(int fd);

/// Sets socket `fd`'s receive timeout (SO_RCVTIMEO); 0 waits for ever.
void SetReceiveTimeout(int fd, int seconds);
/// Sets both of socket `fd`'s timeouts (SO_RCVTIMEO and SO_SNDTIMEO); 0
/// waits for ever.
void SetSocketTimeouts(int fd, int seconds);

/// The sender's end of a channel: reads the destination's
/// DataChannelReply under a receive timeout of `timeout_s` (0: none — the
/// destination answers after its fsyncs). Ok when a reply arrived (its
/// code may still be an error); the read's error otherwise.
Status ReadChannelReply(int fd, int timeout_s, peer::v1::DataChannelReply* reply);

/// Writes all of [p, p + n) to socket `fd` (EINTR retried, no SIGPIPE).
Status WriteAll(int fd, const void* p, std::size_t n);
/// Writes one frame: the length, then `message` serialized.
Status WriteFrame(int fd, const google::protobuf::MessageLite& message);
/// Reads one frame into `message`. NotFound at a clean end of stream
/// before the frame; InvalidArgument for a length out of range or bytes
/// that do not parse.
Status ReadFrame(const ReadExactFn& read, google::protobuf::MessageLite* message);

/// The destination's side of the stream: the next ImageChunk, with a
/// FileData's raw bytes read into its `data` (raw_bytes cleared), so the
/// chunk looks exactly as ReceiveImage would have received it. NotFound at
/// a clean end of stream; InvalidArgument for a malformed frame (a raw
/// run out of range, or raw bytes beside `data` or a `ref`). Pass the same
/// `chunk` for every call: the previous chunk's bytes buffer is refilled,
/// not zeroed and refilled.
Status ReadImageChunk(const ReadExactFn& read, peer::v1::ImageChunk* chunk);
/// The same for a pre-copy stream: a PrecopyData's raw bytes read into its
/// `data`.
Status ReadPrecopyChunk(const ReadExactFn& read, peer::v1::PrecopyChunk* chunk);

}  // namespace phos::peer
