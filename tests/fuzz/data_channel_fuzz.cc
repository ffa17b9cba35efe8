// libFuzzer target for the data channel's framing (daemon/peer/
// data_channel.h): what a source sends on the raw TCP connection after its
// ticket — length-prefixed ImageChunk frames, a FileData's raw bytes after
// it. ReadImageChunk is called until it fails or the input ends; no input
// may crash phosd, allocate beyond the frame and raw-run limits, or hand
// the receiver a chunk that still says raw bytes follow.
//
// The input is the byte stream itself. Seeds: corpus/data_channel
// (make_data_channel_seeds.py).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "peer/data_channel.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::size_t at = 0;
  const phos::peer::ReadExactFn read = [&](void* p, std::size_t n) -> phos::Status {
    if (at == size) return phos::Status::NotFound("end of stream");
    if (n > size - at) {
      at = size;
      return phos::Status::IoError("short");
    }
    std::memcpy(p, data + at, n);
    at += n;
    return phos::Status::Ok();
  };
  phos::peer::v1::ImageChunk chunk;
  for (int i = 0; i < 64; ++i) {
    chunk.Clear();
    if (!phos::peer::ReadImageChunk(read, &chunk).ok()) break;
    if (chunk.kind_case() == phos::peer::v1::ImageChunk::kData) {
      if (chunk.data().raw_bytes() != 0) std::abort();  // raw bytes must have been read into data
      if (chunk.data().data().size() > phos::peer::kMaxRawBytes) std::abort();
    }
  }
  return 0;
}
