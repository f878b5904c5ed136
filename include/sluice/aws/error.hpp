#pragma once
// One error type for everything the AWS layer can report, carrying its class so
// that callers (retry, the container) can decide without parsing messages.

#include <stdexcept>
#include <string>

namespace sluice::aws {

enum class ErrorKind {
  transport,      // connection refused/reset, DNS failure, TLS failure: retriable
  timeout,        // connect or request timed out: retriable
  throttling,     // the service asked us to slow down: retriable with throttling backoff
  server,         // 5xx from the service: retriable
  client,         // 4xx other than throttling: not retriable (bad request, missing queue, ...)
  credentials,    // no usable credentials: not retriable by the request layer
  configuration,  // no region, malformed endpoint, invalid argument: fatal
  integrity,      // MD5 mismatch or a malformed response: not retriable
  cancelled,      // the operation was cancelled (shutdown)
};

const char* to_string(ErrorKind kind);

class AwsError : public std::runtime_error {
 public:
  AwsError(ErrorKind kind, std::string message, std::string code = {}, int http_status = 0,
           std::string request_id = {});

  ErrorKind kind() const { return kind_; }
  // Service error code, e.g. "QueueDoesNotExist" (empty for local errors).
  const std::string& code() const { return code_; }
  int http_status() const { return http_status_; }
  const std::string& request_id() const { return request_id_; }
  bool retryable() const;

 private:
  ErrorKind kind_;
  std::string code_;
  int http_status_;
  std::string request_id_;
};

}  // namespace sluice::aws
