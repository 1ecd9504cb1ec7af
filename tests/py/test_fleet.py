"""Fleet mode (docs/design.md §11) with real processes: etcd, NATS, mockers with
`kvgate register` sidecars, several `kvgate serve` replicas, and the faults an operator
meets (etcd, NATS, a replica, an engine or a sidecar going away)."""
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from fleet_services import Etcd, Nats, Register, wait_until  # noqa: E402
from kvgate_test import Mocker, main  # noqa: E402
from test_gateway import Gateway, worker_config  # noqa: E402

BLOCK = 16


def listing(gw):
    """url -> the worker entry of GET /admin/workers."""
    status, text = gw.request("GET", "/admin/workers")
    assert status == 200, text
    return {w["url"]: w for w in json.loads(text)["workers"]}


def healthy_urls(gw):
    return sorted(url for url, w in listing(gw).items() if w["healthy"])


def kill_replica(gw):
    """SIGKILL: no goodbye to the peers; they must notice the silence."""
    gw.proc.kill()
    gw.proc.wait(10)
    gw.proc.stdout.close()
    gw.log.close()


def long_stream(gw, prompt, max_tokens=3000, headers=None):
    """Starts a long streaming completion and waits for its first token (so it is routed and
    past prefill); the caller closes it."""
    r = gw.open_stream({"prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True},
                       headers=headers)
    while not r.readline().startswith(b"data: "):
        pass
    return r


def complete(gw, prompt, max_tokens=2):
    return gw.post("/v1/completions", {"prompt": prompt, "max_tokens": max_tokens,
                                       "nvext": {"extra_fields": ["worker_id", "cached_blocks"]}})


def peers_load(gw, worker):
    return gw.metric("kvgate_worker_active_requests", worker=worker, source="peers")


def non_loopback_address():
    """An IPv4 address of this machine other than 127.x, if it has one."""
    try:
        out = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
    except OSError:
        return None
    return next((a for a in out if "." in a and not a.startswith("127.")), None)


class FleetTest(unittest.TestCase):
    def test_replicas_share_workers_and_load_and_survive_faults(self):
        etcd, nats = Etcd(), Nats()
        mockers = [Mocker(speedup="1") for _ in range(3)]
        sidecars = [Register(etcd, m, "--ttl-s", "3") for m in mockers]
        fleet = ["--etcd", etcd.url, "--nats", nats.url, "--block-size", str(BLOCK)]
        replicas = [Gateway(*fleet) for _ in range(3)]
        extra_mocker = extra_sidecar = None
        try:
            urls = sorted(m.url for m in mockers)
            # Every replica lists the same workers, under the same ids, from etcd.
            for gw in replicas:
                wait_until(lambda: healthy_urls(gw) == urls, 20, "every worker in every replica")
            entries = [listing(gw) for gw in replicas]
            ids = {url: w["id"] for url, w in entries[0].items()}
            for e in entries:
                self.assertEqual({url: w["id"] for url, w in e.items()}, ids)
                self.assertEqual({w["source"] for w in e.values()}, {"etcd"})
            self.assertEqual(len(etcd.keys("/kvgate/workers/")), 3)
            for gw in replicas:
                gw.wait_metric("kvgate_cluster_peers", lambda v: v == 2, timeout=5)

            # A client spreads requests over the replicas.
            for i in range(9):
                status, r = complete(replicas[i % 3], [1000 + i] * 40)
                self.assertEqual(status, 200, r)

            # A long request routed by replica A shows in B's (and C's) view as peers' load.
            a, b, c = replicas
            stream = long_stream(a, [7] * 100)
            busy = next(w for w in ids.values()
                        if a.metric("kvgate_worker_active_requests", worker=w, source="local") == 1)
            for gw in (b, c):
                gw.wait_metric("kvgate_worker_active_requests", lambda v: v == 1, timeout=3,
                               worker=busy, source="peers")

            # Fault: replica A killed. Its in-flight load vanishes from the others within 3 s.
            killed_at = time.time()
            kill_replica(a)
            wait_until(lambda: peers_load(b, busy) == 0 and peers_load(c, busy) == 0, 6,
                       "the dead replica's load to vanish")
            self.assertLess(time.time() - killed_at, 3.5)
            stream.close()
            replicas = [b, c]
            for gw in replicas:
                gw.wait_metric("kvgate_cluster_peers", lambda v: v == 1, timeout=5)

            # Fault: NATS killed. Each replica routes on its own load meanwhile ...
            nats.kill()
            for gw in replicas:
                gw.wait_metric("kvgate_cluster_connected", lambda v: v == 0, timeout=10)
                gw.wait_metric("kvgate_cluster_peers", lambda v: v == 0, timeout=6)
            status, r = complete(b, [3] * 40)
            self.assertEqual(status, 200, r)
            during = long_stream(b, [8] * 100)
            time.sleep(0.3)
            self.assertEqual(c.metric("kvgate_worker_active_requests", source="peers"), 0)
            # ... and sync resumes once it is back: both views agree again.
            nats.start()
            for gw in replicas:
                gw.wait_metric("kvgate_cluster_connected", lambda v: v == 1, timeout=15)
                gw.wait_metric("kvgate_cluster_peers", lambda v: v == 1, timeout=10)
            after = long_stream(c, [9] * 100)
            wait_until(lambda: b.metric("kvgate_worker_active_requests", source="peers") >= 1,
                       5, "C's request in B's view")
            after.close()
            during.close()

            # Fault: etcd killed and restarted. The set is kept meanwhile, nothing is
            # duplicated or lost after, and the watch resumes (a new worker shows up).
            errors_before = b.metric("kvgate_discovery_errors_total")
            etcd.kill()
            b.wait_metric("kvgate_discovery_errors_total", lambda v: v > errors_before, timeout=10)
            for gw in replicas:
                self.assertEqual(healthy_urls(gw), urls)
            status, r = complete(c, [4] * 40)
            self.assertEqual(status, 200, r)
            time.sleep(1)
            etcd.start()
            extra_mocker = Mocker(speedup="1")
            extra_sidecar = Register(etcd, extra_mocker, "--ttl-s", "3")
            urls = sorted(urls + [extra_mocker.url])
            for gw in replicas:
                wait_until(lambda: healthy_urls(gw) == urls, 20, "the set after etcd's restart")
                self.assertEqual(len(listing(gw)), 4)
                self.assertEqual(gw.metric("kvgate_discovery_workers", source="etcd"), 4)

            # Fault: an engine killed. Its sidecar withdraws it; requests meanwhile succeed.
            dead = mockers[0]
            dead.kill()
            for i in range(6):
                status, r = complete(replicas[i % 2], [5000 + i] * 40)
                self.assertEqual(status, 200, r)
            urls.remove(dead.url)
            for gw in replicas:
                wait_until(lambda: sorted(listing(gw)) == urls, 15, "the dead engine to go")
            self.assertNotIn(ids[dead.url], " ".join(etcd.keys("/kvgate/workers/")))
            self.assertIn("withdrew", sidecars[0].output())

            # Fault: a sidecar killed with -9. Its lease expires after the TTL; the worker goes.
            sidecars[1].kill()
            gone_at = time.time()
            urls.remove(mockers[1].url)
            for gw in replicas:
                wait_until(lambda: sorted(listing(gw)) == urls, 15, "the orphaned worker to go")
            self.assertGreater(time.time() - gone_at, 1.5)  # not before its lease ran out
            status, r = complete(b, [6] * 40)
            self.assertEqual(status, 200, r)
        finally:
            for gw in replicas:
                gw.close()
            for s in sidecars + ([extra_sidecar] if extra_sidecar else []):
                s.close()
            for m in mockers + ([extra_mocker] if extra_mocker else []):
                m.close()
            etcd.close()
            nats.close()

    def test_workers_join_and_leave_through_the_admin_api(self):
        static, joining = Mocker(), Mocker()
        gw = Gateway("--block-size", str(BLOCK), config={"workers": [worker_config(static)]})
        try:
            # The joining worker already holds a prompt's blocks before it joins.
            prompt = list(range(100, 100 + 10 * BLOCK + 3))
            status, _ = joining.post("/v1/completions", {"prompt": prompt, "max_tokens": 1})
            self.assertEqual(status, 200)
            record = {"url": joining.url, "engine": "vllm",
                      "kv_events": f"tcp://127.0.0.1:{joining.events}",
                      "kv_replay": f"tcp://127.0.0.1:{joining.replay}"}
            status, added = gw.post("/admin/workers", record)
            self.assertEqual(status, 201, added)
            self.assertEqual((added["url"], added["source"], added["role"], added["block_size"]),
                             (joining.url, "api", "both", BLOCK))
            wid = added["id"]
            # Routed to only once its replay is in: the first request that goes there is
            # already predicted to hit its cache, and the engine agrees.
            wait_until(lambda: listing(gw)[joining.url]["healthy"], 10, "the worker to join")
            status, r = complete(gw, prompt)
            self.assertEqual(status, 200, r)
            self.assertEqual((r["nvext"]["worker_id"], r["nvext"]["cached_blocks"]), (wid, 10))
            self.assertEqual(r["usage"]["prompt_tokens_details"]["cached_tokens"], 10 * BLOCK)

            # Refusals: the same id again, unknown fields, another block size or model.
            status, e = gw.post("/admin/workers", record)
            self.assertEqual((status, e["error"]["type"]), (409, "conflict_error"))
            status, e = gw.post("/admin/workers", {**record, "id": "x", "colour": "red"})
            self.assertEqual(status, 400)
            self.assertIn("colour", e["error"]["message"])
            status, e = gw.post("/admin/workers", {**record, "id": "x", "block_size": 32})
            self.assertEqual(status, 422)
            self.assertIn("block_size", e["error"]["message"])
            status, e = gw.post("/admin/workers", {**record, "id": "y", "model": "other"})
            self.assertEqual(status, 422)
            self.assertEqual(gw.metric("kvgate_discovery_refused_total", source="api"), 2)
            self.assertEqual(sorted(listing(gw)), sorted([static.url, joining.url]))

            # Leaving: gone from the list and from routing, its blocks dropped.
            status, _ = gw.request("DELETE", f"/admin/workers/{wid}")
            self.assertEqual(status, 204)
            self.assertEqual(sorted(listing(gw)), [static.url])
            status, r = complete(gw, prompt)
            self.assertEqual((status, r["nvext"]["cached_blocks"]), (200, 0))
            self.assertEqual(r["nvext"]["worker_id"], gw.worker_id(static))
            status, _ = gw.request("DELETE", f"/admin/workers/{wid}")
            self.assertEqual(status, 404)
            self.assertEqual(gw.metric("kvgate_discovery_workers", source="api"), 0)
        finally:
            gw.close()
            static.close()
            joining.close()

    def test_admin_changes_from_another_machine_need_an_admin_key(self):
        address = non_loopback_address()
        if address is None:
            self.skipTest("this machine has no non-loopback IPv4 address")
        m = Mocker()
        gw = Gateway("--host", "0.0.0.0", config={"workers": [worker_config(m)]})
        try:
            remote = gw.url.replace("127.0.0.1", address)
            local_url, gw.url = gw.url, remote
            status, _ = gw.request("GET", "/admin/workers")
            self.assertEqual(status, 200)  # reading stays open on a gateway without keys
            status, e = gw.post("/admin/workers", {"url": "http://127.0.0.1:1"})
            self.assertEqual((status, e["error"]["type"]), (403, "permission_error"))
            gw.url = local_url
            status, _ = gw.post("/admin/workers", {"url": "http://127.0.0.1:1"})
            self.assertEqual(status, 201)
        finally:
            gw.close()
            m.close()


class TenantLimitsAcrossReplicasTest(unittest.TestCase):
    """With NATS, a tenant's limits hold for the fleet (docs/design.md §13): what it uses at
    one replica counts at the others within one report interval (100 ms)."""

    def test_requests_per_minute_and_concurrency_hold_fleet_wide(self):
        nats = Nats()
        mocker = Mocker(speedup="1")
        config = {"workers": [worker_config(mocker)],
                  "tenants": [{"name": "team", "api_keys": ["sk-team"],
                               "limits": {"requests_per_min": 4, "max_concurrent": 1}},
                              {"name": "other", "api_keys": ["sk-other"]}]}
        a = Gateway("--block-size", str(BLOCK), "--nats", nats.url, config=config)
        b = Gateway("--block-size", str(BLOCK), "--nats", nats.url, config=config)
        team = {"Authorization": "Bearer sk-team"}

        def ask(gw, key="sk-team"):
            status, body = gw.post("/v1/completions", {"prompt": [5] * 20, "max_tokens": 2},
                                   headers={"Authorization": f"Bearer {key}"})
            return status, body

        def rejected(gw, reason):
            return gw.metric("kvgate_tenant_rejected_total", tenant="team", reason=reason)

        try:
            for gw in (a, b):
                gw.wait_metric("kvgate_cluster_peers", lambda v: v == 1, timeout=5)
            # Concurrency: the team's one request at a time is running at A.
            stream = long_stream(a, [7] * 40, headers=team)
            try:
                time.sleep(0.5)
                status, body = ask(b)
                self.assertEqual(status, 429, body)
                self.assertEqual(body["error"]["type"], "rate_limit_exceeded")
                self.assertEqual(rejected(b, "max_concurrent"), 1)
                self.assertEqual(ask(b, "sk-other")[0], 200)  # another tenant is served
            finally:
                stream.close()
            wait_until(lambda: ask(b)[0] == 200, 5, "B serves the team once A's request ended")
            time.sleep(0.5)  # and A hears that B's request ended
            # Requests per minute: 2 used so far (one at each); 2 more at A make 4.
            for _ in range(2):
                self.assertEqual(ask(a)[0], 200)
            time.sleep(0.5)
            status, body = ask(b)  # B itself served only one of the team's requests
            self.assertEqual(status, 429, body)
            self.assertEqual(rejected(b, "requests_per_min"), 1)
            self.assertEqual(ask(a)[0], 429)
        finally:
            a.close()
            b.close()
            mocker.close()
            nats.close()


class PromptsInFlightAcrossReplicasTest(unittest.TestCase):
    """A conversation's next turn that reaches another replica while the previous turn is
    still in flight finds the worker that turn went to: routed deltas carry the prompt's
    marks (docs/design.md §11), not only its load."""

    def test_a_peers_request_in_flight_counts_as_cached_where_it_went(self):
        nats = Nats()
        mockers = [Mocker() for _ in range(3)]
        config = {"workers": [worker_config(m) for m in mockers]}
        gateways = [Gateway("--block-size", str(BLOCK), "--nats", nats.url, config=config)
                    for _ in range(2)]
        try:
            for gw in gateways:
                gw.wait_metric("kvgate_cluster_peers", lambda v: v == 1, timeout=5)
            turn = [3000 + i for i in range(12 * BLOCK)]  # 12 blocks
            next_turn = turn + [7] * (4 * BLOCK)
            stream = long_stream(gateways[0], turn)
            _, text = gateways[0].request("GET", "/admin/workers")
            holder = [w["id"] for w in json.loads(text)["workers"]
                      if w["active_requests"]["local"] == 1]
            self.assertEqual(len(holder), 1)

            def in_flight_on_b():
                status, e = gateways[1].post("/admin/route/explain",
                                             {"prompt": next_turn, "max_tokens": 1})
                self.assertEqual(status, 200, e)
                return {c["worker"]: c["in_flight_blocks"] for c in e["candidates"]}
            seen = wait_until(lambda: any(in_flight_on_b().values()) and in_flight_on_b(),
                              timeout=5, what="the peer's prompt in flight")
            self.assertEqual(seen, {w: 12 if w == holder[0] else 0
                                    for w in gateways[1].worker_ids.values()})
            stream.close()  # it ends: the credit goes with it
            wait_until(lambda: not any(in_flight_on_b().values()), timeout=5,
                       what="the peer's request to end")
        finally:
            for gw in gateways:
                gw.close()
            for m in mockers:
                m.close()
            nats.close()


class HerdingTest(unittest.TestCase):
    """A burst of long requests sharing a cached prefix, spread over gateways: with load
    shared over NATS, replicas place it as one gateway does (the cost function spills the
    hot worker once its load outweighs its cache); replicas that do not share load each
    believe the hot worker idle and pile onto it."""

    BURST = 9
    SHARED = [11] * (30 * BLOCK)  # 30 blocks every request of the burst starts with

    def place_burst(self, gateways, mockers):
        """Warms the shared prefix on mockers[0], sends the burst round-robin over
        `gateways` (each request once the previous one is routed), and returns how many
        requests each mocker holds: hot worker first, then the others in descending order."""
        status, _ = mockers[0].post("/v1/completions", {"prompt": self.SHARED, "max_tokens": 1})
        self.assertEqual(status, 200)
        for gw in gateways:
            gw.wait_metric("kvgate_index_size", lambda v: v >= 30, what="blocks")
        streams = []
        try:
            for i in range(self.BURST):
                prompt = self.SHARED + [2000 + i] * (30 * BLOCK)  # 30 blocks of its own
                streams.append(long_stream(gateways[i % len(gateways)], prompt, max_tokens=4000))
                time.sleep(0.3)  # its blocks and (with NATS) its load reach every gateway
            counts = []
            for m in mockers:
                counts.append(sum(gw.metric("kvgate_worker_active_requests",
                                            worker=gw.worker_id(m), source="local")
                                  for gw in gateways))
            return [counts[0]] + sorted(counts[1:], reverse=True)
        finally:
            for s in streams:
                s.close()

    def run_scenario(self, replicas, sync):
        nats = Nats() if sync else None
        mockers = [Mocker(speedup="1") for _ in range(3)]
        args = ["--block-size", str(BLOCK)] + (["--nats", nats.url] if sync else [])
        # By default nine decoding requests weigh less than the hot worker's 30 cached blocks
        # (their prefill and reuse bonus: it would take them all); each request weighs more
        # here so that the burst spills.
        config = {"workers": [worker_config(m) for m in mockers],
                  "routing": {"request_weight": 80}}
        gateways = [Gateway(*args, config=config) for _ in range(replicas)]
        try:
            if sync:
                for gw in gateways:
                    gw.wait_metric("kvgate_cluster_peers", lambda v: v == replicas - 1, timeout=5)
            return self.place_burst(gateways, mockers)
        finally:
            for gw in gateways:
                gw.close()
            for m in mockers:
                m.close()
            if nats:
                nats.close()

    def test_a_hot_prefix_spills_as_the_cost_function_says_with_one_or_many_replicas(self):
        one = self.run_scenario(1, sync=False)
        synced = self.run_scenario(3, sync=True)
        unsynced = self.run_scenario(3, sync=False)
        self.assertEqual(sum(one), self.BURST)
        self.assertLess(one[0], self.BURST)  # one gateway spills the hot worker ...
        self.assertEqual(synced, one)        # ... and so do synced replicas, the same way
        self.assertGreater(unsynced[0], synced[0])  # unsynced ones herd onto it
        print(f"\nburst of {self.BURST} on (hot, others): one gateway {one}, "
              f"3 replicas synced {synced}, 3 replicas unsynced {unsynced}", file=sys.stderr)


if __name__ == "__main__":
    main()
