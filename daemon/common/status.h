// phos::Status — the error type of every phos interface (LevelDB style).
//
// A Status is OK or carries a code and a message that says what failed and,
// where it helps, what to do. Functions return Status and write results
// through out-parameters; they never throw across an interface.
#pragma once

#include <string>
#include <string_view>
#include <utility>

namespace phos {

class Status {
 public:
  enum class Code {
    kOk = 0,
    kInvalidArgument,   // the caller passed something wrong
    kNotFound,          // no such object / file / pid
    kAlreadyExists,     // e.g. address range already mapped
    kOutOfMemory,       // device or host memory exhausted
    kNotSupported,      // feature or API not implemented by this backend
    kNotReady,          // async work still pending (cudaErrorNotReady)
    kUnavailable,       // a needed service (driver, daemon, GPU) is absent
    kIoError,           // a system call on a file or socket failed
    kCorruption,        // bad bytes in an image, fatbin, ...
    kFailedPrecondition,// object in the wrong state for this call
    kInternal,          // a bug in phos
  };

  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string m) { return {Code::kInvalidArgument, std::move(m)}; }
  static Status NotFound(std::string m) { return {Code::kNotFound, std::move(m)}; }
  static Status AlreadyExists(std::string m) { return {Code::kAlreadyExists, std::move(m)}; }
  static Status OutOfMemory(std::string m) { return {Code::kOutOfMemory, std::move(m)}; }
  static Status NotSupported(std::string m) { return {Code::kNotSupported, std::move(m)}; }
  static Status NotReady(std::string m = "not ready") { return {Code::kNotReady, std::move(m)}; }
  static Status Unavailable(std::string m) { return {Code::kUnavailable, std::move(m)}; }
  static Status IoError(std::string m) { return {Code::kIoError, std::move(m)}; }
  /// IoError with strerror(err) appended: "what: strerror".
  static Status FromErrno(std::string_view what, int err);
  static Status Corruption(std::string m) { return {Code::kCorruption, std::move(m)}; }
  static Status FailedPrecondition(std::string m) { return {Code::kFailedPrecondition, std::move(m)}; }
  static Status Internal(std::string m) { return {Code::kInternal, std::move(m)}; }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  /// "NotSupported: message" (or "OK").
  std::string ToString() const;

  /// Returns a copy whose message is "context: message" (OK stays OK).
  Status WithContext(std::string_view context) const;

  /// The CUDA error number the app must see for this failure, when the
  /// coarse code() cannot say it: a kernel fault (700, 710, 714..719) or
  /// "no kernel image for this device" (209), which the CUDA runtime
  /// itself tells apart (it tolerates 209 for a fatbin built for other
  /// GPUs; 7xx are sticky). 0: derive the app's error from code()
  /// (protocol/wire.h ToWire). Kept by WithContext.
  int api_error() const { return api_error_; }
  Status WithApiError(int api_error) const {
    Status s = *this;
    if (!ok()) s.api_error_ = api_error;
    return s;
  }

 private:
  Code code_ = Code::kOk;
  std::string message_;
  int api_error_ = 0;
};

std::string_view CodeName(Status::Code code);

}  // namespace phos

// Return early from the enclosing function when an expression fails.
#define PHOS_RETURN_IF_ERROR(expr)               \
  do {                                           \
    ::phos::Status _phos_status = (expr);        \
    if (!_phos_status.ok()) return _phos_status; \
  } while (0)
