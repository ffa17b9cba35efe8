// DeviceOutput: what kernels print with printf (vprintf), collected for the
// host. A GPU writes device printf records into a FIFO of
// cudaLimitPrintfFifoSize bytes and the driver prints them at the next
// synchronization; records that do not fit are lost. The sim keeps the
// formatted text the same way: appended by the interpreter's worker threads
// as kernels run, taken by whoever brings it to the app (phosd's session,
// at a synchronizing call), bounded by the FIFO size.
//
// Lock: mu_ guards every member; any thread may call any method.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

namespace phos::interp {

class DeviceOutput {
 public:
  // CUDA's default cudaLimitPrintfFifoSize.
  static constexpr size_t kDefaultLimit = size_t{1} << 20;

  explicit DeviceOutput(size_t limit = kDefaultLimit) : limit_(limit) {}

  // Appends one printf's text whole, or drops it (counted) when the FIFO
  // has no room for it.
  void Append(std::string_view text);
  // Moves up to `max` bytes from the front into *out (replacing it).
  void Take(size_t max, std::string* out);
  // cudaLimitPrintfFifoSize: text already kept stays; later appends see it.
  void SetLimit(size_t limit);
  size_t pending() const;
  uint64_t dropped() const;

 private:
  mutable std::mutex mu_;
  size_t limit_;
  std::string text_;
  uint64_t dropped_ = 0;
};

}  // namespace phos::interp
