#include "interp/device_output.h"

#include <algorithm>

namespace phos::interp {

void DeviceOutput::Append(std::string_view text) {
  std::lock_guard<std::mutex> lock(mu_);
  if (text.size() > limit_ - std::min(limit_, text_.size())) {
    ++dropped_;
    return;
  }
  text_.append(text);
}

void DeviceOutput::Take(size_t max, std::string* out) {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t n = std::min(max, text_.size());
  out->assign(text_, 0, n);
  text_.erase(0, n);
}

size_t DeviceOutput::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return text_.size();
}

uint64_t DeviceOutput::dropped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_;
}

void DeviceOutput::SetLimit(size_t limit) {
  std::lock_guard<std::mutex> lock(mu_);
  limit_ = limit;
}

}  // namespace phos::interp
