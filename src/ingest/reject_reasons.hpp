#pragma once
// Every reason the record stage rejects a message with (a label of
// sluice_rejected_total, `sluice rejects --reason`).
#include <string>
#include <vector>

namespace sluice::ingest {

inline const std::vector<std::string> kRejectReasons = {
    "malformed",       "validation",          "schema_drift",      "sink_refused",
    "payload_missing", "payload_unavailable", "payload_too_large", "line_too_long"};

}  // namespace sluice::ingest
