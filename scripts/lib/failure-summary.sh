#!/usr/bin/env bash
# After a failed ctest run: the lines that say why each failed test failed (assertions,
# sanitizer reports, terminations), short enough to stay in a log's last screen.
# Usage: scripts/lib/failure-summary.sh BUILD_DIR
set -uo pipefail
log="$1/Testing/Temporary/LastTest.log"
[[ -f "$log" ]] || exit 0
echo "=== why the failed tests failed (from $log) ==="
awk '
  /^[0-9]+\/[0-9]+ Testing: / { name = $3; n = 0; out = 0; kept = ""; next }
  /^Output:$/ { out = 1; next }
  /^<end of output>$/ { out = 0; next }
  /^Test time/ { next }
  /^Test Passed\./ { kept = ""; next }
  /^Test / { printf "%s", kept; kept = ""; next }
  out && n < 40 && /\[  FAILED  \]|Failure$|Expected|Which is|Value of|Actual:|  Where|ERROR: [A-Za-z]*Sanitizer|SUMMARY: |runtime error|terminate called|what\(\)|^    #[0-9] |WARNING: ThreadSanitizer|Timeout|Aborted/ {
    kept = kept name ": " substr($0, 1, 300) "\n"; n++
  }
' "$log"
