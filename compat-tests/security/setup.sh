#!/usr/bin/env bash
# The security suite's clients: kcat (Debian's librdkafka), the Java tools of the newest
# Kafka line and of 3.9 (java/setup.sh), franz-go (franz-go/setup.sh) and confluent-kafka's
# bundled librdkafka (confluent-kafka/setup.sh, for re-authentication). Its
# certificates are made by run-all.sh.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
"$here/../librdkafka/setup.sh"
KAFKA_VERSION=4.4.0 "$here/../java/setup.sh"
KAFKA_VERSION=3.9.1 "$here/../java/setup.sh"
"$here/../franz-go/setup.sh"
"$here/../confluent-kafka/setup.sh"
