#include "common/status.h"

namespace spoke {

std::string_view CodeName(Code code) {
  switch (code) {
    case Code::kOk:
      return "ok";
    case Code::kInvalidArgument:
      return "invalid_argument";
    case Code::kNotFound:
      return "not_found";
    case Code::kAlreadyExists:
      return "already_exists";
    case Code::kPermissionDenied:
      return "permission_denied";
    case Code::kReadOnly:
      return "read_only";
    case Code::kNotEmpty:
      return "not_empty";
    case Code::kNoSpace:
      return "no_space";
    case Code::kUnavailable:
      return "unavailable";
    case Code::kTimeout:
      return "timeout";
    case Code::kIo:
      return "io";
    case Code::kChecksum:
      return "checksum";
    case Code::kCancelled:
      return "cancelled";
    case Code::kInterrupted:
      return "interrupted";
    case Code::kInternal:
      return "internal";
  }
  return "unknown";
}

Error Error::FromErrno(int err, std::string message) {
  if (err < 0) err = -err;
  Code code;
  switch (err) {
    case 0:
      code = Code::kInternal;
      break;
    case EINVAL:
    case ENAMETOOLONG:
      code = Code::kInvalidArgument;
      break;
    case ENOENT:
    case ESTALE:
      code = Code::kNotFound;
      break;
    case EEXIST:
      code = Code::kAlreadyExists;
      break;
    case EACCES:
    case EPERM:
      code = Code::kPermissionDenied;
      break;
    case EROFS:
      code = Code::kReadOnly;
      break;
    case ENOTEMPTY:
      code = Code::kNotEmpty;
      break;
    case ENOSPC:
    case EDQUOT:
      code = Code::kNoSpace;
      break;
    case ETIMEDOUT:
      code = Code::kTimeout;
      break;
    case ECONNREFUSED:
    case ECONNRESET:
    case EHOSTUNREACH:
    case ENETUNREACH:
    case ENOTCONN:
    case EPIPE:
      code = Code::kUnavailable;
      break;
    case ECANCELED:
      code = Code::kCancelled;
      break;
    default:
      code = Code::kIo;
      break;
  }
  Error e(code, std::move(message));
  e.errno_ = err;
  return e;
}

int Error::ToErrno() const {
  if (errno_ != 0) return errno_;
  switch (code_) {
    case Code::kOk:
      return 0;
    case Code::kInvalidArgument:
      return EINVAL;
    case Code::kNotFound:
      return ENOENT;
    case Code::kAlreadyExists:
      return EEXIST;
    case Code::kPermissionDenied:
      return EACCES;
    case Code::kReadOnly:
      return EROFS;
    case Code::kNotEmpty:
      return ENOTEMPTY;
    case Code::kNoSpace:
      return ENOSPC;
    case Code::kUnavailable:
      return EIO;
    case Code::kTimeout:
      return EIO;  // readers see EIO; the log says which bound expired
    case Code::kIo:
      return EIO;
    case Code::kChecksum:
      return EIO;
    case Code::kCancelled:
    case Code::kInterrupted:
      return EINTR;
    case Code::kInternal:
      return EIO;
  }
  return EIO;
}

std::string Error::ToString() const { return std::string(CodeName(code_)) + ": " + message_; }

Error Error::Wrap(std::string_view context) const {
  Error e = *this;
  e.message_ = std::string(context) + ": " + message_;
  return e;
}

}  // namespace spoke
