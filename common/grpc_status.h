// Maps a data-path Error to the gRPC status a CSI or agent caller expects.
#pragma once

#include <grpcpp/support/status.h>

#include <string_view>

#include "common/status.h"

namespace spoke {

// `context` is prepended to the message ("context: message") when given. A timeout maps to
// `timeout_code`: UNAVAILABLE where the caller should retry against a hub that did not
// answer (the controller), DEADLINE_EXCEEDED where a local dependency hung (the node).
grpc::Status ToGrpcStatus(const Error& e, std::string_view context = {},
                          grpc::StatusCode timeout_code = grpc::StatusCode::UNAVAILABLE);

}  // namespace spoke
