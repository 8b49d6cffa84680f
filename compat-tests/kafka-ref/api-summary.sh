#!/usr/bin/env bash
# Usage: api-summary.sh DATA_DIR [FROM_LINE]
# For a broker started with KAFKA_REF_REQUEST_LOG=DEBUG: counts the requests
# clients sent (clientId, API name, version) from line FROM_LINE of kafka.log on.
# Only requests that arrived on the client listener (PLAINTEXT) are counted, so
# broker->controller forwarding and raft traffic are left out.
set -euo pipefail
LOG="$1/kafka.log"
FROM="${2:-1}"
tail -n +"$FROM" "$LOG" | grep -F 'Completed request:' | sed -e 's/.*Completed request://' -e 's/ ([a-z.]*)$//' |
  jq -Rr 'fromjson? | select(.listener == "PLAINTEXT") | .requestHeader |
          "\(.clientId)\t\(.requestApiKeyName) v\(.requestApiVersion)"' |
  sed -E 's/^(console-consumer|console-producer|adminclient|producer|consumer)-[0-9a-zA-Z-]*/\1/' |
  sort | uniq -c | sort -k2,2 -k1,1nr
