#include "common/status.h"

#include <cstring>
#include <string>

namespace phos {

std::string_view CodeName(Status::Code code) {
  switch (code) {
    case Status::Code::kOk: return "OK";
    case Status::Code::kInvalidArgument: return "InvalidArgument";
    case Status::Code::kNotFound: return "NotFound";
    case Status::Code::kAlreadyExists: return "AlreadyExists";
    case Status::Code::kOutOfMemory: return "OutOfMemory";
    case Status::Code::kNotSupported: return "NotSupported";
    case Status::Code::kNotReady: return "NotReady";
    case Status::Code::kUnavailable: return "Unavailable";
    case Status::Code::kIoError: return "IoError";
    case Status::Code::kCorruption: return "Corruption";
    case Status::Code::kFailedPrecondition: return "FailedPrecondition";
    case Status::Code::kInternal: return "Internal";
  }
  return "Unknown";
}

Status Status::FromErrno(std::string_view what, int err) {
  std::string m(what);
  m += ": ";
  m += std::strerror(err);
  return Status(Code::kIoError, std::move(m));
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string s(CodeName(code_));
  s += ": ";
  s += message_;
  return s;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  std::string m(context);
  m += ": ";
  m += message_;
  return Status(code_, std::move(m)).WithApiError(api_error_);
}

}  // namespace phos
