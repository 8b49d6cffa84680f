"""Cairn stand-in for kafka-python's test/service.py.

kafka-python's PyPI sdist ships test/integration/fixtures.py, which imports
`test.service`, but the sdist leaves that module out. This small
replacement (written for Cairn, not copied from kafka-python) covers only
what an *external* broker (KAFKA_URI set) needs. setup.sh copies it to
<sdist>/test/service.py.
"""


class ExternalService:
    """A broker that is already running at host:port; nothing to manage."""

    def __init__(self, host, port):
        self.host = host
        self.port = port

    def open(self):
        pass

    def close(self):
        pass

    def start(self):
        pass

    def stop(self):
        pass

    def wait_for(self, pattern, timeout=30):
        return True

    def dump_logs(self):
        pass


class SpawnedService:
    """Spawning brokers/ZooKeeper is not supported in Cairn's setup."""

    def __init__(self, args=None, env=None):
        raise RuntimeError(
            "Cairn's kafka-python harness only runs against an external broker: "
            "set KAFKA_URI (run.sh does this from BOOTSTRAP)")
