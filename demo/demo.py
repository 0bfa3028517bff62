#!/usr/bin/env python3
"""leasehold's demo: three agents of one DaemonSet policy (`leasehold run`)
on a real local control plane with a real kube-state-metrics, each writing
to its own `file` output. The cluster-wide input (kube-state-metrics,
leader-gated) must run on exactly one agent at a time; every agent runs its
node-local input. The demo shows who leads, gated documents per agent per
second and the terms, then breaks the leader four ways and shows each
handover from the documents themselves:

1. SIGTERM to the leader: it stops, releases the Lease, another leads at once;
2. SIGKILL to the next one: no release, another leads once the Lease expires;
3. an admin overwrites the Lease holder: the leader stops at once;
4. the leader's RBAC is revoked: it cannot renew and steps down in time;

a stopped agent starts again right after each handover (nobody ever leaves
the election); then the demo restores the RBAC, checks from every output that no two agents'
gated documents ever overlapped, and stops everything it started (also on
Ctrl-C). `--ci` runs without pauses and exits 1 when a handover did not
happen or gated data overlapped.

Run it through `demo/run`, which builds leasehold and the control plane first.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "controlplane" / "lib"))
import controlplane  # noqa: E402

NS = controlplane.NAMESPACE
LEASE = "demo-leader"
LEASE_S, RENEW_S, RETRY_S = 6, 4, 1
WAIT_S = 40.0
GATED, LOCAL = "cluster-state", "node-metrics"
LEASE_PATH = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{LEASE}"
BINDINGS = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/rolebindings"

POLICY = f"""agent:
  shutdown_timeout: 10s
providers:
  kubernetes_leaderelection:
    leader_lease: {LEASE}
    namespace: ${{env.POD_NAMESPACE}}
    identity: ${{env.POD_NAME}}
    leader_leaseduration: {LEASE_S}
    leader_renewdeadline: {RENEW_S}
    leader_retryperiod: {RETRY_S}
outputs:
  default:
    type: file
    path: ${{env.OUT_DIR}}
    filename: events
inputs:
  - id: {GATED}
    type: kubernetes/metrics
    condition: ${{kubernetes_leaderelection.leader}} == true
    streams:
      - metricsets: [state_namespace]
        hosts: ['${{env.KSM_HOST}}']
        period: 1s
  - id: {LOCAL}
    type: system/metrics
    metricsets: [uptime]
    period: 1s
"""


class Failed(Exception):
    """A check of the demo failed."""


def say(msg: str) -> None:
    print(f"\n\033[1m== {msg}\033[0m", flush=True)


def ts_us(s: str) -> int:
    """RFC 3339 with microseconds (as the agent writes it) to µs."""
    t = datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
    return int(t.timestamp()) * 1_000_000 + t.microsecond


def terms_in_order(docs: list[dict]) -> tuple[int, list[float]]:
    """The (agent, term)s of gated documents (`agent`, `term`, `at` in µs)
    in time order: how many, and the gaps between them in seconds. Raises
    Failed when two of them interleave."""
    spans: dict[tuple[str, int], list[int]] = {}
    for d in docs:
        s = spans.setdefault((d["agent"], d["term"]), [d["at"], d["at"]])
        s[0], s[1] = min(s[0], d["at"]), max(s[1], d["at"])
    ordered = sorted(spans.items(), key=lambda kv: kv[1][0])
    gaps = []
    for (prev_key, prev), (key, cur) in zip(ordered, ordered[1:]):
        if cur[0] <= prev[1]:
            raise Failed(f"gated documents overlapped: {key} started at {cur[0]} before {prev_key} ended at {prev[1]}")
        gaps.append((cur[0] - prev[1]) / 1e6)
    return len(ordered), gaps


class Agent:
    """One `leasehold run` process and what its file output holds."""

    def __init__(self, binary: Path, work: Path, plane_dir: Path, k: int, ksm_host: str):
        self.name = f"node-{k}"
        self.k = k
        self.binary, self.work, self.plane_dir, self.ksm_host = binary, work, plane_dir, ksm_host
        self.out = work / self.name / "out"
        self.proc: subprocess.Popen | None = None
        self.offset = 0
        self.docs: list[dict] = []

    def start(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        log = open(self.work / self.name / "agent.log", "ab")
        env = dict(os.environ, POD_NAME=self.name, POD_NAMESPACE=NS, OUT_DIR=str(self.out),
                   KSM_HOST=self.ksm_host)
        self.proc = subprocess.Popen(
            [str(self.binary), "run", "-c", str(self.work / "policy.yml"),
             "--kubeconfig", str(self.plane_dir / f"agent-{self.k}.kubeconfig"),
             "--path.data", str(self.work / self.name / "data"), "--log-level", "info"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log, env=env,
        )
        log.close()

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.running():
            self.proc.send_signal(sig)
            self.proc.wait(timeout=WAIT_S)

    def read(self) -> list[dict]:
        """New complete documents since the last call."""
        path = self.out / "events.ndjson"
        try:
            with open(path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except FileNotFoundError:
            return []
        end = chunk.rfind(b"\n") + 1
        self.offset += end
        new = []
        for line in chunk[:end].splitlines():
            try:
                d = json.loads(line)
            except ValueError:
                continue
            new.append({"input": d.get("input", {}).get("id"), "at": ts_us(d["@timestamp"]),
                        "term": (d.get("leader") or {}).get("term"), "agent": self.name})
        self.docs.extend(new)
        return new


class Demo:
    def __init__(self, binary: Path, plane_dir: Path, work: Path, ksm_host: str, ci: bool):
        self.state = controlplane.Plane(plane_dir).load()
        self.agents = [Agent(binary, work, plane_dir, k, ksm_host) for k in (1, 2, 3)]
        self.ci = ci
        self.handovers: list[str] = []
        self.revoked = ""

    # ------------------------------------------------------------ view
    def lease(self) -> dict:
        try:
            return controlplane.api(self.state, "GET", LEASE_PATH).get("spec", {})
        except controlplane.Failure:
            return {}

    def tick(self) -> list[dict]:
        """Reads every output; prints one line of the live view."""
        new = [d for a in self.agents for d in a.read()]
        spec = self.lease()
        gated = {a.name: sum(1 for d in new if d["agent"] == a.name and d["input"] == GATED) for a in self.agents}
        local = {a.name: sum(1 for d in new if d["agent"] == a.name and d["input"] == LOCAL) for a in self.agents}
        terms = sorted({d["term"] for d in new if d["input"] == GATED})
        print(f"  {time.strftime('%H:%M:%S')}  Lease holder {spec.get('holderIdentity') or '-':<9} "
              f"transitions {spec.get('leaseTransitions', '-')!s:<3} | gated docs/s "
              + " ".join(f"{n}={gated[n]:<2}" for n in gated)
              + f" term {','.join(map(str, terms)) or '-':<4} | node-local docs/s "
              + " ".join(f"{local[n]}" for n in local), flush=True)
        return new

    def watch(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.tick()
            time.sleep(1)

    def pause(self) -> None:
        if not self.ci and sys.stdin.isatty():
            input("  (Enter for the next step, Ctrl-C to stop) ")

    # ------------------------------------------------------- handovers
    def gated_by(self) -> tuple[str, int] | None:
        """The (agent, term) of the newest gated document."""
        docs = [d for a in self.agents for d in a.docs if d["input"] == GATED]
        if not docs:
            return None
        d = max(docs, key=lambda d: d["at"])
        return d["agent"], d["term"]

    def wait_new_gated(self, not_from: set[tuple[str, int]], what: str) -> dict:
        """Waits for the first gated document of an (agent, term) not yet seen."""
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            for d in self.tick():
                if d["input"] == GATED and (d["agent"], d["term"]) not in not_from:
                    return d
            time.sleep(1)
        raise Failed(f"no agent took over the gated input after {what} within {WAIT_S:.0f} s")

    def seen_terms(self) -> set[tuple[str, int]]:
        return {(d["agent"], d["term"]) for a in self.agents for d in a.docs if d["input"] == GATED}

    def break_leader(self, what: str, action) -> None:
        leader, term = self.gated_by() or ("", 0)
        say(f"{what} ({leader}, term {term})")
        seen = self.seen_terms()
        t0 = time.time()
        action(leader)
        first = self.wait_new_gated(seen, what)
        # Whoever was stopped stands for election again at once.
        for a in self.agents:
            if not a.running():
                a.start()
        old_last = max(d["at"] for a in self.agents for d in a.docs
                       if d["input"] == GATED and d["agent"] == leader and d["term"] == term)
        line = (f"{what}: {first['agent']} (term {first['term']}) shipped its first gated document "
                f"{(first['at'] / 1e6) - t0:+.1f} s after the action; {leader}'s last one was "
                f"{(first['at'] - old_last) / 1e6:.1f} s before that")
        print(f"  -> {line}")
        self.handovers.append(line)
        self.watch(3)
        self.pause()

    def agent(self, name: str) -> Agent:
        return next(a for a in self.agents if a.name == name)

    def overwrite_holder(self, _leader: str) -> None:
        lease = controlplane.api(self.state, "GET", LEASE_PATH)
        lease["spec"]["holderIdentity"] = "intruder"
        controlplane.api(self.state, "PUT", LEASE_PATH, lease)

    def revoke(self, leader: str) -> None:
        controlplane.api(self.state, "DELETE", f"{BINDINGS}/{controlplane.ROLE}-agent-{self.agent(leader).k}")
        self.revoked = leader

    def restore(self, name: str) -> None:
        k = self.agent(name).k
        controlplane.api(self.state, "POST", BINDINGS, {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": f"{controlplane.ROLE}-agent-{k}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": controlplane.ROLE},
            "subjects": [{"kind": "ServiceAccount", "name": f"agent-{k}", "namespace": NS}],
        })

    # ------------------------------------------------------------ check
    def check_overlap(self) -> str:
        """No two (agent, term)s' gated documents interleave, judged from
        the documents' own timestamps in every output."""
        terms, gaps = terms_in_order([d for a in self.agents for d in a.docs if d["input"] == GATED])
        local = {a.name for a in self.agents for d in a.docs if d["input"] == LOCAL}
        if len(local) != len(self.agents):
            raise Failed(f"node-local documents only from {sorted(local)}")
        return (f"{terms} leadership terms, none overlapping (gaps between terms: "
                + ", ".join(f"{g:.1f} s" for g in gaps) + "); node-local documents from every agent")

    def run(self) -> None:
        say(f"three agents of one policy; {GATED} (kube-state-metrics) is leader-gated, {LOCAL} runs everywhere")
        for a in self.agents:
            a.start()
        self.wait_new_gated(set(), "the start")
        self.watch(4)
        self.pause()
        self.break_leader("SIGTERM to the leader", lambda n: self.agent(n).signal(signal.SIGTERM))
        self.break_leader("SIGKILL to the leader", lambda n: self.agent(n).signal(signal.SIGKILL))
        self.break_leader("an admin overwrites the Lease holder", self.overwrite_holder)
        self.break_leader("the leader's RBAC on the Lease is revoked", self.revoke)
        say(f"restore: {self.revoked}'s RBAC is back; it stands for election again")
        self.restore(self.revoked)
        self.watch(5)
        say("shutdown: every agent stops; the leader releases the Lease")
        for a in self.agents:
            a.signal(signal.SIGTERM)
        for a in self.agents:
            a.read()
        spec = self.lease()
        print(f"  Lease holder after shutdown: {spec.get('holderIdentity')!r}")
        say("from the documents")
        for h in self.handovers:
            print(f"  handover: {h}")
        print(f"  {self.check_overlap()}")


def main() -> int:
    ap = argparse.ArgumentParser(description="leasehold demo")
    ap.add_argument("binary")
    ap.add_argument("--ci", action="store_true", help="no pauses; exit 1 when a check fails")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    work = Path(tempfile.mkdtemp(prefix="leasehold-demo-"))
    plane_dir = work / "plane"
    demo = None
    started_plane = False
    keep = False
    try:
        up = subprocess.run([str(ROOT / "controlplane" / "up"), "--dir", str(plane_dir), "--agents", "3"])
        if up.returncode != 0:
            return 1
        started_plane = True
        subprocess.run([str(ROOT / "controlplane" / "ksm"), "up", "--dir", str(plane_dir)], check=True)
        info = json.loads(controlplane.ksm_state_file(controlplane.Plane(plane_dir)).read_text())
        (work / "policy.yml").write_text(POLICY)
        demo = Demo(Path(args.binary), plane_dir, work, f"127.0.0.1:{info['port']}", args.ci)
        demo.run()
        say("done")
        return 0
    except (Failed, controlplane.Failure) as e:
        print(f"\ndemo: FAILED: {e} (agent logs: {work}/node-*/agent.log)", file=sys.stderr)
        keep = True
        return 1
    except KeyboardInterrupt:
        print("\ndemo: interrupted; cleaning up", file=sys.stderr)
        return 130
    finally:
        if demo:
            for a in demo.agents:
                if a.running():
                    a.proc.kill()
                    a.proc.wait()
        if started_plane:
            subprocess.run([str(ROOT / "controlplane" / "ksm"), "down", "--dir", str(plane_dir)])
            subprocess.run([str(ROOT / "controlplane" / "down"), "--dir", str(plane_dir)])
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
