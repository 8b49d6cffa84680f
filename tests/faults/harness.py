#!/usr/bin/env python3
"""Fault harness: three real `cairn` processes on loopback (RF=3, min.insync.replicas=2), the
Java VerifiableProducer (idempotent, acks=all) writing throughout, faults injected, and a
checker over what was acknowledged and what is read back:

- every acknowledged record is present at its offset with its value;
- no value appears twice (idempotence through retries and failovers);
- per partition, values keep the order they were produced in;
- while two of three brokers are down, nothing is acknowledged;
- after healing, every replica's log is identical (`cairn dump-log` of each stopped node),
  and every replica of the coordinators' topics, which each replica compacts on its own,
  holds the same latest record of each key;
- a consumer group's committed offsets survive kill -9 of its coordinator;
- a group coordinator cut off from the other brokers (not from clients) stops answering for
  the group once its session could have ended, and the group commits through the new one
  (Cairn only: Kafka's cut-off broker goes on answering from what it last knew; not in CI
  yet, see UNSTABLE);
- a KIP-848 group's running member keeps its member id, epoch and partitions through kill -9
  of its coordinator, and keeps reading;
- a share group (KIP-932) of two console share consumers delivers every acknowledged record
  through kill -9 of its share coordinator and of its share partition's leader, none more
  often than the delivery count limit;
- kafka-reassign-partitions moves every partition off a broker and back (a replica copied
  from scratch) under load, and every broker's metadata shows the targets;
- a broker killed -9 in the middle of a cleaning pass over a compacted topic under keyed
  load loses nothing live: every acknowledged record is at its offset or superseded by a
  later one of its key, no offset holds another value, and every replica holds the same
  latest record of each key;
- an unclean election on a second topic (unclean.leader.election.enable, two replicas)
  elects the returning follower and keeps exactly its acks=all records;
- Kafka's TransactionalMessageCopier copies the test topic into another, in transactions
  (one in three aborted) that also commit its consumed offsets, through every fault and
  through transactional ones: kill -9 of the transaction coordinator during a transaction
  and while it commits, kill -9 of a partition leader mid-transaction, a zombie copier
  fenced by a new instance. Read with read_committed, the copy must equal the input
  partition for partition: every committed transaction whole and once, none aborted.

Links between brokers go through TCP proxies in this script, one per direction, so a broker
can be cut off from the other brokers (replication and the controller quorum) while clients
still reach it. Each broker fetches from a leader over a listener named after itself
(inter.broker.listener.name=R<id>) that every broker advertises at a proxy for that
direction, and each node's controller.quorum.voters names the proxies towards the others.

    harness.py CAIRN_BINARY [--rounds N] [--seed S] [--keep] [--kafka]

--kafka runs the same faults and checks against three Apache Kafka brokers from the Maven
jars (the release compat-tests/kafka-ref/version.sh names), as a baseline, except the ones in
CAIRN_ONLY; CAIRN_BINARY is then used for nothing else.

--rounds 1 (CI) runs every fault once; more rounds run them again in a random order, chasing
whichever broker leads at the time. Exit status 0 only when every check holds.
"""

import argparse
import asyncio
import json
import os
import random
import re
import shutil
import signal
import socket
import struct
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KAFKA_RUN = ROOT / "compat-tests" / "java" / "kafka-run.sh"
TOPIC = "faults"
PARTITIONS = 3
SESSION_MS = 3000
HEARTBEAT_MS = 500
LAG_MS = 3000
NODES = (1, 2, 3)
COMPACT_TOPIC = "faults-compacted"
COMPACT_KEYS = 1000
CLEANER_IO_BYTES = 50000
CLEAN_WAIT_S = 180


LOG_FILE = None  # the work dir's harness.log, once there is one


def log(msg):
    line = f"[{time.strftime('%H:%M:%S')}] {msg}"
    print(line, flush=True)
    if LOG_FILE is not None:
        with open(LOG_FILE, "a") as f:
            f.write(line + "\n")


def free_ports(n):
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


class Proxy:
    """A TCP forwarder for one direction of one link; `cut()` drops its connections and
    refuses new ones until `heal()`."""

    def __init__(self, name, listen_port, target_port):
        self.name, self.port, self.target = name, listen_port, target_port
        self.blocked = False
        self.conns = set()

    async def start(self):
        self.server = await asyncio.start_server(self.accept, "127.0.0.1", self.port)

    async def accept(self, reader, writer):
        if self.blocked:
            writer.close()
            return
        try:
            ur, uw = await asyncio.open_connection("127.0.0.1", self.target)
        except OSError:
            writer.close()
            return
        pair = (writer, uw)
        self.conns.add(pair)

        async def pipe(r, w):
            try:
                while data := await r.read(65536):
                    if self.blocked:
                        break
                    w.write(data)
                    await w.drain()
            except (OSError, asyncio.CancelledError):
                pass
            finally:
                for x in pair:
                    x.close()

        try:
            await asyncio.gather(pipe(reader, uw), pipe(ur, writer))
        except asyncio.CancelledError:
            pass
        self.conns.discard(pair)

    def cut(self):
        self.blocked = True
        for pair in list(self.conns):
            for w in pair:
                w.close()
        self.conns.clear()

    def heal(self):
        self.blocked = False


def _kafka_ref_lib():
    """The Kafka release the --kafka baseline runs (compat-tests/kafka-ref/version.sh) and
    the folder of its jars (compat-tests/java/lib-dir.sh's rule)."""
    version = os.environ.get("KAFKA_REF_VERSION") or re.search(
        r'KAFKA_REF_VERSION:-([^}"]+)', (ROOT / "compat-tests" / "kafka-ref" / "version.sh").read_text()).group(1)
    pom = re.search(r"<kafka.version>(.*)</kafka.version>",
                    (ROOT / "compat-tests" / "java" / "pom.xml").read_text()).group(1)
    return version, ROOT / "compat-tests" / "java" / ("lib" if version == pom else f"lib-{version}")


KAFKA_REF_VERSION, JAVA_LIB = _kafka_ref_lib()


class Cluster:
    def __init__(self, binary, workdir, kafka=False, secured=False):
        self.binary, self.dir, self.kafka = binary, Path(workdir), kafka
        # secured: the brokers reach each other over SASL_SSL (PLAIN as User:broker, mutual
        # TLS, 5 s sessions, so followers re-authenticate under every fault), the quorum over
        # SASL_SSL too (mutual TLS, OAUTHBEARER tokens, 5 s sessions, so voters dial again
        # under every fault), and the StandardAuthorizer is on (the harness's PLAINTEXT clients are
        # ANONYMOUS, a super user like User:broker). Certificates: scripts/make-test-certs.sh.
        self.secured = secured
        self.cluster_id = None
        ports = iter(free_ports(64))
        self.client = {i: next(ports) for i in NODES}
        self.metrics = {i: next(ports) for i in NODES}
        self.controller = {i: next(ports) for i in NODES}
        # repl[i][j]: node i's listener R<j>, which node j fetches from.
        self.repl = {i: {j: next(ports) for j in NODES} for i in NODES}
        self.proxies = {}
        for src in NODES:
            for dst in NODES:
                if src != dst:
                    self.proxies[("repl", src, dst)] = Proxy(
                        f"repl {src}->{dst}", next(ports), self.repl[dst][src])
                    self.proxies[("ctrl", src, dst)] = Proxy(
                        f"ctrl {src}->{dst}", next(ports), self.controller[dst])
        if kafka:
            # A Kafka KRaft follower does not keep using controller.quorum.voters: it connects
            # to the endpoint the quorum leader advertises for the follower's own controller
            # listener (KIP-853). So each node i listens for controller traffic from node j on
            # a listener C<j> and advertises C<j> at the proxy for the direction j->i, as with
            # the replication listeners; otherwise a leader cut off from the others would keep
            # its quorum through direct connections.
            self.kctrl = {i: {j: next(ports) for j in NODES} for i in NODES}
            for src in NODES:
                for dst in NODES:
                    if src != dst:
                        self.proxies[("ctrl", src, dst)].target = self.kctrl[dst][src]
        self.procs = {}
        self.isolated = set()
        self.keyed = []  # kill_cleaning_leader's keyed producers, checked at the end
        self.log_start = {}  # node -> where its broker.log's lines of the running process begin

    def bootstrap(self):
        return ",".join(f"127.0.0.1:{self.client[i]}" for i in NODES)

    def config(self, i):
        if self.kafka:
            return self.kafka_config(i)
        listeners = [f"CLIENT://127.0.0.1:{self.client[i]}"]
        advertised = [f"CLIENT://127.0.0.1:{self.client[i]}"]
        for j in NODES:
            listeners.append(f"R{j}://127.0.0.1:{self.repl[i][j]}")
            port = self.repl[i][j] if j == i else self.proxies[("repl", j, i)].port
            advertised.append(f"R{j}://127.0.0.1:{port}")
        listeners.append(f"CONTROLLER://127.0.0.1:{self.controller[i]}")
        voters = []
        for j in NODES:
            port = self.controller[i] if j == i else self.proxies[("ctrl", i, j)].port
            voters.append(f"{j}@127.0.0.1:{port}")
        if self.secured:
            protocols = ["CLIENT:PLAINTEXT", "CONTROLLER:SASL_SSL"] + [f"R{j}:SASL_SSL" for j in NODES]
        else:
            protocols = ["CLIENT:PLAINTEXT", "CONTROLLER:PLAINTEXT"] + [f"R{j}:PLAINTEXT" for j in NODES]
        return "\n".join([
            f"node.id={i}",
            "process.roles=broker,controller",
            f"controller.quorum.voters={','.join(voters)}",
            f"listeners={','.join(listeners)}",
            f"advertised.listeners={','.join(advertised)}",
            f"listener.security.protocol.map={','.join(protocols)}",
            "controller.listener.names=CONTROLLER",
        ] + self.security() + self.common(i))

    def security(self):
        """The secured cluster's keys (none unless --secured)."""
        if not self.secured:
            return []
        certs = self.dir / "certs"
        jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
                'username="broker" password="broker-secret" user_broker="broker-secret";')
        quorum = ('org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required '
                  'unsecuredLoginStringClaim_sub="controller";')
        return [
            f"ssl.keystore.location={certs / 'broker.p12'}",
            "ssl.keystore.password=broker-pass",
            f"ssl.truststore.location={certs / 'ca.p12'}",
            "ssl.truststore.password=trust-pass",
            "ssl.client.auth=required",
            "sasl.enabled.mechanisms=PLAIN",
            "sasl.mechanism.inter.broker.protocol=PLAIN",
            "listener.name.controller.sasl.enabled.mechanisms=OAUTHBEARER",
            "sasl.mechanism.controller.protocol=OAUTHBEARER",
            f"listener.name.controller.oauthbearer.sasl.jaas.config={quorum}",
            "connections.max.reauth.ms=5000",
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users=User:broker;User:ANONYMOUS",
        ] + [f"listener.name.r{j}.plain.sasl.jaas.config={jaas}" for j in NODES]

    def kafka_config(self, i):
        """As config(), with the controller listeners per peer described in __init__."""
        listeners = [f"CLIENT://127.0.0.1:{self.client[i]}"]
        advertised = [f"CLIENT://127.0.0.1:{self.client[i]}"]
        for j in NODES:
            listeners.append(f"R{j}://127.0.0.1:{self.repl[i][j]}")
            port = self.repl[i][j] if j == i else self.proxies[("repl", j, i)].port
            advertised.append(f"R{j}://127.0.0.1:{port}")
        for j in NODES:
            listeners.append(f"C{j}://127.0.0.1:{self.kctrl[i][j]}")
            port = self.kctrl[i][j] if j == i else self.proxies[("ctrl", j, i)].port
            advertised.append(f"C{j}://127.0.0.1:{port}")
        voters = []
        for j in NODES:
            port = self.kctrl[i][i] if j == i else self.proxies[("ctrl", i, j)].port
            voters.append(f"{j}@127.0.0.1:{port}")
        protocols = ["CLIENT:PLAINTEXT"] + [f"{k}{j}:PLAINTEXT" for k in "RC" for j in NODES]
        return "\n".join([
            f"node.id={i}",
            "process.roles=broker,controller",
            f"controller.quorum.voters={','.join(voters)}",
            f"listeners={','.join(listeners)}",
            f"advertised.listeners={','.join(advertised)}",
            f"listener.security.protocol.map={','.join(protocols)}",
            # The first name is the one this node uses towards the other controllers.
            f"controller.listener.names={','.join(f'C{j}' for j in [i] + [j for j in NODES if j != i])}",
        ] + self.common(i))

    def common(self, i):
        """The keys both kinds of node share."""
        return [
            f"inter.broker.listener.name=R{i}",
            f"log.dirs={self.dir / f'n{i}' / 'data'}",
            f"metrics.listener=127.0.0.1:{self.metrics[i]}" if not self.kafka else "group.initial.rebalance.delay.ms=0",
            "default.replication.factor=3",
            "min.insync.replicas=2",
            "offsets.topic.replication.factor=3",
            f"broker.session.timeout.ms={SESSION_MS}",
            f"broker.heartbeat.interval.ms={HEARTBEAT_MS}",
            f"replica.lag.time.max.ms={LAG_MS}",
            "auto.create.topics.enable=false",
            # Cleaning passes that last (kill_cleaning_leader kills a broker in one): a pass
            # over its topic reads the cleaned part (1000 keys, about 40 KB) and twice what
            # came since (about 10 KB/s), which the I/O limit stretches over about a second.
            "log.cleaner.backoff.ms=100",
            f"log.cleaner.io.max.bytes.per.second={CLEANER_IO_BYTES}",
            "",
        ]

    async def make_certs(self):
        if self.secured and not (self.dir / "certs" / "done").exists():
            await run([str(ROOT / "scripts" / "make-test-certs.sh"), str(self.dir / "certs")])

    async def start_proxies(self):
        for p in self.proxies.values():
            await p.start()

    def start(self, i):
        d = self.dir / f"n{i}"
        d.mkdir(parents=True, exist_ok=True)
        (d / "server.properties").write_text(self.config(i))
        out = open(d / "broker.log", "ab")
        self.log_start[i] = out.tell()
        env = dict(os.environ, CAIRN_LOG=os.environ.get("CAIRN_LOG", "info,openraft=off"))
        if self.kafka:
            if not (d / "data" / "meta.properties").exists():
                import subprocess
                subprocess.run(["java", "-Xmx256M", "-cp", f"{JAVA_LIB}/*", "kafka.tools.StorageTool", "format",
                                "--cluster-id", self.cluster_id, "--config", str(d / "server.properties")],
                               stdout=out, stderr=out, check=True)
            argv = ["java", "-Xmx512M", "-Xms512M", "-XX:+UseG1GC",
                    f"-Dlog4j2.configurationFile={ROOT / 'compat-tests' / 'kafka-ref' / 'log4j2-broker.xml'}",
                    "-cp", f"{JAVA_LIB}/*", "kafka.Kafka", str(d / "server.properties")]
        else:
            argv = [self.binary, str(d / "server.properties")]
        self.procs[i] = subprocess_popen(argv, out, env)
        log(f"started node {i} (pid {self.procs[i].pid})")

    def alive(self, i):
        p = self.procs.get(i)
        return p is not None and p.poll() is None

    async def kill(self, i, sig=signal.SIGKILL):
        """Sends `sig`; for SIGKILL and SIGTERM, waits for the exit without blocking the event
        loop (the proxies run on it, and a controlled shutdown needs them)."""
        if not self.alive(i):
            return
        p = self.procs[i]
        p.send_signal(sig)
        started = time.time()
        escalated = False
        if sig in (signal.SIGKILL, signal.SIGTERM):
            while p.poll() is None:
                if time.time() - started > 60 and not escalated:
                    p.kill()
                    escalated = True
                await asyncio.sleep(0.05)
        log(f"node {i}: {signal.Signals(sig).name}" +
            (f" (exited after {time.time() - started:.1f}s)" if sig == signal.SIGTERM else "") +
            (" -- no exit within 60s, so SIGKILL" if escalated else ""))

    def isolate(self, i, on=True):
        for (kind, src, dst), p in self.proxies.items():
            if i in (src, dst):
                p.cut() if on else p.heal()
        (self.isolated.add if on else self.isolated.discard)(i)
        log(f"node {i} {'cut off from' if on else 'reconnected to'} the other brokers")

    def scrape(self, i):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics[i]}/metrics", timeout=2) as r:
                text = r.read().decode()
        except OSError:
            return {}
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#") and "{" not in line.split(" ")[0]:
                name, _, value = line.partition(" ")
                try:
                    out[name] = float(value)
                except ValueError:
                    pass
        return out

    async def active_controller(self):
        if self.kafka:
            out = await run([str(KAFKA_RUN), "org.apache.kafka.tools.MetadataQuorumCommand", "--bootstrap-server",
                             self.bootstrap(), "describe", "--status"], timeout=60, check=False)
            for line in out.splitlines():
                if line.startswith("LeaderId:"):
                    return int(line.split(":")[1])
            return None
        for i in NODES:
            if self.alive(i) and self.scrape(i).get("kafka_controller_kafkacontroller_activecontrollercount") == 1:
                return i
        return None

    async def views(self):
        """Every live broker's own view of partition 0 (for failure reports)."""
        out = {}
        for i in NODES:
            if self.alive(i):
                raw = await run(["kcat", "-b", f"127.0.0.1:{self.client[i]}", "-L", "-J", "-t", TOPIC, "-m", "3"],
                                timeout=10, check=False)
                out[i] = raw[raw.find('"partitions"'):][:200]
        return out

    async def view(self, i, topic=TOPIC):
        """Partitions of `topic` as broker `i` reports them: {p: (leader, replicas, isr)}."""
        out = await run(["kcat", "-b", f"127.0.0.1:{self.client[i]}", "-L", "-J", "-t", topic, "-m", "3"],
                        timeout=10, check=False)
        try:
            md = json.loads(out)
        except ValueError:
            return {}
        for t in md.get("topics", []):
            if t.get("topic") == topic and t.get("partitions"):
                return {p["partition"]: (p["leader"], [r["id"] for r in p["replicas"]],
                                         [r["id"] for r in p["isrs"]]) for p in t["partitions"]}
        return {}

    async def metadata(self):
        """Partitions of TOPIC as a live broker in the quorum's majority reports them (an
        isolated broker's view is stale): {p: (leader, replicas, isr)}."""
        for i in NODES:
            if self.alive(i) and i not in self.isolated:
                md = await self.view(i)
                if md:
                    return md
        return {}

    async def leader(self, partition=0):
        md = await self.metadata()
        return md.get(partition, (-1,))[0]

    async def wait_leader_moves(self, old, what, timeout=30):
        """Until partition 0 is led by a broker other than `old` (bounded, for liveness)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            new = await self.leader(0)
            if new > 0 and new != old:
                log(f"partition 0 now led by node {new} ({what})")
                return
            await asyncio.sleep(0.5)
        raise Failure(f"node {old} still leads partition 0 {timeout}s after {what}: {await self.views()}")

    async def wait_healthy(self, what, timeout=120):
        """Until every partition has a leader and a full ISR of live brokers, and every
        broker runs in its current incarnation."""
        deadline = time.time() + timeout
        healthy = lambda md: len(md) == PARTITIONS and all(
            l > 0 and sorted(isr) == list(NODES) for l, _, isr in md.values())
        since = None
        while time.time() < deadline:
            # Every broker must say so (one that could not reach the quorum has a stale view),
            # for a second (an ISR change decided during the fault may still land).
            views = [await self.view(i) for i in NODES]
            # A restarted Cairn broker is running only once registered and unfenced in its
            # new incarnation (until then the metadata may still list its old one).
            running = self.kafka or all(
                self.scrape(i).get("kafka_server_kafkaserver_brokerstate") == 3 for i in NODES)
            if running and all(healthy(v) for v in views) and all(v == views[0] for v in views):
                since = since or time.time()
                if time.time() - since >= 1:
                    md = views[0]
                    log(f"healthy after {what}: " + ", ".join(f"p{p} leader {v[0]} isr {v[2]}" for p, v in sorted(md.items())))
                    return
            else:
                since = None
            await asyncio.sleep(0.3)
        raise Failure(f"cluster not healthy {timeout}s after {what}: {await self.metadata()}")


class Failure(Exception):
    pass


def subprocess_popen(argv, out, env, err=None):
    """Starts `argv` writing to `out`, and its stderr to `err` (default: `out` too). A
    consumer whose printed records are counted needs its own `err`: a client warning
    written mid-line would split a record's line."""
    import subprocess
    return subprocess.Popen(argv, stdout=out, stderr=err or out, env=env, start_new_session=True)


async def run(argv, timeout=60, check=True, env=None, input=None, stderr=False):
    p = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE,
                                             stderr=asyncio.subprocess.PIPE, env=env,
                                             stdin=asyncio.subprocess.PIPE if input is not None else None)
    try:
        out, err = await asyncio.wait_for(p.communicate(input.encode() if input is not None else None), timeout)
    except asyncio.TimeoutError:
        p.kill()
        raise Failure(f"{argv[0]} timed out after {timeout}s")
    if check and p.returncode != 0:
        raise Failure(f"{' '.join(map(str, argv))} failed ({p.returncode}): {err.decode()[-2000:]}")
    return (out.decode(), err.decode()) if stderr else out.decode()


class Producer:
    """The Java VerifiableProducer; records every acknowledgement with the time it arrived."""

    def __init__(self, cluster, workdir, topic=TOPIC, keys=None, name="producer", throughput=400):
        """keys: records carry keys 0 .. keys-1 in turn (--repeating-keys), else none."""
        self.cluster, self.dir = cluster, Path(workdir)
        self.topic, self.keys, self.name, self.throughput = topic, keys, name, throughput
        self.acked = {}  # (partition, offset) -> value
        self.key_of = {}  # (partition, offset) -> key, when keyed
        self.ack_times = []  # (time, partition, offset)
        self.errors = 0
        self.sent = 0

    async def start(self):
        cfg = self.dir / f"{self.name}.properties"
        cfg.write_text("\n".join([
            "enable.idempotence=true", "acks=all", "linger.ms=5", "retries=2147483647",
            "request.timeout.ms=8000", "delivery.timeout.ms=120000",
            "metadata.max.age.ms=2000", "max.in.flight.requests.per.connection=5", ""]))
        keyed = ["--repeating-keys", str(self.keys)] if self.keys else []
        self.proc = await asyncio.create_subprocess_exec(
            str(KAFKA_RUN), "org.apache.kafka.tools.VerifiableProducer",
            "--bootstrap-server", self.cluster.bootstrap(), "--topic", self.topic,
            "--throughput", str(self.throughput), "--producer.config", str(cfg), *keyed,
            stdout=asyncio.subprocess.PIPE, stderr=open(self.dir / f"{self.name}.err", "wb"),
            start_new_session=True)
        self.reader = asyncio.create_task(self.read())

    async def read(self):
        while line := await self.proc.stdout.readline():
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            name = ev.get("name")
            if name == "producer_send_success":
                key = (ev["partition"], ev["offset"])
                if key in self.acked and self.acked[key] != ev["value"]:
                    raise Failure(f"two acknowledgements for {key}: {self.acked[key]} and {ev['value']}")
                self.acked[key] = ev["value"]
                if self.keys:
                    self.key_of[key] = ev["key"]
                self.ack_times.append((time.time(), key))
            elif name == "producer_send_error":
                self.errors += 1

    def acks_between(self, t0, t1):
        return [k for t, k in self.ack_times if t0 <= t < t1]

    async def wait_acks(self, n, timeout=60):
        target = len(self.acked) + n
        deadline = time.time() + timeout
        while len(self.acked) < target:
            if self.proc.returncode is not None:
                err = (self.dir / f"{self.name}.err").read_text(errors="replace")[-1500:]
                raise Failure(f"the {self.name} exited ({self.proc.returncode}): {err}")
            if time.time() > deadline:
                raise Failure(f"{self.name} made no progress: {len(self.acked)} acks, wanted {target}")
            await asyncio.sleep(0.2)

    async def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.proc.wait(), 60)
        except asyncio.TimeoutError:
            self.proc.kill()
        await self.reader


# ---- faults ------------------------------------------------------------------------------

async def kill_leader(c, prod):
    leader = await c.leader(0)
    log(f"fault: kill -9 the leader of partition 0 (node {leader})")
    await c.kill(leader)
    await asyncio.sleep(SESSION_MS / 1000 + 2)
    await prod.wait_acks(50)
    c.start(leader)
    await c.wait_healthy("the leader's restart")


async def kill_controller(c, prod):
    active = await c.active_controller()
    if active is None:
        raise Failure("no node reports itself the active controller")
    log(f"fault: kill -9 the active controller (node {active})")
    await c.kill(active)
    await asyncio.sleep(SESSION_MS / 1000 + 2)
    await prod.wait_acks(50)
    c.start(active)
    await c.wait_healthy("the controller's restart")


async def cut_follower(c, prod):
    leader, replicas, _ = (await c.metadata())[0]
    follower = next(r for r in replicas if r != leader)
    log(f"fault: cut follower {follower} of partition 0 off for {2 * LAG_MS} ms (past the lag time)")
    c.isolate(follower)
    await asyncio.sleep(2 * LAG_MS / 1000)
    md = await c.metadata()
    if follower in md[0][2]:
        raise Failure(f"follower {follower} still in the ISR of partition 0 after {2 * LAG_MS} ms cut off: {md}")
    await prod.wait_acks(50)
    c.isolate(follower, False)
    await c.wait_healthy("healing the follower")


async def cut_leader(c, prod):
    leader = await c.leader(0)
    log(f"fault: cut the leader of partition 0 (node {leader}) off from the other brokers, not from clients")
    c.isolate(leader)
    await c.wait_leader_moves(leader, "cutting it off")
    await prod.wait_acks(50)
    c.isolate(leader, False)
    await c.wait_healthy("healing the old leader")


async def lose_two(c, prod):
    keep = random.choice(NODES)
    lost = [i for i in NODES if i != keep]
    log(f"fault: kill -9 nodes {lost}; writes must not be acknowledged")
    for i in lost:
        await c.kill(i)
    t0 = time.time()
    await asyncio.sleep(8)
    # Acks already on the wire when the kill landed are allowed in the first second.
    late = prod.acks_between(t0 + 1, time.time())
    if late:
        raise Failure(f"{len(late)} records acknowledged with two of three brokers down, e.g. {late[:5]}")
    log("no acknowledgements while two brokers were down")
    for i in lost:
        c.start(i)
    await c.wait_healthy("restarting two brokers")
    await prod.wait_acks(50, timeout=120)


async def stop_leader(c, prod):
    leader = await c.leader(0)
    log(f"fault: SIGSTOP the leader of partition 0 (node {leader}) past the session timeout")
    await c.kill(leader, signal.SIGSTOP)
    await c.wait_leader_moves(leader, "stopping it")
    await asyncio.sleep(SESSION_MS / 1000)
    await prod.wait_acks(50)
    await c.kill(leader, signal.SIGCONT)
    await c.wait_healthy("resuming the stopped leader")


async def rolling_restart(c, prod):
    log("fault: rolling restart (SIGTERM, controlled shutdown, start) of every node")
    for i in NODES:
        await c.kill(i, signal.SIGTERM)
        c.start(i)
        await c.wait_healthy(f"restarting node {i}")
        await prod.wait_acks(20)


GROUP = "faults-group"
GROUPS_CMD = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"


async def consume_in_group(c, n, bootstrap=None):
    """kafka-console-consumer in GROUP reads n records and exits, committing its position."""
    out, err = await run([str(KAFKA_RUN), "org.apache.kafka.tools.consumer.ConsoleConsumer", "--bootstrap-server",
                          bootstrap or c.bootstrap(), "--topic", TOPIC, "--group", GROUP, "--max-messages", str(n),
                          "--consumer-property", "auto.offset.reset=earliest", "--timeout-ms", "60000"],
                         timeout=120, stderr=True, env=dict(os.environ, KAFKA_TOOLS_LOG_LEVEL="INFO"))
    (c.dir / "consume.err").open("a").write(err)
    if len(out.splitlines()) < n:
        raise Failure(f"the console consumer in {GROUP} read {len(out.splitlines())} of {n} records: {err[-1500:]}")


async def group_offsets(c, timeout=60, bootstrap=None):
    """(coordinator id, {partition: committed offset}) of GROUP as kafka-consumer-groups
    --describe shows them, retried while the group has no coordinator."""
    deadline = time.time() + timeout
    bootstrap = bootstrap or c.bootstrap()
    while True:
        state = await run([str(KAFKA_RUN), GROUPS_CMD, "--bootstrap-server", bootstrap, "--describe",
                           "--group", GROUP, "--state"], timeout=120, check=False)
        out = await run([str(KAFKA_RUN), GROUPS_CMD, "--bootstrap-server", bootstrap, "--describe",
                         "--group", GROUP], timeout=120, check=False)
        coordinator = re.search(rf"^{GROUP}\s+\S+\s+\((\d+)\)", state, re.M)
        offsets = {int(m.group(1)): int(m.group(2))
                   for m in re.finditer(rf"^{GROUP}\s+{TOPIC}\s+(\d+)\s+(\d+)\s", out, re.M)}
        # The console consumer commits the partitions it read from: not every one when a
        # single fetch answered all it wanted.
        if coordinator and offsets:
            return int(coordinator.group(1)), offsets
        if time.time() > deadline:
            raise Failure(f"no committed offsets of {GROUP} within {timeout}s: {state.strip()[-300:]} "
                          f"{out.strip()[-300:]}")
        await asyncio.sleep(1)


async def kill_coordinator(c, prod):
    """Committed offsets survive kill -9 of the group's coordinator (they are replicated in
    __consumer_offsets), and the group carries on with the new coordinator."""
    await consume_in_group(c, 300)
    coordinator, before = await group_offsets(c)
    log(f"fault: kill -9 the coordinator of group {GROUP} (node {coordinator}); committed {before}")
    await c.kill(coordinator)
    new, after = await group_offsets(c, timeout=SESSION_MS / 1000 + 60)
    if new == coordinator or after != before:
        raise Failure(f"after killing coordinator {coordinator}: coordinator {new}, offsets {after} "
                      f"(before: {before})")
    await consume_in_group(c, 300)
    _, moved = await group_offsets(c)
    if any(moved.get(p, -1) < before[p] for p in before) or sum(moved.values()) < sum(before.values()) + 300:
        raise Failure(f"commits through the new coordinator {new}: {moved} (before: {before})")
    log(f"new coordinator {new} kept {after} and took commits up to {moved}")
    c.start(coordinator)
    await c.wait_healthy("the coordinator's restart")
    _, final = await group_offsets(c)
    if final != moved:
        raise Failure(f"offsets changed across the old coordinator's restart: {final} (before: {moved})")


def kafka_call(port, api_key, version, body):
    """One request (header v1, client id "faults") to 127.0.0.1:port; the response body."""
    header = struct.pack(">hhi", api_key, version, 7) + kstr("faults")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
        size = struct.unpack(">i", recv_exactly(s, 4))[0]
        return recv_exactly(s, size)[4:]


def recv_exactly(s, n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise OSError("connection closed")
        buf += chunk
    return buf


def kstr(v):
    return struct.pack(">h", len(v)) + v.encode()


def find_coordinator_at(port, group):
    """FindCoordinator v0 asked of one broker: (error code, node id)."""
    error, node = struct.unpack_from(">hi", kafka_call(port, 10, 0, kstr(group)))
    return error, node


def fetch_offsets_at(port, group, topic, partitions):
    """OffsetFetch v1 asked of one broker: {partition: offset or ("error", code)}."""
    body = kstr(group) + struct.pack(">i", 1) + kstr(topic) + struct.pack(">i", len(partitions))
    body += b"".join(struct.pack(">i", p) for p in partitions)
    r = kafka_call(port, 9, 1, body)
    out, pos = {}, 4
    name_len = struct.unpack_from(">h", r, pos)[0]
    pos += 2 + name_len
    (count,) = struct.unpack_from(">i", r, pos)
    pos += 4
    for _ in range(count):
        partition, offset, meta_len = struct.unpack_from(">iqh", r, pos)
        pos += 14 + max(meta_len, 0)
        (error,) = struct.unpack_from(">h", r, pos)
        pos += 2
        out[partition] = ("error", error) if error else offset
    return out


NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE = 16, 15


async def cut_coordinator(c, prod):
    """A group coordinator cut off from the other brokers, not from clients, is fenced and
    its __consumer_offsets partition led elsewhere, but it does not hear of that. It must
    stop answering for the group once its session could have ended: a consumer that read
    its committed offsets there would read the ones from before the cut while new commits
    go to the new coordinator (a transactional copier then copies records twice). Kafka has
    no such lease (its fenced broker answers from what it last knew), so this runs against
    Cairn only. The commits meanwhile bootstrap from the other two brokers: the cut-off one
    still hands out its stale metadata, as Kafka's does, and a client that keeps asking it
    may take long to find the new coordinator (not what this fault is about)."""
    await consume_in_group(c, 300)
    coordinator, before = await group_offsets(c)
    port = c.client[coordinator]
    log(f"fault: cut the coordinator of group {GROUP} (node {coordinator}) off from the other brokers, "
        f"not from clients; committed {before}")
    c.isolate(coordinator)
    await asyncio.sleep(SESSION_MS / 1000 + 1)

    def zombie_answers(when):
        error, node = find_coordinator_at(port, GROUP)
        if error == 0 and node == coordinator:
            raise Failure(f"node {coordinator}, cut off {when}, still names itself the coordinator of {GROUP}")
        fetched = fetch_offsets_at(port, GROUP, TOPIC, sorted(before))
        if any(v != ("error", NOT_COORDINATOR) for v in fetched.values()):
            raise Failure(f"node {coordinator}, cut off {when}, answered OffsetFetch for {GROUP} with "
                          f"{fetched} (not NOT_COORDINATOR)")
        return error, node

    found = zombie_answers("past the session timeout")
    others = ",".join(f"127.0.0.1:{c.client[i]}" for i in NODES if i != coordinator)
    await consume_in_group(c, 300, others)
    new, moved = await group_offsets(c, bootstrap=others)
    if new == coordinator or any(moved.get(p, -1) < before[p] for p in before) or \
            sum(moved.values()) < sum(before.values()) + 300:
        raise Failure(f"commits with node {coordinator} cut off: coordinator {new}, {moved} (before: {before})")
    zombie_answers("after the commits through the new coordinator")
    log(f"node {coordinator} cut off answered FindCoordinator with error {found[0]} (node {found[1]}) and "
        f"OffsetFetch with NOT_COORDINATOR; new coordinator {new} took commits up to {moved}")
    c.isolate(coordinator, False)
    await c.wait_healthy("healing the old coordinator")
    _, final = await group_offsets(c)
    if final != moved:
        raise Failure(f"offsets changed across healing the old coordinator: {final} (before: {moved})")


async def describe_consumer_group(c, group):
    """KIP-848 group as kafka-consumer-groups --describe --verbose shows it: (coordinator id,
    state, group epoch, {member id: (member epoch, #partitions)}), or None while it has no
    coordinator or does not answer."""
    state = await run([str(KAFKA_RUN), GROUPS_CMD, "--bootstrap-server", c.bootstrap(), "--describe",
                       "--group", group, "--state", "--verbose"], timeout=120, check=False)
    m = re.search(rf"^{group}\s+\S+\s+\((\d+)\)\s+\S+\s+(\w+)\s+(\d+)\s+(\d+)\s+(\d+)", state, re.M)
    if not m:
        return None
    members = await run([str(KAFKA_RUN), GROUPS_CMD, "--bootstrap-server", c.bootstrap(), "--describe",
                         "--group", group, "--members", "--verbose"], timeout=120, check=False)
    got = {mm.group(1): (int(mm.group(3)), int(mm.group(2)))
           for mm in re.finditer(rf"^{group}\s+(\S+)\s+\S+\s+\S+\s+(\d+)\s+(\d+)\s", members, re.M)}
    return int(m.group(1)), m.group(2), int(m.group(3)), got


def lines_in(path):
    try:
        return sum(1 for _ in open(path, "rb"))
    except FileNotFoundError:
        return 0


def stop_consumer(p):
    """SIGTERM: a console consumer leaves its group (epoch -1) and exits; SIGKILL after 30s."""
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGTERM)
    try:
        p.wait(30)
    except Exception:
        os.killpg(p.pid, signal.SIGKILL)


async def kill_consumer_coordinator(c, prod):
    """A KIP-848 group (group.protocol=consumer) keeps its members through kill -9 of its
    coordinator: its state is replicated in __consumer_offsets, so the running consumers
    carry on with the same member ids, member epochs and partitions (no rebalance: the group
    epoch does not move) and keep reading. The group has history first (three members join,
    one leaves), so members rejoining a group rebuilt from nothing would show other epochs."""
    group = f"faults-848-{int(time.time())}"
    consumers = []

    def start_consumer():
        out = open(c.dir / f"{group}-{len(consumers)}.out", "wb")
        err = open(c.dir / f"{group}-{len(consumers)}.err", "wb")
        consumers.append(subprocess_popen(
            [str(KAFKA_RUN), "org.apache.kafka.tools.consumer.ConsoleConsumer", "--bootstrap-server",
             c.bootstrap(), "--topic", TOPIC, "--group", group, "--consumer-property", "group.protocol=consumer",
             "--consumer-property", "auto.offset.reset=earliest"], out, os.environ, err))

    def read():
        return sum(lines_in(c.dir / f"{group}-{i}.out") for i in range(len(consumers)))

    async def stable(n, timeout=120, other_than=None):
        deadline = time.time() + timeout
        while True:
            d = await describe_consumer_group(c, group)
            if (d and d[0] != other_than and d[1] == "Stable" and len(d[3]) == n
                    and all(e == d[2] for e, _ in d[3].values())
                    and sum(k for _, k in d[3].values()) == PARTITIONS):
                return d
            if time.time() > deadline:
                raise Failure(f"{group}: not stable with {n} members within {timeout}s: {d}")
            await asyncio.sleep(1)

    try:
        for n in (1, 2, 3):
            start_consumer()
            await stable(n)
        await asyncio.to_thread(stop_consumer, consumers[-1])
        coordinator, _, epoch, members = await stable(2)
        log(f"fault: kill -9 node {coordinator}, coordinator of KIP-848 group {group} "
            f"(group epoch {epoch}, members {members})")
        await c.kill(coordinator)
        read_at_kill = read()
        d = await stable(2, timeout=90, other_than=coordinator)
        if (d[2], d[3]) != (epoch, members):
            raise Failure(f"{group} under new coordinator {d[0]}: group epoch {d[2]}, members {d[3]} "
                          f"(before: epoch {epoch}, members {members}): the members had to rejoin")
        deadline = time.time() + 60
        while read() < read_at_kill + 200:
            if time.time() > deadline:
                raise Failure(f"{group}: the consumers read {read() - read_at_kill} records in 60s "
                              "after the coordinator's loss")
            await asyncio.sleep(1)
        log(f"new coordinator {d[0]} kept group epoch {epoch} and member epochs {members}; "
            f"the consumers read {read() - read_at_kill} more records")
    finally:
        for p in consumers:
            await asyncio.to_thread(stop_consumer, p)
    c.start(coordinator)
    await c.wait_healthy("the KIP-848 coordinator's restart")


SHARE_CONSOLE = "org.apache.kafka.tools.consumer.ConsoleShareConsumer"
CONFIG_CMD = "org.apache.kafka.tools.ConfigCommand"
SHARE_STATE_TOPIC = "__share_group_state"
SHARE_STATE_PARTITIONS = 50
SHARE_DELIVERY_LIMIT = 5


def java_partition(key, n):
    """Kafka's Utils.abs(key.hashCode()) % n (Java's String.hashCode over UTF-16)."""
    h = 0
    units = key.encode("utf-16-be")
    for k in range(0, len(units), 2):
        h = (h * 31 + int.from_bytes(units[k:k + 2], "big")) & 0xFFFFFFFF
    if h >= 2 ** 31:
        h -= 2 ** 32
    return (0 if h == -2 ** 31 else abs(h)) % n


async def topic_id(c, env):
    out = await run([str(KAFKA_RUN), "org.apache.kafka.tools.TopicCommand", "--bootstrap-server", c.bootstrap(),
                     "--describe", "--topic", TOPIC], timeout=120, env=env)
    m = re.search(r"TopicId:\s*(\S+)", out)
    if not m:
        raise Failure(f"no topic id for {TOPIC}: {out[:300]}")
    return m.group(1)


async def kill_share_coordinator(c, prod):
    """A share group (KIP-932) of two kafka-console-share-consumers reads TOPIC from its start
    (share.auto.offset.reset=earliest, a group config) through kill -9 of the share
    coordinator of its share partition TOPIC-0 (the leader of that key's __share_group_state
    partition), then of TOPIC-0's leader. Share-partition state is persisted there, so no
    record is lost: every record acknowledged to the producer by the end is delivered to
    one of the consumers, and none more often than the delivery count limit (records a
    consumer held when its broker died come back, with their delivery count up)."""
    group = f"faults-share-{int(time.time())}"
    env = dict(os.environ, KAFKA_VERSION=KAFKA_REF_VERSION)
    await run([str(ROOT / "compat-tests" / "java" / "setup.sh")], timeout=900, env=env)
    await run([str(KAFKA_RUN), CONFIG_CMD, "--bootstrap-server", c.bootstrap(), "--alter", "--entity-type",
               "groups", "--entity-name", group, "--add-config", "share.auto.offset.reset=earliest"],
              timeout=120, env=env)
    outs = [c.dir / f"{group}-{k}.out" for k in range(2)]
    consumers = [subprocess_popen(
        [str(KAFKA_RUN), SHARE_CONSOLE, "--bootstrap-server", c.bootstrap(), "--topic", TOPIC, "--group", group,
         "--formatter-property", "print.partition=true", "--formatter-property", "print.offset=true"],
        open(o, "wb"), env, open(o.with_suffix(".err"), "wb")) for o in outs]

    def delivered():
        counts = {}
        for o in outs:
            try:
                text = o.read_text(errors="replace")
            except FileNotFoundError:
                continue
            for m in re.finditer(r"^Partition:(\d+)\s+Offset:(\d+)\s", text, re.M):
                k = (int(m.group(1)), int(m.group(2)))
                counts[k] = counts.get(k, 0) + 1
        return counts

    async def kill_and_restart(i, what):
        await c.kill(i)
        await asyncio.sleep(SESSION_MS / 1000 + 2)
        await prod.wait_acks(50)
        c.start(i)
        await c.wait_healthy(f"the restart of {what}")

    try:
        deadline = time.time() + 120
        while len(delivered()) < 500:
            if time.time() > deadline:
                raise Failure(f"share group {group}: {len(delivered())} records delivered in 120s")
            await asyncio.sleep(1)
        key = f"{group}:{await topic_id(c, env)}:0"
        state_partition = java_partition(key, SHARE_STATE_PARTITIONS)
        coordinator = -1
        for i in NODES:
            coordinator = (await c.view(i, SHARE_STATE_TOPIC)).get(state_partition, (-1,))[0]
            if coordinator > 0:
                break
        if coordinator <= 0:
            raise Failure(f"{SHARE_STATE_TOPIC}-{state_partition} (share state of {key}) has no leader")
        log(f"fault: kill -9 node {coordinator}, share coordinator of {key} "
            f"({SHARE_STATE_TOPIC}-{state_partition}); {len(delivered())} records delivered so far")
        await kill_and_restart(coordinator, "the share coordinator")
        leader = await c.leader(0)
        log(f"fault: kill -9 node {leader}, leader of {TOPIC}-0 (its share partition); "
            f"{len(delivered())} records delivered so far")
        await kill_and_restart(leader, "the share partition's leader")
        wanted = set(prod.acked)
        deadline = time.time() + 240
        while True:
            got = delivered()
            missing = sorted(k for k in wanted if k not in got)
            if not missing:
                break
            if time.time() > deadline:
                raise Failure(f"share group {group}: {len(missing)} of {len(wanted)} acknowledged records were "
                              f"never delivered within 240s, first {missing[:5]}")
            await asyncio.sleep(2)
        over = sorted((k, n) for k, n in got.items() if n > SHARE_DELIVERY_LIMIT)
        if over:
            raise Failure(f"share group {group}: records delivered more than {SHARE_DELIVERY_LIMIT} times: {over[:5]}")
        again = sum(n - 1 for n in got.values())
        log(f"share group {group}: all {len(wanted)} acknowledged records delivered, {again} deliveries again "
            f"after the kills, none over the limit")
    finally:
        for p in consumers:
            await asyncio.to_thread(stop_consumer, p)


UNCLEAN_TOPIC = "faults-unclean"


async def wait_view(c, i, what, ok, timeout=60):
    """Until broker `i`'s view of UNCLEAN_TOPIC partition 0, (leader, replicas, isr),
    satisfies `ok`."""
    deadline = time.time() + timeout
    while True:
        v = (await c.view(i, UNCLEAN_TOPIC)).get(0)
        if v and ok(v):
            log(f"{UNCLEAN_TOPIC}: {what}: leader {v[0]}, isr {v[2]}")
            return
        if time.time() > deadline:
            raise Failure(f"{UNCLEAN_TOPIC} on node {i}: not {what} within {timeout}s: {v}")
        await asyncio.sleep(0.5)


async def kcat_produce(c, values, acks):
    await run(["kcat", "-P", "-b", c.bootstrap(), "-t", UNCLEAN_TOPIC, "-p", "0", "-X", f"acks={acks}",
               "-X", "enable.idempotence=false", "-X", "message.timeout.ms=30000"],
              timeout=60, input="\n".join(values) + "\n")


async def unclean_election(c, prod):
    """unclean.leader.election.enable on a topic of two replicas [a, b]: b dies (the ISR
    shrinks to a), records go to a alone with acks=1, a dies, b returns and is elected
    from outside the ISR; a returns and truncates what only it held. The test topic
    (unclean elections off) keeps every acknowledged record meanwhile."""
    a, b = random.sample(NODES, 2)
    await run([str(KAFKA_RUN), "org.apache.kafka.tools.TopicCommand", "--bootstrap-server", c.bootstrap(),
               "--create", "--if-not-exists", "--topic", UNCLEAN_TOPIC, "--replica-assignment", f"{a}:{b}",
               "--config", "unclean.leader.election.enable=true", "--config", "min.insync.replicas=1"],
              timeout=120)
    # A later round finds the topic as the first created it.
    await wait_view(c, NODES[0], "created", lambda v: len(v[1]) == 2)
    replicas = (await c.view(NODES[0], UNCLEAN_TOPIC))[0][1]
    # A later round may find the second replica leading (elected by this fault before, and
    # no preferred election since): a is whichever replica leads.
    await wait_view(c, replicas[0], "fully replicated",
                    lambda v: v[0] in replicas and sorted(v[2]) == sorted(replicas))
    a = (await c.view(replicas[0], UNCLEAN_TOPIC))[0][0]
    b = next(r for r in replicas if r != a)
    base = len(await read_topic(c, UNCLEAN_TOPIC))
    kept = [f"kept-{base + n}" for n in range(100)]
    await kcat_produce(c, kept, "all")
    log(f"fault: unclean election on {UNCLEAN_TOPIC} [{a}, {b}]: kill -9 follower {b}, write to {a} alone, "
        f"kill -9 {a}, restart {b}")
    await c.kill(b)
    await wait_view(c, a, f"without {b}", lambda v: v[2] == [a])
    await kcat_produce(c, [f"lost-{base + n}" for n in range(50)], "1")
    await c.kill(a)
    c.start(b)
    await wait_view(c, b, f"led by {b} from outside the ISR", lambda v: v[0] == b and v[2] == [b], timeout=90)
    if not c.kafka:
        n = max(c.scrape(i).get("kafka_controller_controllerstats_uncleanleaderelections_total", 0)
                for i in NODES if c.alive(i))
        if n < 1:
            raise Failure("no node counts an unclean leader election")
    c.start(a)
    await c.wait_healthy(f"restarting {a}")
    await wait_view(c, b, "fully replicated again", lambda v: sorted(v[2]) == sorted([a, b]))
    got = await read_topic(c, UNCLEAN_TOPIC)
    if got[base:] != kept:
        raise Failure(f"{UNCLEAN_TOPIC} after the unclean election: expected the {len(kept)} records written "
                      f"with acks=all and none of the acks=1 ones, read {got[base:][:5]}... ({len(got) - base})")
    log(f"{UNCLEAN_TOPIC}: the acks=all records kept, the 50 only {a} held gone (as unclean election means)")
    await prod.wait_acks(50)


async def read_topic(c, topic):
    out = await run(["kcat", "-C", "-b", c.bootstrap(), "-t", topic, "-o", "beginning", "-e", "-q"],
                    timeout=120)
    return out.splitlines()


async def wait_compacted_isr(c, what, timeout=120):
    """Until every live broker reports COMPACT_TOPIC with a leader and a full ISR."""
    deadline = time.time() + timeout
    while True:
        views = [(await c.view(i, COMPACT_TOPIC)).get(0) for i in NODES]
        if all(v and v[0] > 0 and sorted(v[2]) == list(NODES) for v in views):
            return views[0][0]
        if time.time() > deadline:
            raise Failure(f"{COMPACT_TOPIC} not fully replicated {timeout}s after {what}: {views}")
        await asyncio.sleep(0.5)


def cleaner_lines(c, i, since):
    """The lines of node i's broker log past byte `since` that begin or end a cleaning pass
    over COMPACT_TOPIC: [(began?, line)]."""
    with open(c.dir / f"n{i}" / "broker.log", "rb") as f:
        f.seek(since)
        text = f.read().decode(errors="replace")
    out = []
    for line in re.sub(r"\x1b\[[0-9;]*m", "", text).splitlines():
        if f"topic={COMPACT_TOPIC} partition=0" in line:
            if re.search(r"\bcleaning\b", line):
                out.append((True, line))
            elif re.search(r"\bcleaned\b", line):
                out.append((False, line))
    return out


async def kill_cleaning_leader(c, prod):
    """kill -9 of a broker in the middle of a cleaning pass, under load. A keyed
    VerifiableProducer (--repeating-keys) writes to a compacted topic (segment.ms=100, so
    the cleaner always has a dirty section); the brokers' log.cleaner.io.max.bytes.per.second
    holds passes back. The topic's leader is killed while its log says a pass over the
    topic began and has not ended, until two kills landed before their pass ended (against
    Kafka: at random times). The end checks: every acknowledged keyed record is at its offset with its value
    or superseded by a later record of its key, no offset holds another value, and every
    replica holds the same latest record of each key (cairn dump-log)."""
    await run([str(KAFKA_RUN), "org.apache.kafka.tools.TopicCommand", "--bootstrap-server", c.bootstrap(),
               "--create", "--if-not-exists", "--topic", COMPACT_TOPIC, "--partitions", "1",
               "--replication-factor", "3", "--config", "min.insync.replicas=2",
               "--config", "cleanup.policy=compact", "--config", "segment.ms=100",
               "--config", "min.cleanable.dirty.ratio=0.01"], timeout=120)
    await wait_compacted_isr(c, "creating it")
    kp = Producer(c, c.dir, topic=COMPACT_TOPIC, keys=COMPACT_KEYS, name=f"keyed-{len(c.keyed)}",
                  throughput=200)
    c.keyed.append(kp)
    await kp.start()
    await kp.wait_acks(1500, timeout=120)
    mid = 0
    for attempt in range(4):
        leader = await wait_compacted_isr(c, "the last restart")
        if c.kafka:
            await asyncio.sleep(random.uniform(0, 3))
            log(f"fault: kill -9 the leader of {COMPACT_TOPIC} (node {leader}), its cleaner running")
            await c.kill(leader)
        else:
            # The running process's lines only: a pass an earlier (killed) process began never
            # ended. One it began before this look and is still in (held back by the I/O
            # limit, which a restarted node first spends on its coordinators' topics) counts.
            since = c.log_start[leader]
            # A pass whose beginning is the last line about the topic at two looks 50 ms apart
            # is under way (held back by the I/O limit).
            deadline, seen = time.time() + 180, None
            while True:
                lines = cleaner_lines(c, leader, since)
                last = lines[-1] if lines and lines[-1][0] else None
                if last is not None and last == seen:
                    break
                seen = last
                if time.time() > deadline:
                    raise Failure(f"node {leader} was in no cleaning pass over {COMPACT_TOPIC} for 180 s")
                await asyncio.sleep(0.05)
            await c.kill(leader)
            lines = cleaner_lines(c, leader, since)
            start = max(k for k, (began, _) in enumerate(lines) if began)
            ended = any(not began for began, _ in lines[start:])
            mid += not ended
            log(f"fault: kill -9 the leader of {COMPACT_TOPIC} (node {leader}) "
                f"{'after its cleaning pass ended' if ended else 'in the middle of a cleaning pass'}: "
                f"{lines[start][1].strip()[-160:]}")
        await asyncio.sleep(SESSION_MS / 1000 + 2)
        await kp.wait_acks(200)
        await prod.wait_acks(50)
        c.start(leader)
        await c.wait_healthy(f"restarting node {leader}")
        if c.kafka or mid >= 2:
            break
    if not c.kafka and mid == 0:
        raise Failure(f"no kill landed in the middle of a cleaning pass over {COMPACT_TOPIC}")
    await wait_compacted_isr(c, "the last restart")
    await kp.wait_acks(500)
    await kp.stop()


async def check_compacted(c):
    """What the keyed producers had acknowledged, against COMPACT_TOPIC read back. Every
    read must be right; the log must end mostly cleaned. Cleaning is asynchronous and held
    to the I/O limit, which a node just restarted spends first on its coordinators' topics
    (every log before a restart is cleanable), so the leader may still be behind: the topic
    is read again, up to CLEAN_WAIT_S, until at most half of what was acknowledged is left."""
    if not c.keyed:
        return []
    deadline = time.time() + CLEAN_WAIT_S
    while True:
        problems, left, acked = await read_compacted(c)
        if problems or left * 2 <= acked:
            return problems
        if time.time() > deadline:
            return [f"{COMPACT_TOPIC} was hardly cleaned: {left} of {acked} acknowledged records left, "
                    f"read again for {CLEAN_WAIT_S} s"]
        log(f"{COMPACT_TOPIC}: {left} of {acked} acknowledged records left; the leader's cleaner is behind, "
            "reading again in 5 s")
        await asyncio.sleep(5)


async def read_compacted(c):
    """One read of COMPACT_TOPIC from the beginning: (problems, records left, records
    acknowledged)."""
    out = await run(["kcat", "-C", "-b", c.bootstrap(), "-t", COMPACT_TOPIC, "-o", "beginning", "-e", "-q",
                     "-f", "%o %k %s\\n"], timeout=120)
    read = {}
    latest = {}  # key -> its highest offset read
    for line in out.splitlines():
        o, k, v = line.split(" ", 2)
        read[int(o)] = (k, v)
        latest[k] = max(latest.get(k, -1), int(o))
    problems, acked, kept = [], 0, 0
    for kp in c.keyed:
        for (p, o), v in sorted(kp.acked.items()):
            acked += 1
            k = kp.key_of[(p, o)]
            got = read.get(o)
            if got is not None:
                kept += 1
                if got != (k, v):
                    problems.append(f"{COMPACT_TOPIC}: acknowledged {k}={v} at {o}, read {got[0]}={got[1]}")
            elif latest.get(k, -1) <= o:
                problems.append(f"{COMPACT_TOPIC}: acknowledged {k}={v} at {o} is gone, and no later record "
                                f"of key {k} is left (latest read: {latest.get(k)})")
    log(f"{COMPACT_TOPIC}: {acked} records acknowledged, {len(read)} left after cleaning ({kept} of them "
        f"acknowledged), {len(latest)} keys")
    return problems, len(read), acked


REASSIGN_CMD = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"


async def move_replicas(c, targets, what):
    """kafka-reassign-partitions --execute to {partition: replicas}, then --verify until
    it reports every move complete; each broker's metadata must show the targets."""
    plan = c.dir / "reassign.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": TOPIC, "partition": p, "replicas": r} for p, r in sorted(targets.items())]}))
    await run([str(KAFKA_RUN), REASSIGN_CMD, "--bootstrap-server", c.bootstrap(), "--execute",
               "--reassignment-json-file", str(plan)], timeout=120)
    deadline = time.time() + 120
    while True:
        out = await run([str(KAFKA_RUN), REASSIGN_CMD, "--bootstrap-server", c.bootstrap(), "--verify",
                         "--reassignment-json-file", str(plan)], timeout=120, check=False)
        views = [await c.view(i) for i in NODES]
        if out.count("is completed") == len(targets) and all(
                {p: v[1] for p, v in view.items()} == targets for view in views):
            log(f"{what}: complete, " + ", ".join(f"p{p} {r}" for p, r in sorted(targets.items())))
            return
        if time.time() > deadline:
            raise Failure(f"{what} not complete in 120 s: {out.strip()[-300:]} {await c.metadata()}")
        await asyncio.sleep(1)


async def reassign(c, prod):
    """Not a kill: kafka-reassign-partitions takes the leader of partition 0 out of every
    partition's replicas under load (its data is deleted, leaderships move), then puts it
    back where it was, so it copies every partition from scratch and rejoins the ISR."""
    md = await c.metadata()
    out = md[0][0]
    original = {p: v[1] for p, v in md.items()}
    log(f"fault: reassign every partition away from node {out} (the leader of partition 0), then back")
    await move_replicas(c, {p: [b for b in r if b != out] for p, r in original.items()}, f"moving off node {out}")
    await prod.wait_acks(50)
    await move_replicas(c, original, f"moving back onto node {out}")
    await c.wait_healthy("the reassignments")
    await prod.wait_acks(50)


async def preferred_election(c, prod):
    """Not a fault: kafka-leader-election moves every leadership back to the preferred
    replica (after the faults above, most have moved)."""
    out = await run([str(KAFKA_RUN), "org.apache.kafka.tools.LeaderElectionCommand", "--bootstrap-server",
                     c.bootstrap(), "--election-type", "PREFERRED", "--all-topic-partitions"],
                    timeout=120, check=False)
    deadline = time.time() + 30
    while time.time() < deadline:
        views = [await c.view(i) for i in NODES]
        if all(len(v) == PARTITIONS and all(l == r[0] for l, r, _ in v.values()) for v in views):
            log("kafka-leader-election: every partition led by its preferred replica")
            return
        await asyncio.sleep(0.5)
    raise Failure(f"leaders not preferred after kafka-leader-election ({out.strip()[-300:]}): {await c.metadata()}")


TXN_OUT = "faults-copy"
TXN_ID = "faults-copier"
TXN_CMD = "org.apache.kafka.tools.TransactionsCommand"


class Copier:
    """Kafka's TransactionalMessageCopier (the EOS system tests' tool) copying TOPIC into
    TXN_OUT partition for partition, in transactions of up to 100 records, one in three
    aborted at random, the consumed offsets committed in each transaction (group mode,
    KIP-447 group metadata). The copier exits once it has copied what the input held when
    it started, so this supervisor starts it again; any other exit is a failure, except
    for the zombie that `zombie_copier` expects to be fenced."""

    def __init__(self, cluster, workdir):
        self.cluster, self.dir = cluster, Path(workdir)
        self.runs = 0
        self.copied = 0  # records committed by finished runs
        self.status = {}  # the running copier's last status line
        self.crashes = []
        self.proc = None
        self.zombie = None
        self.finish_after = None  # stop once a run started after this time ends

    def argv(self):
        return [str(KAFKA_RUN), "org.apache.kafka.tools.TransactionalMessageCopier",
                "--broker-list", self.cluster.bootstrap(), "--input-topic", TOPIC, "--input-partition", "0",
                "--output-topic", TXN_OUT, "--transactional-id", TXN_ID, "--consumer-group", TXN_ID,
                "--group-mode", "--use-group-metadata", "--enable-random-aborts", "--transaction-size", "100"]

    async def launch(self):
        self.runs += 1
        self.status = {}
        err = open(self.dir / f"copier-{self.runs}.err", "wb")
        self.proc = await asyncio.create_subprocess_exec(*self.argv(), stdout=asyncio.subprocess.PIPE, stderr=err,
                                                         start_new_session=True)
        self.proc.started = time.time()
        self.proc.run = self.runs
        self.proc.reader = asyncio.create_task(self.read(self.proc))

    async def read(self, proc):
        out = open(self.dir / f"copier-{proc.run}.out", "ab")
        while line := await proc.stdout.readline():
            out.write(line)
            out.flush()
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if proc is self.proc:
                self.status = ev

    def progress(self):
        return self.copied + self.status.get("totalProcessed", 0)

    async def start(self):
        await self.launch()
        self.task = asyncio.create_task(self.supervise())

    async def supervise(self):
        while True:
            proc = self.proc
            await proc.reader
            rc = await proc.wait()
            if proc is not self.proc:
                continue  # replaced (the zombie); zombie_copier waits for it itself
            done = self.status.get("totalProcessed", 0)
            self.copied += done
            if rc != 0:
                tail = (self.dir / f"copier-{proc.run}.err").read_text(errors="replace")[-1500:]
                self.crashes.append(f"copier run {proc.run} exited {rc}: {tail}")
                log(f"copier run {proc.run} exited {rc} after {done} records")
            if self.finish_after is not None and proc.started > self.finish_after and rc == 0:
                return
            await asyncio.sleep(0.5)
            await self.launch()

    async def replace(self):
        """Starts a second copier with the same transactional id while the current one is
        SIGSTOPped; the stopped one becomes the zombie."""
        self.zombie = self.proc
        self.copied += self.status.get("totalProcessed", 0)
        await self.launch()

    async def wait_progress(self, n, what, timeout=120):
        target = self.progress() + n
        deadline = time.time() + timeout
        while self.progress() < target:
            if time.time() > deadline:
                raise Failure(f"the copier committed {self.progress() - target + n} of {n} records in {timeout}s "
                              f"after {what}")
            await asyncio.sleep(0.5)
        log(f"the copier committed {n} more records after {what} ({self.progress()} in all)")

    async def finish(self, timeout=240):
        """Once the producer has stopped: until a copier run that started afterwards has
        copied everything and exited."""
        self.finish_after = time.time()
        try:
            await asyncio.wait_for(asyncio.shield(self.task), timeout)
        except asyncio.TimeoutError:
            raise Failure(f"the copier did not catch up with the input within {timeout}s: {self.status}")
        log(f"copier: {self.runs} runs, {self.copied} records committed")

    def kill(self):
        for p in (self.proc, self.zombie):
            if p is not None and p.returncode is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


async def describe_txn(c):
    """The copier's transaction as kafka-transactions describe shows it: (coordinator id,
    producer epoch, state, [partitions]), or None while there is no answer."""
    # A coordinator just killed is named by FindCoordinator until the controller fences it,
    # and the admin client then waits for it up to its API timeout: keep that short.
    cfg = c.dir / "admin.properties"
    cfg.write_text("default.api.timeout.ms=8000\nrequest.timeout.ms=4000\n")
    out = await run([str(KAFKA_RUN), TXN_CMD, "--bootstrap-server", c.bootstrap(), "--command-config", str(cfg),
                     "describe", "--transactional-id", TXN_ID], timeout=60, check=False)
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 8 and f[1] == TXN_ID and f[0].isdigit():
            parts = f[8].split(",") if len(f) > 8 else []
            return int(f[0]), int(f[3]), f[4], parts
    return None


# How long to look for an ongoing transaction. Each look is a kafka-transactions run (a JVM,
# 2-3 s) that sees one moment; the copier's transactions are Ongoing only between its first
# send and its commit, a small part of each cycle on an idle machine, so 60 s of looks
# missed them all in one CI run (2026-12-02).
ONGOING_TIMEOUT = 180


async def wait_txn(c, ok, what, timeout=60):
    deadline = time.time() + timeout
    while True:
        d = await describe_txn(c)
        if d and ok(d):
            log(f"transaction {TXN_ID} {what}: coordinator {d[0]}, epoch {d[1]}, {d[2]} {','.join(d[3])}")
            return d
        if time.time() > deadline:
            raise Failure(f"transaction {TXN_ID} not {what} within {timeout}s: {d}")
        await asyncio.sleep(0.2)


async def kill_txn_coordinator(c, prod):
    """kill -9 of the transaction coordinator between AddPartitionsToTxn and EndTxn: the
    new coordinator (another replica of the __transaction_state partition) aborts or
    finishes the transaction and the copier carries on."""
    d = await wait_txn(c, lambda d: d[2] == "Ongoing" and d[3], "ongoing", timeout=ONGOING_TIMEOUT)
    log(f"fault: kill -9 the transaction coordinator (node {d[0]}) during an ongoing transaction")
    await c.kill(d[0])
    await wait_txn(c, lambda e: e[0] != d[0], "moved", timeout=SESSION_MS / 1000 + 60)
    await c.copier.wait_progress(300, "the coordinator's loss")
    c.start(d[0])
    await c.wait_healthy("the transaction coordinator's restart")


async def wait_held(c, timeout=90):
    """Until the copier's transaction stays in PrepareCommit or PrepareAbort across two
    looks 1.5 s apart: (coordinator, epoch, state, partitions)."""
    deadline = time.time() + timeout
    seen = None
    while time.time() < deadline:
        d = await describe_txn(c)
        if d and d[2] in ("PrepareCommit", "PrepareAbort"):
            if d == seen:
                log(f"transaction {TXN_ID} held in {d[2]}: epoch {d[1]}, {','.join(d[3])}")
                return d
            seen = d
            await asyncio.sleep(1.5)
        else:
            seen = None
    raise Failure(f"no transaction of {TXN_ID} held prepared within {timeout}s with its coordinator cut off")


async def held_records(c, d, coord):
    """{partition: [(offset, value)]}: the records a transaction held in PrepareCommit has on
    the TXN_OUT partitions not led by its coordinator (whose markers cannot arrive). The
    copier writes nothing else meanwhile, so they are each log's tail after its last
    marker (an offset gap in what read_uncommitted returns)."""
    held = {}
    for tp in d[3]:
        topic, _, p = tp.rpartition("-")
        if topic != TXN_OUT:
            continue
        p = int(p)
        if (await c.view(next(i for i in NODES if i != coord), TXN_OUT))[p][0] == coord:
            continue
        tail = await read_partition(c, p, "read_uncommitted")
        k = len(tail) - 1
        while k > 0 and tail[k][0] == tail[k - 1][0] + 1:
            k -= 1
        if tail:
            held[p] = tail[k:]
    return held


async def kill_txn_coordinator_committing(c, prod):
    """kill -9 of the transaction coordinator during a commit: its links to the other
    brokers are cut (clients still reach it) so the commit's markers cannot reach the
    partitions led elsewhere and the transaction stays in PrepareCommit; then it dies. The
    new coordinator must write the COMMIT markers from its replica of the log."""
    await preferred_election(c, prod)  # so that the output partitions are led by every node
    for attempt in range(10):
        coord = (await wait_txn(c, lambda d: True, "found"))[0]
        links = [k for k in c.proxies if k[0] == "repl" and k[1] == coord]
        for k in links:
            c.proxies[k].cut()
        log(f"links from the transaction coordinator (node {coord}) to the other brokers cut")
        # Transactions on partitions the coordinator leads still complete; wait for one
        # that stays prepared.
        d = await wait_held(c)
        held = await held_records(c, d, coord) if d[2] == "PrepareCommit" else {}
        if held:
            break
        for k in links:
            c.proxies[k].heal()
        await wait_txn(c, lambda d: d[2] not in ("PrepareCommit", "PrepareAbort"), "completed")
    else:
        raise Failure("in ten tries, no transaction with records on another leader held in PrepareCommit")
    log(f"fault: kill -9 the transaction coordinator (node {coord}) in PrepareCommit, its transaction holding "
        + ", ".join(f"{len(v)} records at {TXN_OUT}-{p} {v[0][0]}..{v[-1][0]}" for p, v in held.items() if v))
    await c.kill(coord)
    for k in links:
        c.proxies[k].heal()
    await wait_txn(c, lambda e: e[0] != coord and e[2] != "PrepareCommit", "completed by the new coordinator",
                   timeout=SESSION_MS / 1000 + 60)
    for p, records in held.items():
        visible = set(await read_partition(c, p, "read_committed"))
        missing = [r for r in records if r not in visible]
        if missing:
            raise Failure(f"the transaction in PrepareCommit was not committed by the new coordinator: "
                          f"{len(missing)} of its records on {TXN_OUT}-{p} invisible to read_committed, "
                          f"e.g. {missing[:3]}")
    log("the new coordinator committed the held transaction: read_committed sees its records")
    await c.copier.wait_progress(300, "the committing coordinator's loss")
    c.start(coord)
    await c.wait_healthy("the transaction coordinator's restart")


async def kill_txn_leader(c, prod):
    """kill -9 of the leader of a partition the ongoing transaction has written to."""
    out = lambda d: [tp for tp in d[3] if tp.rpartition("-")[0] == TXN_OUT]
    d = await wait_txn(c, lambda d: d[2] == "Ongoing" and out(d), f"ongoing on {TXN_OUT}",
                       timeout=ONGOING_TIMEOUT)
    p = int(out(d)[0].rpartition("-")[2])
    leader = (await c.view(next(i for i in NODES if c.alive(i)), TXN_OUT))[p][0]
    log(f"fault: kill -9 the leader of {TXN_OUT}-{p} (node {leader}) in the middle of a transaction")
    await c.kill(leader)
    await asyncio.sleep(SESSION_MS / 1000 + 2)
    await c.copier.wait_progress(300, f"the loss of {TXN_OUT}-{p}'s leader")
    c.start(leader)
    await c.wait_healthy("the leader's restart")


async def zombie_copier(c, prod):
    """A zombie: the copier is SIGSTOPped mid-run, a second instance with the same
    transactional id starts (InitProducerId fences the first and aborts its transaction)
    and commits; then the first resumes, and must be refused (PRODUCER_FENCED) and exit
    without committing anything. A zombie that resumes into a rebalance leaving it nothing
    to copy exits cleanly before it writes; that is no test of fencing, so the fault is
    tried again (three times at most)."""
    for attempt in range(3):
        if await zombie_once(c):
            await c.copier.wait_progress(300, "fencing the zombie")
            return
    raise Failure("in three tries the zombie copier never wrote again after resuming, so it was never fenced")


async def zombie_once(c):
    """One zombie: True once it was fenced, False when it exited with nothing to do."""
    cp = c.copier
    epoch = (await describe_txn(c) or (0, -1))[1]
    deadline = time.time() + 120
    while True:
        if time.time() > deadline:
            raise Failure(f"the copier never had 300 records left to copy: {cp.status}")
        old = cp.proc
        # Mid-run: assigned its partitions (until then "remaining" is Long.MAX_VALUE), one
        # transaction committed, and more to copy, so most likely inside a transaction.
        st = cp.status
        if (st.get("stage") == "ProcessLoop" and 300 <= st.get("remaining", 0) < 2 ** 63 - 1
                and st.get("totalProcessed", 0) > 0):
            try:
                os.killpg(old.pid, signal.SIGSTOP)
                break
            except ProcessLookupError:
                pass  # it had just finished
        await asyncio.sleep(0.05)
    committed = cp.status.get("totalProcessed", 0)
    log(f"fault: SIGSTOP the copier (run {old.run}, epoch {epoch} or later, {committed} records committed) "
        "and start another with the same transactional id")
    await cp.replace()
    await cp.wait_progress(300, "the second copier's start")
    os.killpg(old.pid, signal.SIGCONT)
    try:
        rc = await asyncio.wait_for(old.wait(), 90)
    except asyncio.TimeoutError:
        raise Failure("the zombie copier was not fenced within 90s of resuming")
    await old.reader
    err = (cp.dir / f"copier-{old.run}.err").read_text(errors="replace")
    lines = [json.loads(x) for x in (cp.dir / f"copier-{old.run}.out").read_text().splitlines()
             if x.startswith("{")]
    after = max((ev.get("totalProcessed", 0) for ev in lines), default=0)
    # A status line comes at the top of each poll loop, so the one seen at the stop can miss
    # the transaction (at most 100 records) committed just before it.
    if after > committed + 100:
        raise Failure(f"the zombie copier committed {after - committed} records after it was replaced")
    fenced = re.search(r"[A-Za-z.]*(ProducerFenced|InvalidProducerEpoch)[^\n]*", err)
    if rc == 0 and not fenced:
        log(f"the zombie copier exited cleanly without writing (its last status: {lines[-1] if lines else None}); "
            "again")
        return False
    if rc == 0 or not fenced:
        raise Failure(f"the zombie copier exited {rc} without being fenced: {err[-1500:]}")
    log(f"the zombie copier was fenced: {fenced.group(0)[:160]}")
    return True


TXN_FAULTS = [kill_txn_coordinator, kill_txn_coordinator_committing, kill_txn_leader, zombie_copier]


FAULTS = [kill_leader, kill_controller, cut_follower, cut_leader, lose_two, stop_leader, rolling_restart,
          kill_coordinator, kill_consumer_coordinator, kill_share_coordinator] + TXN_FAULTS + [
              reassign, unclean_election, kill_cleaning_leader]

# Run only when named with --faults, not in CI, with the reason. cut_coordinator: its checks
# of the cut-off node hold, but in 3 of about 12 runs the console consumer then could not
# commit through the new coordinator within 60 s (NOT_COORDINATOR throughout, also when it
# bootstraps from the two other brokers only); the cause is not found yet.
UNSTABLE = [cut_coordinator]

# What Cairn promises beyond Kafka: a coordinator cut off from the controller stops answering.
CAIRN_ONLY = [cut_coordinator]


# ---- checks ------------------------------------------------------------------------------

async def read_back(c):
    out = await run(["kcat", "-C", "-b", c.bootstrap(), "-t", TOPIC, "-o", "beginning", "-e", "-q",
                     "-f", "%p %o %s\\n"], timeout=120)
    log_ = {}
    for line in out.splitlines():
        p, o, v = line.split(" ", 2)
        log_[(int(p), int(o))] = v
    return log_


def check(prod, records):
    problems = []
    for key, value in sorted(prod.acked.items()):
        got = records.get(key)
        if got != value:
            problems.append(f"acknowledged {value} at {key}, read {got!r}")
    seen = {}
    for key, value in records.items():
        if value in seen:
            problems.append(f"value {value} at {seen[value]} and {key}")
        seen[value] = key
    for p in range(PARTITIONS):
        values = [int(v) for (q, _), v in sorted(records.items()) if q == p]
        for a, b in zip(values, values[1:]):
            if b < a:
                problems.append(f"partition {p}: {b} after {a}")
                break
    return problems


async def read_partition(c, p, isolation):
    """[(offset, value)] of TXN_OUT partition p."""
    out = await run(["kcat", "-C", "-b", c.bootstrap(), "-t", TXN_OUT, "-p", str(p), "-o", "beginning", "-e", "-q",
                     "-X", f"isolation.level={isolation}", "-f", "%o %s\\n"], timeout=120)
    return [(int(o), v) for o, v in (line.split(" ", 1) for line in out.splitlines())]


async def check_copy(c, records):
    """The copy, read with read_committed, holds each input partition's records exactly:
    every committed transaction whole and once, no aborted one."""
    problems = []
    out = await run(["kcat", "-C", "-b", c.bootstrap(), "-t", TXN_OUT, "-o", "beginning", "-e", "-q",
                     "-X", "isolation.level=read_committed", "-f", "%p %s\\n"], timeout=120)
    copy = {p: [] for p in range(PARTITIONS)}
    for line in out.splitlines():
        p, v = line.split(" ", 1)
        copy[int(p)].append(v)
    everything = await run(["kcat", "-C", "-b", c.bootstrap(), "-t", TXN_OUT, "-o", "beginning", "-e", "-q",
                            "-X", "isolation.level=read_uncommitted"], timeout=120)
    for p in range(PARTITIONS):
        want = [v for (q, _), v in sorted(records.items()) if q == p]
        got = copy[p]
        if got != want:
            at = next((k for k, (a, b) in enumerate(zip(want, got)) if a != b), min(len(want), len(got)))
            problems.append(f"{TXN_OUT}-{p} (read_committed) differs from {TOPIC}-{p} at record {at}: "
                            f"{got[at:at + 3]} vs {want[at:at + 3]} ({len(got)} vs {len(want)} records)")
    aborted = len(everything.splitlines()) - sum(len(v) for v in copy.values())
    log(f"copy: {sum(len(v) for v in copy.values())} committed records, {aborted} more in aborted transactions")
    if aborted <= 0:
        problems.append("no aborted records in the copy: the copier's random aborts did not happen")
    return problems


async def compare_replicas(c):
    dumps = {}
    for i in NODES:
        data = c.dir / f"n{i}" / "data"
        if c.kafka:
            lines = []
            for p in range(PARTITIONS):
                files = sorted(str(f) for f in (data / f"{TOPIC}-{p}").glob("*.log"))
                out = await run(["java", "-Xmx256M", "-cp", f"{JAVA_LIB}/*", "org.apache.kafka.tools.DumpLogSegments",
                                 "--files", ",".join(files)], timeout=120)
                for line in out.splitlines():
                    if line.startswith("baseOffset:"):
                        f = dict(re.findall(r"(\w+): (\S+)", line))
                        lines.append(f"{TOPIC} {p} {f['baseOffset']} {f['lastOffset']} "
                                     f"{f['partitionLeaderEpoch']} {int(f['crc']):08x}")
            dumps[i] = lines
        else:
            # every topic: the test topic's batches, and the latest record of each key of
            # __consumer_offsets and __transaction_state (compacted by each replica alone)
            out = await run([c.binary, "dump-log", str(data)], timeout=60)
            dumps[i] = out.splitlines()
    # UNCLEAN_TOPIC has two replicas: those two must match; the third node holds nothing.
    two = {i: [l for l in d if l.split(" ", 1)[0] == UNCLEAN_TOPIC] for i, d in dumps.items()}
    held = [d for d in two.values() if d]
    if any(d != held[0] for d in held) or len(held) not in (0, 2):
        raise Failure(f"{UNCLEAN_TOPIC} replicas differ: " + ", ".join(f"node {i}: {len(d)} batches"
                                                                   for i, d in two.items()))
    dumps = {i: [l for l in d if l.split(" ", 1)[0] != UNCLEAN_TOPIC] for i, d in dumps.items()}
    first = dumps[NODES[0]]
    bad = [i for i in NODES if dumps[i] != first]
    if bad:
        for i in bad:
            diff = next((k for k, (a, b) in enumerate(zip(first, dumps[i])) if a != b), min(len(first), len(dumps[i])))
            raise Failure(f"replica on node {i} differs from node {NODES[0]} at batch {diff}: "
                          f"{dumps[i][diff:diff + 1]} vs {first[diff:diff + 1]} ({len(dumps[i])} vs {len(first)} batches)")
    return len(first)


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--keep", action="store_true", help="keep the work dir (logs, data)")
    ap.add_argument("--faults", help="comma-separated fault names to run (default: all)")
    ap.add_argument("--kafka", action="store_true", help="run against Apache Kafka brokers (baseline)")
    ap.add_argument("--secured", action="store_true",
                    help="brokers replicate and the quorum runs over SASL_SSL with 5 s sessions, ACLs on")
    args = ap.parse_args()
    random.seed(args.seed)
    work = Path(tempfile.mkdtemp(prefix="cairn-faults-"))
    global LOG_FILE
    LOG_FILE = work / "harness.log"
    log(f"work dir {work}, seed {args.seed}, rounds {args.rounds}")
    if args.secured and args.kafka:
        ap.error("--secured is for Cairn's nodes")
    c = Cluster(os.path.abspath(args.binary), work, kafka=args.kafka, secured=args.secured)
    if args.kafka:
        await run([str(ROOT / "compat-tests" / "java" / "setup.sh")], timeout=900,
                  env=dict(os.environ, KAFKA_VERSION=KAFKA_REF_VERSION))
        import base64
        c.cluster_id = base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=").replace("-", "A")
    await c.make_certs()
    await c.start_proxies()
    ok = False
    failure = None
    done = []  # the faults that passed
    prod = copier = None
    try:
        for i in NODES:
            c.start(i)
        deadline = time.time() + 60
        while True:
            out = await run([str(KAFKA_RUN), "org.apache.kafka.tools.TopicCommand", "--bootstrap-server", c.bootstrap(),
                             "--create", "--if-not-exists", "--topic", TOPIC, "--partitions", str(PARTITIONS),
                             "--replication-factor", "3", "--config", "min.insync.replicas=2"],
                            timeout=120, check=False)
            if (await c.metadata()) or time.time() > deadline:
                break
            await asyncio.sleep(1)
        await run([str(KAFKA_RUN), "org.apache.kafka.tools.TopicCommand", "--bootstrap-server", c.bootstrap(),
                   "--create", "--if-not-exists", "--topic", TXN_OUT, "--partitions", str(PARTITIONS),
                   "--replication-factor", "3", "--config", "min.insync.replicas=2"], timeout=120)
        await c.wait_healthy("creating the topics")
        prod = Producer(c, work)
        await prod.start()
        await prod.wait_acks(200, timeout=120)
        copier = c.copier = Copier(c, work)
        await copier.start()
        await copier.wait_progress(200, "starting")
        chosen = ([f for f in FAULTS if not args.faults or f.__name__ in args.faults.split(",")] +
                  [f for f in UNSTABLE if args.faults and f.__name__ in args.faults.split(",")])
        if args.kafka and any(f in CAIRN_ONLY for f in chosen):
            log(f"not run against Kafka (it does not claim them): {', '.join(f.__name__ for f in CAIRN_ONLY)}")
            chosen = [f for f in chosen if f not in CAIRN_ONLY]
        for r in range(args.rounds):
            faults = chosen if r == 0 else random.sample(chosen, len(chosen))
            for f in faults:
                await f(c, prod)
                done.append(f.__name__)
        await preferred_election(c, prod)
        await prod.wait_acks(100)
        await prod.stop()
        await copier.finish()
        await c.wait_healthy("the last fault")
        records = await read_back(c)
        problems = check(prod, records) + await check_copy(c, records) + copier.crashes + await check_compacted(c)
        log(f"producer: {len(prod.acked)} acknowledged, {prod.errors} send errors; read back {len(records)} records")
        for i in NODES:
            await c.kill(i, signal.SIGTERM)
        batches = await compare_replicas(c)
        log(f"replicas identical on all nodes: {batches} batches")
        if problems:
            for p in problems[:20]:
                log(f"PROBLEM: {p}")
            raise Failure(f"{len(problems)} problems in what was read back")
        log(f"PASS: {len(done)} faults ({', '.join(done)}); every acknowledged record present, "
            "no duplicates, order kept, the transactional copy exact, replicas identical")
        ok = True
    except Failure as e:
        failure = e
        log(f"FAIL: {e}")
    finally:
        for p in [prod] + c.keyed:
            if p is not None and getattr(p, "proc", None) is not None and p.proc.returncode is None:
                p.proc.kill()
        if copier is not None:
            copier.kill()
        for i in NODES:
            await c.kill(i, signal.SIGCONT)
            await c.kill(i)
        if not ok:
            for i in NODES:
                logf = work / f"n{i}" / "broker.log"
                if logf.exists():
                    print(f"---- node {i} log (tail) ----")
                    print("\n".join(logf.read_text(errors="replace").splitlines()[-40:]))
        if ok and not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            log(f"kept {work}")
        if failure is not None:
            # Again, last: CI shows only the tail of what ran.
            log(f"FAIL (after {', '.join(done) or 'no faults'}): {failure}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
