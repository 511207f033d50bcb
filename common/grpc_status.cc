#include "common/grpc_status.h"

#include <string>

namespace spoke {

grpc::Status ToGrpcStatus(const Error& e, std::string_view context, grpc::StatusCode timeout_code) {
  grpc::StatusCode code = grpc::StatusCode::INTERNAL;
  switch (e.code()) {
    case Code::kOk:
      return grpc::Status::OK;
    case Code::kInvalidArgument:
      code = grpc::StatusCode::INVALID_ARGUMENT;
      break;
    case Code::kNotFound:
      code = grpc::StatusCode::NOT_FOUND;
      break;
    case Code::kAlreadyExists:
      code = grpc::StatusCode::ALREADY_EXISTS;
      break;
    case Code::kPermissionDenied:
      code = grpc::StatusCode::PERMISSION_DENIED;
      break;
    case Code::kUnavailable:
      code = grpc::StatusCode::UNAVAILABLE;
      break;
    case Code::kTimeout:
      code = timeout_code;
      break;
    case Code::kNoSpace:
      code = grpc::StatusCode::RESOURCE_EXHAUSTED;
      break;
    case Code::kCancelled:
    case Code::kInterrupted:
      code = grpc::StatusCode::ABORTED;
      break;
    case Code::kReadOnly:
    case Code::kNotEmpty:
      code = grpc::StatusCode::FAILED_PRECONDITION;
      break;
    case Code::kIo:
    case Code::kChecksum:
    case Code::kInternal:
      code = grpc::StatusCode::INTERNAL;
      break;
  }
  if (context.empty()) return grpc::Status(code, e.message());
  return grpc::Status(code, std::string(context) + ": " + e.message());
}

}  // namespace spoke
