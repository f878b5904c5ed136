#pragma once
// `sluice ctl pause|resume|status`: the admin endpoints (observe/admin.hpp) of a running
// sluice, from a shell. The token, when the endpoint needs one, is read from
// SLUICE_ADMIN_TOKEN, never from the command line (where `ps` would show it).

#include <string>

namespace sluice::app {

struct CtlOptions {
  std::string action;  // pause | resume | status
  std::string url = "http://127.0.0.1:9464";
  std::string pipeline;  // empty with status: every pipeline
};

// 0 done; 1 the endpoint did not answer or refused the token; 2 bad usage or an
// unknown pipeline.
int run_ctl(const CtlOptions& options);

}  // namespace sluice::app
