#include "base/result.h"

#include <cstring>

namespace kiln {

std::string_view ToString(Code code) {
  switch (code) {
    case Code::kOk: return "ok";
    case Code::kCancelled: return "cancelled";
    case Code::kUnknown: return "unknown";
    case Code::kInvalidArgument: return "invalid_argument";
    case Code::kDeadlineExceeded: return "deadline_exceeded";
    case Code::kNotFound: return "not_found";
    case Code::kAlreadyExists: return "already_exists";
    case Code::kPermissionDenied: return "permission_denied";
    case Code::kResourceExhausted: return "resource_exhausted";
    case Code::kFailedPrecondition: return "failed_precondition";
    case Code::kAborted: return "aborted";
    case Code::kOutOfRange: return "out_of_range";
    case Code::kUnimplemented: return "unimplemented";
    case Code::kInternal: return "internal";
    case Code::kUnavailable: return "unavailable";
    case Code::kDataLoss: return "data_loss";
    case Code::kUnauthenticated: return "unauthenticated";
    case Code::kGone: return "gone";
  }
  return "unknown";
}

std::string Error::ToString() const {
  std::string out = message;
  if (sys_errno != 0) {
    out += ": ";
    out += std::strerror(sys_errno);
  }
  if (step != SetupStep::kNone) {
    out += " (step ";
    out += kiln::ToString(step);
    out += ")";
  }
  return out;
}

Error ErrnoError(std::string what, int err, SetupStep step) {
  Code code = Code::kInternal;
  switch (err) {
    case EPERM:
    case EACCES: code = Code::kPermissionDenied; break;
    case ENOENT: code = Code::kNotFound; break;
    case EEXIST: code = Code::kAlreadyExists; break;
    case EINVAL: code = Code::kInvalidArgument; break;
    case ENOSYS:
    case EOPNOTSUPP: code = Code::kUnimplemented; break;
    case ENOMEM:
    case ENOSPC:
    case EAGAIN: code = Code::kResourceExhausted; break;
    default: break;
  }
  return Error{code, err, step, std::move(what)};
}

Error MakeError(Code code, std::string message, SetupStep step) {
  return Error{code, 0, step, std::move(message)};
}

}  // namespace kiln
