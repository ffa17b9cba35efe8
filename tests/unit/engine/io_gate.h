// An I/O gate for engine tests: wraps the real image IoBackend so that the
// first chunk write at or past a given file offset blocks until the test
// opens the gate. Holds a checkpoint's copier at a known point (writes run
// on the copier's thread: ImageWriter::Write), so a test can act while the
// checkpoint is in the middle of its copy without racing it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

#include "common/status.h"
#include "image/io_backend.h"

namespace phos::engine::testing {

// Shared by the factory and the test. mu guards reached and open.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool reached = false;
  bool open = false;

  // The writer's side: says it got here, then waits for Open().
  void Reach() {
    std::unique_lock<std::mutex> lock(mu);
    reached = true;
    cv.notify_all();
    cv.wait(lock, [&] { return open; });
  }
  bool WaitReached(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, timeout, [&] { return reached; });
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu);
    open = true;
    cv.notify_all();
  }
};

class GatedIo final : public image::IoBackend {
 public:
  GatedIo(std::unique_ptr<image::IoBackend> io, std::shared_ptr<Gate> gate, std::uint64_t min_offset)
      : io_(std::move(io)), gate_(std::move(gate)), min_offset_(min_offset) {}
  std::string_view name() const override { return io_->name(); }
  const std::string& path() const override { return io_->path(); }
  std::size_t buffer_bytes() const override { return io_->buffer_bytes(); }
  Status Acquire(image::IoBuffer** out) override { return io_->Acquire(out); }
  image::IoBuffer* TryAcquire() override { return io_->TryAcquire(); }
  void Release(image::IoBuffer* buf) override { io_->Release(buf); }
  Status WriteAsync(image::IoBuffer* buf, std::uint64_t offset, std::size_t len) override {
    if (offset >= min_offset_) gate_->Reach();
    return io_->WriteAsync(buf, offset, len);
  }
  Status Drain() override { return io_->Drain(); }
  Status Sync() override { return io_->Sync(); }
  Status Truncate(std::uint64_t bytes) override { return io_->Truncate(bytes); }
  Status Read(image::IoBuffer* buf, std::uint64_t offset, std::size_t len, std::size_t* got) override {
    return io_->Read(buf, offset, len, got);
  }

 private:
  std::unique_ptr<image::IoBackend> io_;
  std::shared_ptr<Gate> gate_;
  const std::uint64_t min_offset_;
};

// Image backends whose first write at or past `min_offset` (0: the first
// write) waits for gate->Open().
inline image::IoBackendFactory GatedIoFactory(std::shared_ptr<Gate> gate, std::uint64_t min_offset = 0) {
  return [gate, min_offset](const std::string& path, image::IoMode mode, const image::IoOptions& options,
                            std::unique_ptr<image::IoBackend>* out) {
    std::unique_ptr<image::IoBackend> io;
    PHOS_RETURN_IF_ERROR(image::OpenIoBackend(path, mode, options, &io));
    *out = std::make_unique<GatedIo>(std::move(io), gate, min_offset);
    return Status::Ok();
  };
}

}  // namespace phos::engine::testing
