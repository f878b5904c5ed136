#pragma once
// The admin endpoints on the metrics server (admin.enabled): pause, resume and the
// state of the process's pipelines.
//   GET  /pipelines              every pipeline's state, as JSON
//   GET  /pipelines/NAME         one pipeline's
//   POST /pipelines/NAME/pause   stop receiving; what it holds is finished (leases kept)
//   POST /pipelines/NAME/resume  receive again
// With a token (SLUICE_ADMIN_TOKEN; required when the listener is not loopback) every
// admin request needs `Authorization: Bearer TOKEN`: without it 401, nothing changes.

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "observe/http_endpoint.hpp"

namespace sluice::app {

// What the endpoints can do to one pipeline; any thread.
class PipelineControl {
 public:
  virtual ~PipelineControl() = default;
  virtual const std::string& name() const = 0;
  virtual void pause() = 0;
  virtual void resume() = 0;
  // {"pipeline": NAME, "state": "running" | "paused" | "sink_unavailable", ...}
  virtual nlohmann::json status() const = 0;
};

// Why a token cannot be a bearer token (RFC 6750: visible ASCII, no spaces; a secret
// read from a file often ends in a newline), or empty when it can. Never quotes it.
std::string admin_token_problem(std::string_view token);

// A pipeline's name as the admin paths carry it (/pipelines/NAME): 1 to 64 letters,
// digits, '.', '_' or '-', so that it needs no escaping.
bool is_pipeline_name(std::string_view name);
inline constexpr const char* kPipelineNameExpected = "1 to 64 letters, digits, '.', '_' or '-'";

// Answers `exchange` when its target is an admin path (true), else leaves it (false).
bool answer_admin(MetricsServer::Exchange& exchange, const std::vector<PipelineControl*>& pipelines,
                  const std::string& token);

}  // namespace sluice::app
