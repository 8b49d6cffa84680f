"""Cairn's adapter for kafka-python's SASL and SSL integration tests (run.sh with
KP_SECURED=1, run-all.sh's kafka-python-secured suite).

Those tests start their own Apache Kafka with a SASL_PLAINTEXT or SSL listener through
KafkaFixture.instance(transport=..., sasl_mechanism=...). Here that call returns an
external fixture for the running Cairn's listener of that transport instead; everything
the tests then do goes through kafka-python against Cairn. Written for Cairn, not copied
from kafka-python. What it stands in for:

- the broker: KP_SASL_BOOTSTRAP (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512; the user alice is
  in the PLAIN login module) and KP_SSL_BOOTSTRAP, whose CA certificate is KP_SSL_DIR/ca-cert;
- `kafka-storage format --add-scram`: alice's SCRAM credential is created with
  AlterUserScramCredentials on the PLAINTEXT listener (BOOTSTRAP) before the first SCRAM test;
- `kafka-topics.sh --list`: get_topic_names lists topics with kafka-python's admin client.
"""
import os

from kafka.admin import KafkaAdminClient, UserScramCredentialUpsertion

from test.integration import fixtures

_LISTENERS = {
    'SASL_PLAINTEXT': os.environ.get('KP_SASL_BOOTSTRAP'),
    'SSL': os.environ.get('KP_SSL_BOOTSTRAP'),
}
_scram_made = set()


def _make_scram_user(mechanism):
    if mechanism in _scram_made:
        return
    user = fixtures.KafkaFixture.broker_user
    password = fixtures.KafkaFixture.broker_password
    with KafkaAdminClient(bootstrap_servers=os.environ['BOOTSTRAP'], client_id='cairn_scram') as admin:
        errors = admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion(user, mechanism, password)])
    assert not any(errors.values()), 'creating the SCRAM user failed: %s' % errors
    _scram_made.add(mechanism)


def _instance(cls, broker_id, transport='PLAINTEXT', sasl_mechanism=None, replicas=1,
              partitions=4, **_ignored):
    address = _LISTENERS.get(transport.upper())
    if not address:
        raise RuntimeError('Cairn runs no %s listener for these tests' % transport)
    host, _, port = address.rpartition(':')
    fixture = cls(host, int(port), broker_id, external=True, transport=transport,
                  replicas=replicas, partitions=partitions, sasl_mechanism=sasl_mechanism)
    if fixture.ssl_enabled:
        fixture.ssl_dir = os.environ['KP_SSL_DIR']
    if fixture.sasl_enabled and fixture.sasl_mechanism.startswith('SCRAM-SHA-'):
        _make_scram_user(fixture.sasl_mechanism)
    return fixture


def _get_topic_names(self):
    params = self._enrich_client_params({'client_id': 'cairn_topics'})
    with KafkaAdminClient(**params) as admin:
        return list(admin.list_topics())


def pytest_configure(config):
    fixtures.KafkaFixture.instance = classmethod(_instance)
    fixtures.KafkaFixture.get_topic_names = _get_topic_names
