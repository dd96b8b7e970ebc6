#include "fabric_lib/status.h"

namespace fabric_lib {

std::string_view error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk: return "ok";
    case ErrorCode::kInvalidArgument: return "invalid_argument";
    case ErrorCode::kNotFound: return "not_found";
    case ErrorCode::kOutOfRange: return "out_of_range";
    case ErrorCode::kAlreadyExists: return "already_exists";
    case ErrorCode::kResourceExhausted: return "resource_exhausted";
    case ErrorCode::kMalformed: return "malformed";
    case ErrorCode::kUnsupported: return "unsupported";
    case ErrorCode::kStopped: return "stopped";
    case ErrorCode::kCancelled: return "cancelled";
    case ErrorCode::kDeadlineExceeded: return "deadline_exceeded";
    case ErrorCode::kPeerUnreachable: return "peer_unreachable";
    case ErrorCode::kDomainDown: return "domain_down";
    case ErrorCode::kProviderError: return "provider_error";
    case ErrorCode::kFailedPrecondition: return "failed_precondition";
    case ErrorCode::kInternal: return "internal";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  std::string s(error_code_name(code_));
  if (!message_.empty()) s += ": " + message_;
  return s;
}

}  // namespace fabric_lib
