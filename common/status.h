// Error type for data paths: no exceptions below start-up. Functions return
// Result<T> (= std::expected<T, Error>) and say in their comment which codes they return.
#pragma once

#include <cerrno>
#include <expected>
#include <string>
#include <string_view>
#include <utility>

namespace spoke {

enum class Code {
  kOk = 0,
  kInvalidArgument,  // caller's input is wrong; message names the field
  kNotFound,
  kAlreadyExists,
  kPermissionDenied,
  kReadOnly,
  kNotEmpty,
  kNoSpace,
  kUnavailable,  // hub or dependency unreachable (retry may help)
  kTimeout,      // a bounded wait expired; message says which bound
  kIo,           // device or network I/O error
  kChecksum,     // on-disk data failed verification
  kCancelled,
  // The caller gave up waiting (a signal: FUSE INTERRUPT); nothing failed. common/interrupt.h
  kInterrupted,
  kInternal,  // a bug
};

std::string_view CodeName(Code code);

class Error {
 public:
  Error(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  // Maps a negative or positive errno to a Code, keeping the errno for the FUSE edge.
  static Error FromErrno(int err, std::string message);

  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // The errno that best describes this error at a POSIX edge (FUSE).
  int ToErrno() const;
  std::string ToString() const;

  // Returns a copy with "context: " prepended to the message.
  Error Wrap(std::string_view context) const;

 private:
  Code code_;
  std::string message_;
  int errno_ = 0;  // original errno when known
};

template <typename T>
using Result = std::expected<T, Error>;
using Status = std::expected<void, Error>;

inline std::unexpected<Error> Fail(Code code, std::string message) {
  return std::unexpected<Error>(Error(code, std::move(message)));
}
inline Status Ok() { return {}; }

}  // namespace spoke

// Error propagation inside a function that returns Result<U> or Status:
//   SPOKE_RETURN_IF_ERROR(store.Sync());                      // a Status or any Result<T>
//   SPOKE_TRY(auto fd, OpenFile(path));                        // declares fd = the value
//   SPOKE_TRY(config.port, ParsePort(text));                   // or assigns an lvalue
//   SPOKE_TRY_WRAP(auto names, hub.List(dir), "listing " + dir);  // "listing d: <error>"
//   SPOKE_RETURN_IF_ERROR_WRAP(hub.Rename(a, b), "archiving " + a);
// `expr` is evaluated once; `context` (a std::string_view-convertible expression) only when
// `expr` failed, so a context built from strings costs nothing on the success path. The
// left-hand side of SPOKE_TRY cannot be a structured binding (its commas split the macro
// arguments); SPOKE_TRY declares a hidden variable: use it as a statement of its own (not
// the body of an unbraced if), at most once per line.
#define SPOKE_RETURN_IF_ERROR(expr)                                 \
  do {                                                              \
    if (auto spoke_status_ = (expr); !spoke_status_) [[unlikely]] { \
      return std::unexpected(std::move(spoke_status_).error());     \
    }                                                               \
  } while (false)

#define SPOKE_RETURN_IF_ERROR_WRAP(expr, context)                   \
  do {                                                              \
    if (auto spoke_status_ = (expr); !spoke_status_) [[unlikely]] { \
      return std::unexpected(spoke_status_.error().Wrap(context));  \
    }                                                               \
  } while (false)

#define SPOKE_TRY(lhs, expr)                                      \
  SPOKE_TRY_IMPL_(SPOKE_CONCAT_(spoke_try_, __LINE__), lhs, expr, \
                  std::move(SPOKE_CONCAT_(spoke_try_, __LINE__)).error())

#define SPOKE_TRY_WRAP(lhs, expr, context)                        \
  SPOKE_TRY_IMPL_(SPOKE_CONCAT_(spoke_try_, __LINE__), lhs, expr, \
                  SPOKE_CONCAT_(spoke_try_, __LINE__).error().Wrap(context))

// Implementation details of the macros above.
#define SPOKE_CONCAT_INNER_(a, b) a##b
#define SPOKE_CONCAT_(a, b) SPOKE_CONCAT_INNER_(a, b)
#define SPOKE_TRY_IMPL_(tmp, lhs, expr, error) \
  auto tmp = (expr);                           \
  if (!tmp) [[unlikely]]                       \
    return std::unexpected(error);             \
  lhs = std::move(tmp).value()
