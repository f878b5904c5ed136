#pragma once
// `sluice health`.

#include <string>


namespace sluice::app {

// GET `url` (a sluice /healthz or /readyz): 0 when it answers 200 within 5 s, 1
// otherwise (saying why on stderr), 2 when the URL is malformed.
int probe(const std::string& url);

// One HTTP request to a local endpoint (no proxy), on an I/O context of its own: the
// answer, or the transport's error thrown. For sluice health and sluice ctl.
}  // namespace sluice::app
