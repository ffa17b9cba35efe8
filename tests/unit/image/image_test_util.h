// Helpers shared by the image store tests: a scratch directory, random
// buffers, and writing a whole image in one call.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "image/image_writer.h"

namespace phos::image::testing {

/// mkdtemp under $TMPDIR (or /tmp), removed at scope exit.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& base = "") {
    std::string root = base;
    if (root.empty()) {
      const char* t = std::getenv("TMPDIR");
      root = t ? t : "/tmp";
    }
    std::string tmpl = root + "/phos-image-test-XXXXXX";
    char* p = ::mkdtemp(tmpl.data());
    if (p != nullptr) path_ = p;
  }
  ~ScratchDir() {
    if (!path_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(path_, ec);
    }
  }
  bool ok() const { return !path_.empty(); }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline std::vector<std::uint8_t> RandomBytes(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::uint8_t> v(n);
  for (auto& b : v) b = static_cast<std::uint8_t>(rng());
  return v;
}

inline v1::Manifest TestMetadata() {
  v1::Manifest m;
  m.set_session_id(42);
  m.set_pid(1234);
  m.add_cmdline("./train");
  m.add_cmdline("--epochs=3");
  m.set_mode("cow");
  m.set_keep(v1::KEEP_LATEST);
  m.set_device_name("sim0");
  return m;
}

struct TestBuffer {
  std::uint64_t addr;
  std::vector<std::uint8_t> data;
};

/// Buffers of the given sizes at increasing fake device addresses.
inline std::vector<TestBuffer> MakeBuffers(const std::vector<std::size_t>& sizes,
                                           std::uint32_t seed = 1) {
  std::vector<TestBuffer> out;
  std::uint64_t addr = 0x7f0000000000ull;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    out.push_back({addr, RandomBytes(sizes[i], seed + static_cast<std::uint32_t>(i))});
    addr += (sizes[i] + 0xffff) & ~0xffffull;
    addr += 0x10000;
  }
  return out;
}

/// Writes and commits an image of `buffers` at dir.
inline Status WriteImage(const std::string& dir, const std::vector<TestBuffer>& buffers,
                         const ImageWriterOptions& options, v1::Manifest metadata = TestMetadata()) {
  std::unique_ptr<ImageWriter> w;
  PHOS_RETURN_IF_ERROR(ImageWriter::Open(dir, metadata, options, &w));
  for (const TestBuffer& b : buffers) {
    std::size_t index = 0;
    PHOS_RETURN_IF_ERROR(w->AddBuffer(b.addr, b.data.size(), &index));
    PHOS_RETURN_IF_ERROR(w->WriteBuffer(index, b.data.data()));
  }
  return w->Commit();
}

/// Overwrites one byte of a file (XOR 0xff).
inline void FlipByte(const std::string& path, std::uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good()) << path;
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0xff);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

}  // namespace phos::image::testing
