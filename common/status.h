// Error type for data paths: no exceptions below start-up. Functions return
// Result<T> (= std::expected<T, Error>) and say in their comment which codes they return.
#pragma once

#include <cerrno>
#include <expected>
#include <string>
#include <string_view>

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
