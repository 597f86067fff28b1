// kiln::Error and kiln::Result<T>: errors are values in the supervisor and the server.
// Result<T> is shaped like C++23 std::expected<T, Error> so it can become an alias.
// Third-party exceptions are caught at the adapter that wraps the library, never deeper.
#pragma once

#include <cerrno>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "base/setup_step.h"

namespace kiln {

// abseil's canonical codes; src/server maps them to HTTP in one table.
enum class Code {
  kOk = 0,
  kCancelled,
  kUnknown,
  kInvalidArgument,
  kDeadlineExceeded,
  kNotFound,
  kAlreadyExists,
  kPermissionDenied,
  kResourceExhausted,
  kFailedPrecondition,
  kAborted,
  kOutOfRange,
  kUnimplemented,
  kInternal,
  kUnavailable,
  kDataLoss,
  kUnauthenticated,
  kGone,  // existed and is no more, for a known reason (a reaped session: HTTP 410)
};

std::string_view ToString(Code code);

// What failed. An error a client of kiln's APIs sees is the structured
// {code, reason, field} of docs/api.md ({"error": {"code", "message",
// "field"}}): `api_code` (or, when empty, the default of `code`), `message`
// and `field`, each set where the error is made; src/server/server.cc maps
// them to HTTP in one table. Nothing parses a message for a code or a field.
struct Error {
  Error() = default;
  Error(Code c, int err, SetupStep s, std::string m, std::string f = {}, std::string api = {})
      : code(c),
        sys_errno(err),
        step(s),
        message(std::move(m)),
        field(std::move(f)),
        api_code(std::move(api)) {}

  Code code = Code::kUnknown;
  int sys_errno = 0;  // 0 when no system call failed
  SetupStep step = SetupStep::kNone;
  std::string message;   // the reason: names the call or field that failed
  std::string field;     // the request field it is about ("memory", "files"); empty: none
  std::string api_code;  // the API's code when it says more than `code` ("session_busy")

  // "message: strerror (step)" for logs and CLI output.
  std::string ToString() const;
};

// Builds an Error from errno for a failed call named in `what`.
Error ErrnoError(std::string what, int err = errno, SetupStep step = SetupStep::kNone);
Error MakeError(Code code, std::string message, SetupStep step = SetupStep::kNone);
inline Error InvalidArgument(std::string message) {
  return MakeError(Code::kInvalidArgument, std::move(message));
}
inline Error FailedPrecondition(std::string message) {
  return MakeError(Code::kFailedPrecondition, std::move(message));
}
inline Error Internal(std::string message) {
  return MakeError(Code::kInternal, std::move(message));
}
// kInvalidArgument about a request field; the message still starts with it
// ("memory: 8 GiB is over the profile's maximum of 2 GiB").
inline Error InvalidField(std::string field, std::string message) {
  Error e = MakeError(Code::kInvalidArgument, std::move(message));
  e.field = std::move(field);
  return e;
}
// `e` about a request field.
inline Error WithField(Error e, std::string field) {
  e.field = std::move(field);
  return e;
}
// `e` with the API's code for it (and the field it is about, when given).
inline Error WithApiCode(Error e, std::string api_code, std::string field = "") {
  e.api_code = std::move(api_code);
  if (!field.empty()) e.field = std::move(field);
  return e;
}

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}      // NOLINT(google-explicit-constructor)
  Result(Error error) : v_(std::move(error)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  const Error& error() const& { return std::get<1>(v_); }
  Error&& error() && { return std::get<1>(std::move(v_)); }

 private:
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error)
      : error_(std::move(error)), ok_(false) {}  // NOLINT(google-explicit-constructor)
  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const& { return error_; }
  Error&& error() && { return std::move(error_); }

 private:
  Error error_;
  bool ok_ = true;
};

using Status = Result<void>;
inline Status OkStatus() { return {}; }

}  // namespace kiln

#define KILN_CONCAT_INNER(a, b) a##b
#define KILN_CONCAT(a, b) KILN_CONCAT_INNER(a, b)

// Returns the error of `expr` (a Result) from the enclosing function.
#define KILN_TRY(expr)                            \
  do {                                            \
    auto kiln_try_result_ = (expr);               \
    if (!kiln_try_result_.ok()) {                 \
      return std::move(kiln_try_result_).error(); \
    }                                             \
  } while (0)

#define KILN_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return std::move(tmp).error();    \
  lhs = std::move(tmp).value()

// `lhs = value of expr`, or return its error.
#define KILN_ASSIGN_OR_RETURN(lhs, expr) \
  KILN_ASSIGN_OR_RETURN_IMPL(KILN_CONCAT(kiln_aor_, __LINE__), lhs, expr)
