// Helpers shared by the tests that launch kernels in the PTX interpreter.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace phos::test {

/// A kernel parameter buffer laid out as the .param list: each argument at
/// its natural alignment, in order.
class KernelParams {
 public:
  template <typename T>
  KernelParams& Add(const T& v) {
    size_t off = (buf_.size() + alignof(T) - 1) / alignof(T) * alignof(T);
    buf_.resize(off + sizeof(T));
    std::memcpy(buf_.data() + off, &v, sizeof(T));
    return *this;
  }
  const uint8_t* data() const { return buf_.data(); }
  size_t size() const { return buf_.size(); }

 private:
  std::vector<uint8_t> buf_;
};

/// The whole file as text ("" if it cannot be read).
inline std::string ReadTextFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace phos::test
