#include "sluice/aws/error.hpp"

namespace sluice::aws {

const char* to_string(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::transport:
      return "transport";
    case ErrorKind::timeout:
      return "timeout";
    case ErrorKind::throttling:
      return "throttling";
    case ErrorKind::server:
      return "server";
    case ErrorKind::client:
      return "client";
    case ErrorKind::credentials:
      return "credentials";
    case ErrorKind::configuration:
      return "configuration";
    case ErrorKind::integrity:
      return "integrity";
    case ErrorKind::cancelled:
      return "cancelled";
  }
  return "unknown";
}

AwsError::AwsError(ErrorKind kind, std::string message, std::string code, int http_status,
                   std::string request_id)
    : std::runtime_error(std::move(message)),
      kind_(kind),
      code_(std::move(code)),
      http_status_(http_status),
      request_id_(std::move(request_id)) {}

bool AwsError::retryable() const {
  switch (kind_) {
    case ErrorKind::transport:
    case ErrorKind::timeout:
    case ErrorKind::throttling:
    case ErrorKind::server:
      return true;
    default:
      return false;
  }
}

}  // namespace sluice::aws
