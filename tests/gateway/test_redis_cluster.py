"""test_redis_cluster.py: flashgate on a Redis Cluster (redis.mode cluster).

Three redis-server masters on loopback ports, joined with `redis-cli --cluster create`;
flashgate is given one of them as its only seed (redis.nodes). A tenant whose keys hash to
another master is created through the admin API and its session limit holds over the
WebSocket; its keys are on the master that owns their slot. The policies tests
(quota_cluster, quota_sentinel) cover redirects, failover and Sentinel; this one covers the
config and the gateway's construction of the link."""
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Conn, check, eq, log, run_tests  # noqa: E402
from test_admin import admin_server  # noqa: E402
from test_quotas import make_tenant, open_session, quota_error  # noqa: E402

RANGES = [(0, 5460), (5461, 10922), (10923, 16383)]  # what --cluster create assigns, in node order


def port_free(p):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", p))
            return True
        except OSError:
            return False


class RedisCluster:
    """Three masters; ports below the ephemeral range, their bus ports (+10000) free too. Used as
    test_quotas.Redis is (start, cli, config, close) by tests that run on either."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="fg-gw-cluster-")
        self.procs = []
        base = 23000 + (os.getpid() % 300) * 16
        while not all(port_free(base + i) and port_free(base + 10000 + i) for i in range(3)):
            base += 16
        self.ports = [base + i for i in range(3)]

    def node_cli(self, port, *args):
        """A command to the master on port alone (no redirect followed)."""
        r = subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True, text=True, timeout=30)
        return r.stdout.strip()

    def cli(self, *args):
        """A command to the cluster: sent to the first master, MOVED followed to the key's (-c)."""
        r = subprocess.run(["redis-cli", "-c", "-p", str(self.ports[0]), *args],
                           capture_output=True, text=True, timeout=30)
        return r.stdout

    def config(self, seeds=3):
        """flashgate's redis section for this cluster, its first seeds masters as the seeds."""
        return {"mode": "cluster", "nodes": [f"127.0.0.1:{p}" for p in self.ports[:seeds]]}

    def start(self):
        for p in self.ports:
            d = os.path.join(self.dir, str(p))
            os.mkdir(d)
            self.procs.append(subprocess.Popen(
                ["redis-server", "--port", str(p), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
                 "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "1000", "--dir", d,
                 "--save", "", "--appendonly", "no", "--logfile", os.path.join(d, "redis.log")],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        for p in self.ports:
            self.wait(p, "PING", "PONG")
        r = subprocess.run(["redis-cli", "--cluster", "create", *[f"127.0.0.1:{p}" for p in self.ports],
                            "--cluster-yes"], capture_output=True, text=True, timeout=60)
        check(r.returncode == 0, f"redis-cli --cluster create: {r.stdout} {r.stderr}")
        for p in self.ports:
            self.wait(p, "CLUSTER INFO", "cluster_state:ok")
        return self

    def wait(self, port, command, want, timeout=20):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if want in self.node_cli(port, *command.split()):
                return
            time.sleep(0.05)
        raise AssertionError(f"redis on {port}: no {want!r} from {command}")

    def owner(self, key):
        """The index (in ports) of the master that holds key's slot."""
        slot = int(self.node_cli(self.ports[0], "CLUSTER", "KEYSLOT", key))
        return next(i for i, (lo, hi) in enumerate(RANGES) if lo <= slot <= hi)

    def close(self):
        for p in self.procs:
            p.kill()
            p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


async def test_cluster_limits_hold():
    cluster = RedisCluster().start()
    try:
        tid = next(f"cl{k}" for k in range(1000) if cluster.owner(f"{{tenant:cl{k}}}:config") > 0)  # not on the seed
        owner = cluster.owner(f"{{tenant:{tid}}}:config")
        async with admin_server(redis=cluster.config(seeds=1)) as srv:
            key = make_tenant(srv, tid, max_sessions=1)
            a = await open_session(srv, key)
            c = await Conn.open(srv, key=key)
            await c.send({"type": "session.create"})
            quota_error(await c.recv(), "too_many_sessions", retry=False)
            eq(cluster.node_cli(cluster.ports[owner], "EXISTS", f"{{tenant:{tid}}}:config"), "1",
               f"the tenant's config on master {owner}")
            eq(cluster.cli("HGET", f"{{tenant:{tid}}}:config", "max_sessions").strip(), "1",
               "read through the cluster")
            eq(cluster.node_cli(cluster.ports[owner], "ZCARD", f"{{tenant:{tid}}}:sessions"), "1", "one session lease")
            for x in (a, c):
                await x.close()
        log(f"tenant {tid} on master {owner} of {cluster.ports}")
    finally:
        cluster.close()


if __name__ == "__main__":
    run_tests(globals())
