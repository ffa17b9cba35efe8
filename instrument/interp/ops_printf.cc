// vprintf(format, args): what device-side printf compiles to. nvcc packs
// the arguments into a buffer, each at its natural alignment (char/short
// promoted to a 4-byte int, float to an 8-byte double, pointers and long
// long 8 bytes) and passes the format string and the buffer's generic
// address. The interpreter formats each conversion with the host's
// snprintf (same flags, width and precision; the argument read at the size
// its length modifier gives) and appends the text to the launch's
// DeviceOutput (launch.h), which phosd hands to the app at its next
// synchronizing call — where a GPU's driver prints its printf FIFO. The
// return value is what CUDA documents: the number of arguments read, -1
// for a null format.
#include <cstdio>
#include <cstring>
#include <string>

#include "interp/device_output.h"
#include "interp/exec.h"

namespace phos::interp {

namespace {

constexpr size_t kMaxFormat = 4096;  // bytes of a format string or %s argument

class ArgReader {
 public:
  ArgReader(Exec& x, uint64_t base) : x_(x), base_(base) {}
  // The next argument of `bytes` (4 or 8) at its alignment; false when the
  // buffer cannot be read.
  bool Next(size_t bytes, uint64_t* out) {
    off_ = (off_ + bytes - 1) / bytes * bytes;
    const uint8_t* p = Resolve(x_, ptx::Space::kNone, base_ + off_, bytes, false);
    if (p == nullptr) return false;
    *out = 0;
    std::memcpy(out, p, bytes);
    off_ += bytes;
    ++count_;
    return true;
  }
  int count() const { return count_; }

 private:
  Exec& x_;
  uint64_t base_;
  uint64_t off_ = 0;
  int count_ = 0;
};

// Formats `fmt` with the arguments of `args` into *out. Returns the number
// of arguments read, or -2 when the argument buffer could not be read.
int Format(Exec& x, const std::string& fmt, uint64_t args, std::string* out) {
  ArgReader reader(x, args);
  char buf[512];
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out->push_back(fmt[i]);
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '%') {
      out->push_back('%');
      ++i;
      continue;
    }
    // %[flags][width][.precision][length]conversion
    std::string spec = "%";
    size_t j = i + 1;
    while (j < fmt.size() && std::strchr("-+ #0", fmt[j]) != nullptr) spec.push_back(fmt[j++]);
    auto width_or_precision = [&]() -> bool {
      if (j < fmt.size() && fmt[j] == '*') {
        uint64_t v = 0;
        if (!reader.Next(4, &v)) return false;
        spec += std::to_string(static_cast<int32_t>(v));
        ++j;
        return true;
      }
      while (j < fmt.size() && fmt[j] >= '0' && fmt[j] <= '9') spec.push_back(fmt[j++]);
      return true;
    };
    if (!width_or_precision()) return -2;
    if (j < fmt.size() && fmt[j] == '.') {
      spec.push_back('.');
      ++j;
      if (!width_or_precision()) return -2;
    }
    bool wide = false;  // an 8-byte integer argument
    while (j < fmt.size() && std::strchr("hlLqjzt", fmt[j]) != nullptr) {
      if (std::strchr("lLqjzt", fmt[j]) != nullptr) wide = true;
      ++j;
    }
    if (j >= fmt.size()) {  // a dangling '%': printed as written
      out->append(fmt, i, std::string::npos);
      break;
    }
    const char conv = fmt[j];
    uint64_t v = 0;
    int n = 0;
    switch (conv) {
      case 'd': case 'i':
        if (!reader.Next(wide ? 8 : 4, &v)) return -2;
        n = std::snprintf(buf, sizeof buf, (spec + "lld").c_str(),
                          wide ? static_cast<long long>(v) : static_cast<long long>(static_cast<int32_t>(v)));
        break;
      case 'u': case 'o': case 'x': case 'X':
        if (!reader.Next(wide ? 8 : 4, &v)) return -2;
        n = std::snprintf(buf, sizeof buf, (spec + "ll" + conv).c_str(),
                          static_cast<unsigned long long>(wide ? v : static_cast<uint32_t>(v)));
        break;
      case 'c':
        if (!reader.Next(4, &v)) return -2;
        n = std::snprintf(buf, sizeof buf, (spec + "c").c_str(), static_cast<int>(static_cast<int32_t>(v)));
        break;
      case 'f': case 'F': case 'e': case 'E': case 'g': case 'G': case 'a': case 'A': {
        if (!reader.Next(8, &v)) return -2;
        double d;
        std::memcpy(&d, &v, 8);
        n = std::snprintf(buf, sizeof buf, (spec + conv).c_str(), d);
        break;
      }
      case 'p':
        if (!reader.Next(8, &v)) return -2;
        n = std::snprintf(buf, sizeof buf, (spec + "p").c_str(), reinterpret_cast<void*>(v));
        break;
      case 's': {
        if (!reader.Next(8, &v)) return -2;
        const std::string s = v == 0 ? "(null)" : DeviceString(x, v, kMaxFormat);
        n = std::snprintf(buf, sizeof buf, (spec + "s").c_str(), s.c_str());
        if (n >= static_cast<int>(sizeof buf)) {  // long strings: no width to honour past the buffer
          out->append(s);
          n = -1;
        }
        break;
      }
      default:  // an unknown conversion is printed as written
        out->append(fmt, i, j + 1 - i);
        n = -1;
        break;
    }
    if (n > 0) out->append(buf, static_cast<size_t>(std::min<int>(n, sizeof buf - 1)));
    i = j;
  }
  return reader.count();
}

}  // namespace

Flow ExecVprintf(Exec& x, const Op& op) {
  const uint64_t fmt_addr = op.shape[1] > 0 ? CallArg(x, op, 0) : 0;
  const uint64_t args = op.shape[1] > 1 ? CallArg(x, op, 1) : 0;
  if (fmt_addr == 0) {
    return SetCallReturn(x, op, static_cast<uint64_t>(-1), 4);
  }
  std::string text;
  const int read = Format(x, DeviceString(x, fmt_addr, kMaxFormat), args, &text);
  x.error.clear();  // an unreadable argument is the printf's error (-2), not the kernel's
  if (read >= 0 && x.b->opts->device_output != nullptr) x.b->opts->device_output->Append(text);
  return SetCallReturn(x, op, static_cast<uint64_t>(static_cast<int64_t>(read)), 4);
}

}  // namespace phos::interp
