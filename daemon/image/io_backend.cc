#include "image/io_backend.h"

#include <mutex>
#include <set>

#include <spdlog/spdlog.h>

#include "image/pwrite_io.h"
#include "image/uring_io.h"

namespace phos::image {
namespace {

// Says which backend is used and why once per process (and per distinct
// reason); repeats go to debug so every checkpoint does not log it again.
void LogOnce(spdlog::level::level_enum level, const std::string& message) {
  static std::mutex mu;
  static std::set<std::string> seen;
  bool first;
  {
    std::lock_guard<std::mutex> lock(mu);
    first = seen.insert(message).second;
  }
  spdlog::log(first ? level : spdlog::level::debug, "{}", message);
}

}  // namespace

Status PoolFor(const IoOptions& options, std::shared_ptr<BufferPool>* out) {
  if (options.pool) {
    if (options.pool->buffer_bytes() < options.buffer_bytes) {
      return Status::InvalidArgument("the shared image I/O buffers hold " +
                                     std::to_string(options.pool->buffer_bytes()) +
                                     " bytes, a chunk needs " +
                                     std::to_string(options.buffer_bytes));
    }
    *out = options.pool;
    return Status::Ok();
  }
  std::unique_ptr<BufferPool> pool;
  PHOS_RETURN_IF_ERROR(
      BufferPool::Create(options.queue_depth, options.buffer_bytes, options.pin, &pool));
  *out = std::move(pool);
  return Status::Ok();
}

namespace {
/// The reads already happened (the default StartReads): Wait returns how.
class FinishedReads : public IoBackend::PendingReads {
 public:
  explicit FinishedReads(Status s) : status_(std::move(s)) {}
  Status Wait() override { return status_; }

 private:
  Status status_;
};
}  // namespace

Status IoBackend::StartReads(std::span<ReadOp> ops, std::unique_ptr<PendingReads>* out) {
  *out = std::make_unique<FinishedReads>(ReadBatch(ops));
  return Status::Ok();
}

Status OpenIoBackend(const std::string& path, IoMode mode, const IoOptions& options,
                     std::unique_ptr<IoBackend>* out) {
  if (options.force_pwrite) {
    LogOnce(spdlog::level::info, "image I/O: using pwrite/pread (forced by option)");
    return PwriteIo::Open(path, mode, options, out);
  }
  Status s = UringIo::Open(path, mode, options, out);
  if (s.ok()) {
    LogOnce(spdlog::level::info, "image I/O: using io_uring + O_DIRECT, " +
                                     std::to_string(options.queue_depth) + " requests in flight");
    return s;
  }
  if (s.code() != Status::Code::kNotSupported) return s;
  LogOnce(spdlog::level::warn,
          "image I/O: falling back to pwrite/pread (slower): " + s.message());
  return PwriteIo::Open(path, mode, options, out);
}

}  // namespace phos::image
