"""KIP-368 with librdkafka (confluent-kafka's bundled build): a producer on a listener whose
SCRAM-SHA-512 sessions last 3 s (run-all.sh sets it) writes one record a second for 8 s.
Passes when every record is acknowledged and librdkafka re-authenticated its connection
(its security debug log says so) without losing it to an expired session.
Usage: reauth.py BOOTSTRAP_SASL"""
import logging
import sys
import time

from confluent_kafka import Producer, libversion


class Lines(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def main(bootstrap):
    lines = Lines()
    log = logging.getLogger("librdkafka")
    log.setLevel(logging.DEBUG)
    log.addHandler(lines)
    producer = Producer({
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "carol",
        "sasl.password": "carol-secret",
        "acks": "all",
        "debug": "security,broker",
        "logger": log,
    })
    errors = []
    acked = []

    def delivered(err, msg):
        (errors if err else acked).append(err or msg.offset())

    for i in range(8):
        producer.produce("reauth-librdkafka", f"r{i}".encode(), partition=0, on_delivery=delivered)
        producer.flush(30)
        time.sleep(1)
    reauths = sum("Received REAUTH op" in line for line in lines.lines)
    expired = [line for line in lines.lines if "Disconnected" in line and "/bootstrap" not in line]
    name = f"librdkafka-{libversion()[0]}-reauthenticates"
    if len(acked) == 8 and not errors and reauths >= 1 and not expired:
        print(f"PASS {name}-{reauths}-times")
        return 0
    print(f"FAIL {name}: {len(acked)} of 8 acknowledged, errors {errors[:3]}, "
          f"{reauths} re-authentications, disconnects {expired[:2]}")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
