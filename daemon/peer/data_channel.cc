#include "peer/data_channel.h"

#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace phos::peer {

ReadExactFn SocketReader(int fd) {
  return [fd](void* p, std::size_t n) -> Status {
    auto* at = static_cast<char*>(p);
    std::size_t got = 0;
    while (got < n) {
      const ssize_t r = recv(fd, at + got, n - got, MSG_WAITALL);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::IoError("data channel: the peer sent nothing for too long");
        return Status::FromErrno("data channel: receive", errno);
      }
      if (r == 0) {
        if (got == 0) return Status::NotFound("end of stream");
        return Status::IoError("data channel: the peer closed the connection in the middle of a frame");
      }
      got += static_cast<std::size_t>(r);
    }
    return Status::Ok();
  };
}

Status WriteAll(int fd, const void* p, std::size_t n) {
  const auto* at = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = send(fd, at, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::IoError("data channel: the peer took nothing for too long");
      return Status::FromErrno("data channel: send", errno);
    }
    at += w;
    n -= static_cast<std::size_t>(w);
  }
  return Status::Ok();
}

Status WriteFrame(int fd, const google::protobuf::MessageLite& message) {
  std::string frame(8, '\0');
  const std::uint64_t len = message.ByteSizeLong();
  for (int i = 0; i < 8; ++i) frame[static_cast<std::size_t>(i)] = static_cast<char>((len >> (8 * i)) & 0xff);
  if (!message.AppendToString(&frame)) return Status::Internal("data channel: cannot serialize a message");
  return WriteAll(fd, frame.data(), frame.size());
}

Status ReadFrame(const ReadExactFn& read, google::protobuf::MessageLite* message) {
  unsigned char head[8];
  PHOS_RETURN_IF_ERROR(read(head, sizeof head));
  std::uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | head[i];
  if (len == 0 || len > kMaxMessageBytes) {
    return Status::InvalidArgument("data channel: a frame of " + std::to_string(len) + " bytes (1 to " +
                                   std::to_string(kMaxMessageBytes) + " allowed)");
  }
  std::string body(static_cast<std::size_t>(len), '\0');
  Status s = read(body.data(), body.size());
  if (s.code() == Status::Code::kNotFound) return Status::IoError("data channel: the stream ended inside a frame");
  PHOS_RETURN_IF_ERROR(s);
  if (!message->ParseFromString(body)) return Status::InvalidArgument("data channel: a frame that does not parse");
  return Status::Ok();
}

namespace {

/// Reads the `raw` bytes announced by a message into `buffer`, then moves
/// it into the message's `bytes` field. `buffer` is the previous chunk's
/// (taken out before the parse, which would have emptied it): resizing it
/// to the usual chunk size costs nothing, where filling an emptied string
/// would write zeros over every byte first — ~10 % of a receiver's CPU.
Status ReadRaw(const ReadExactFn& read, std::uint64_t raw, bool has_inline, std::string buffer, std::string* bytes) {
  if (has_inline || raw > kMaxRawBytes) {
    return Status::InvalidArgument("data channel: raw bytes (" + std::to_string(raw) +
                                   ") beside inline data or a pre-copy reference, or over " +
                                   std::to_string(kMaxRawBytes));
  }
  buffer.resize(static_cast<std::size_t>(raw));
  Status s = read(buffer.data(), buffer.size());
  if (s.code() == Status::Code::kNotFound) return Status::IoError("data channel: the stream ended before its bytes");
  *bytes = std::move(buffer);
  return s;
}

}  // namespace

Status ReadImageChunk(const ReadExactFn& read, peer::v1::ImageChunk* chunk) {
  std::string buffer;
  if (chunk->kind_case() == peer::v1::ImageChunk::kData) buffer = std::move(*chunk->mutable_data()->mutable_data());
  PHOS_RETURN_IF_ERROR(ReadFrame(read, chunk));
  if (chunk->kind_case() != peer::v1::ImageChunk::kData || chunk->data().raw_bytes() == 0) return Status::Ok();
  peer::v1::FileData* data = chunk->mutable_data();
  PHOS_RETURN_IF_ERROR(ReadRaw(read, data->raw_bytes(), !data->data().empty() || data->has_ref(), std::move(buffer),
                               data->mutable_data()));
  data->set_raw_bytes(0);
  return Status::Ok();
}

Status ReadPrecopyChunk(const ReadExactFn& read, peer::v1::PrecopyChunk* chunk) {
  std::string buffer;
  if (chunk->kind_case() == peer::v1::PrecopyChunk::kData) buffer = std::move(*chunk->mutable_data()->mutable_data());
  PHOS_RETURN_IF_ERROR(ReadFrame(read, chunk));
  if (chunk->kind_case() != peer::v1::PrecopyChunk::kData || chunk->data().raw_bytes() == 0) return Status::Ok();
  peer::v1::PrecopyData* data = chunk->mutable_data();
  PHOS_RETURN_IF_ERROR(
      ReadRaw(read, data->raw_bytes(), !data->data().empty(), std::move(buffer), data->mutable_data()));
  data->set_raw_bytes(0);
  return Status::Ok();
}

void SetReceiveTimeout(int fd, int seconds) {
  timeval tv{};
  tv.tv_sec = seconds;
  (void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

void SetSocketTimeouts(int fd, int seconds) {
  SetReceiveTimeout(fd, seconds);
  timeval tv{};
  tv.tv_sec = seconds;
  (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

Status ReadChannelReply(int fd, int timeout_s, peer::v1::DataChannelReply* reply) {
  SetReceiveTimeout(fd, timeout_s);
  return ReadFrame(SocketReader(fd), reply);
}

}  // namespace phos::peer
