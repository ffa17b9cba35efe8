// libFuzzer target for the image store's readers: phosd and `phos inspect`
// must refuse any damaged image cleanly (no crash, no out-of-bounds read,
// no huge allocation) whatever the bytes of manifest and gpu.img are.
//
// Input byte 0 picks the mode:
//   even, and not 2 mod 4: DecodeManifestFile over the rest (header,
//         checksum, protobuf, structural validation);
//   2 mod 4: DecodeJobManifest over the rest (a job image's `job` file:
//         magic, version, protobuf, rank directories);
//   odd:  bytes 1-2 (little-endian) give the manifest length m; the next m
//         bytes become DIR/manifest and the rest DIR/gpu.img, then
//         ImageReader::Open + VerifyAll run on DIR (pread backend: no
//         io_uring set-up per input).
// The manifest checksum makes most manifest mutations fail early; the seeds
// in tests/fuzz/corpus/image/ are two real images in both modes (buffers of
// 1 B and 5000 B in 4 KiB chunks; no buffers), so mutations of gpu.img (odd
// mode) reach the header and chunk checks. Run longer by hand as
// docs/testing.md says.
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include "image/image_reader.h"
#include "image/job_manifest.h"
#include "image/manifest_file.h"

namespace {

void WriteAll(const std::string& path, const uint8_t* data, size_t n) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) abort();
  while (n > 0) {
    ssize_t w = ::write(fd, data, n);
    if (w <= 0) abort();
    data += w;
    n -= static_cast<size_t>(w);
  }
  ::close(fd);
}

const std::string& ScratchDir() {
  static const std::string dir = [] {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base ? base : "/tmp") + "/phos-image-fuzz-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) abort();
    // libFuzzer ends with exit(): leave no scratch directory behind. The
    // path is copied to the heap (never freed) because `dir` itself may be
    // destroyed before this handler runs.
    static const std::string* doomed = new std::string(tmpl);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(*doomed, ec);
    });
    return tmpl;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace phos::image;
  if (size < 1) return 0;
  if ((data[0] & 3) == 2) {
    v1::JobManifest m;
    (void)DecodeJobManifest(std::string_view(reinterpret_cast<const char*>(data + 1), size - 1), "job", &m);
    return 0;
  }
  if ((data[0] & 1) == 0) {
    v1::Manifest m;
    (void)DecodeManifestFile({data + 1, size - 1}, &m);
    return 0;
  }
  if (size < 3) return 0;
  size_t mlen = static_cast<size_t>(data[1]) | (static_cast<size_t>(data[2]) << 8);
  const uint8_t* rest = data + 3;
  size_t rest_n = size - 3;
  if (mlen > rest_n) mlen = rest_n;
  const std::string& dir = ScratchDir();
  WriteAll(dir + "/manifest", rest, mlen);
  WriteAll(dir + "/gpu.img", rest + mlen, rest_n - mlen);
  ImageReaderOptions options;
  options.io.force_pwrite = true;
  std::unique_ptr<ImageReader> reader;
  if (ImageReader::Open(dir, options, &reader).ok()) (void)reader->VerifyAll();
  return 0;
}
