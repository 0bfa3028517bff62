#!/usr/bin/env python3
"""leasehold's demo: three `leasehold elect` candidates on a real local
control plane, through the failures that broke the incumbents' agents.

1. three candidates start, one leads and runs its leader-only command;
2. the leader is stopped with SIGTERM: it releases, and another leads at once;
3. an admin overwrites the Lease holder (the incumbents' bug recipe): the
   leader stops its work at once instead of shipping duplicates;
4. the leader is killed with SIGKILL: another takes over after the lease expires;
5. the stopped and killed candidates come back and are candidates again.

Run it through `./demo` at the repository root, which builds leasehold first.
"""

from __future__ import annotations

import json
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "controlplane" / "lib"))
import controlplane  # noqa: E402

LEASE = "demo-leader"
NS = controlplane.NAMESPACE
TIMINGS = ["--lease-duration", "6s", "--renew-deadline", "4s", "--retry-period", "1s"]
WAIT_S = 30.0


def say(msg: str) -> None:
    print(f"\n\033[1m== {msg}\033[0m", flush=True)


class Candidate:
    """One `leasehold elect` process whose JSON lines land in a shared queue."""

    def __init__(self, binary: Path, plane_dir: Path, k: int, events: queue.Queue):
        self.identity = f"node-{k}"
        self.k = k
        self.binary = binary
        self.plane_dir = plane_dir
        self.events = events
        self.proc: subprocess.Popen | None = None
        self.state = "unknown"

    def start(self) -> None:
        # elect writes the command's output to its stderr, beside its logs;
        # the command marks its lines so the demo can show just those.
        work = 'echo "WORK started leader-only work (term $LEASEHOLD_TERM)"; trap "exit 0" TERM; while :; do sleep 0.1; done'
        self.proc = subprocess.Popen(
            [str(self.binary), "elect", "--lease", LEASE, "--namespace", NS, "--identity", self.identity,
             "--kubeconfig", str(self.plane_dir / f"agent-{self.k}.kubeconfig"), *TIMINGS,
             "--", "sh", "-c", work],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        threading.Thread(target=self._read_reports, args=(self.proc,), daemon=True).start()
        threading.Thread(target=self._read_work, args=(self.proc,), daemon=True).start()

    def _read_reports(self, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            try:
                self.events.put((self, json.loads(line), time.monotonic()))
            except json.JSONDecodeError:
                pass

    def _read_work(self, proc: subprocess.Popen) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            if line.startswith("WORK "):
                self.events.put((self, {"work": line[5:].strip()}, time.monotonic()))

    def signal(self, sig: int) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=WAIT_S)
        self.state = "stopped"


class Demo:
    def __init__(self, binary: Path, plane_dir: Path):
        self.events: queue.Queue = queue.Queue()
        self.candidates = [Candidate(binary, plane_dir, k, self.events) for k in (1, 2, 3)]
        self.state = controlplane.Plane(plane_dir).load()

    def pump(self, until, what: str) -> tuple[Candidate, dict, float]:
        deadline = time.monotonic() + WAIT_S
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise controlplane.Failure(f"timed out waiting for {what}")
            try:
                cand, report, at = self.events.get(timeout=left)
            except queue.Empty:
                continue
            if "work" in report:
                print(f"  [{cand.identity}] $ {report['work']}")
                if until(cand, report):
                    return cand, report, at
                continue
            cand.state = report["state"]
            holder = report.get("holder")
            term = report.get("term")
            print(f"  [{cand.identity}] {report['state']:<9} holder={holder} term={term}")
            if until(cand, report):
                return cand, report, at

    def leader(self) -> Candidate | None:
        return next((c for c in self.candidates if c.state == "leading"), None)

    def wait_leader(self, exclude: Candidate | None = None) -> tuple[Candidate, float]:
        cand, _, at = self.pump(lambda c, r: r.get("state") == "leading" and c is not exclude, "a leader")
        self.pump(lambda c, r: c is cand and "work" in r, f"{cand.identity}'s leader-only work")
        return cand, at

    def replace_leader(self, leader: Candidate, sig: int) -> tuple[Candidate, float]:
        """Signals the leader; returns its successor and seconds until it led."""
        t0 = time.monotonic()
        leader.signal(sig)
        successor, at = self.wait_leader(exclude=leader)
        return successor, at - t0

    LEASE_PATH = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{LEASE}"

    def lease(self) -> dict:
        return controlplane.api(self.state, "GET", self.LEASE_PATH)

    def show_lease(self) -> None:
        spec = self.lease().get("spec", {})
        print(f"  Lease {NS}/{LEASE}: holder={spec.get('holderIdentity')!r} "
              f"transitions={spec.get('leaseTransitions')} renewTime={spec.get('renewTime')}")

    def run(self) -> None:
        say("three candidates join the election")
        for c in self.candidates:
            c.start()
        leader, _ = self.wait_leader()
        self.show_lease()

        say(f"SIGTERM to the leader {leader.identity}: it stops its work, releases, another leads")
        stopped = leader
        leader, took = self.replace_leader(stopped, signal.SIGTERM)
        print(f"  -> {leader.identity} leads {1000 * took:.0f} ms after the SIGTERM")

        say(f"an admin overwrites the holder of {LEASE} (the incumbents' duplicate-data recipe)")
        lease = self.lease()
        lease["spec"]["holderIdentity"] = "intruder"
        t0 = time.monotonic()
        controlplane.api(self.state, "PUT", self.LEASE_PATH, lease)
        old = leader
        _, _, at = self.pump(lambda c, r: c is old and r.get("state", "leading") != "leading", "the leader to step down")
        print(f"  -> {old.identity} stopped leading {1000 * (at - t0):.0f} ms after the overwrite")
        leader, at = self.wait_leader()
        print(f"  -> {leader.identity} leads once the intruder's lease expired, "
              f"{at - t0:.1f} s after the overwrite")

        say(f"SIGKILL to the leader {leader.identity}: no release, the lease must expire")
        killed = leader
        leader, took = self.replace_leader(killed, signal.SIGKILL)
        print(f"  -> {leader.identity} leads {took:.1f} s after the kill (lease duration 6 s)")

        say("the stopped and the killed candidate come back: nobody ever leaves the election")
        for c in (stopped, killed):
            c.start()
        pending = {stopped.identity, killed.identity}

        def all_reported(c: Candidate, report: dict) -> bool:
            if report.get("state") == "following" and report.get("holder"):
                pending.discard(c.identity)
            return not pending

        self.pump(all_reported, "the restarted candidates to report")
        self.show_lease()

        say("shutdown: every candidate stops its work and the leader releases")
        for c in self.candidates:
            c.signal(signal.SIGTERM)
        self.show_lease()


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: demo.py PATH-TO-LEASEHOLD", file=sys.stderr)
        return 2
    binary = Path(sys.argv[1])
    plane_dir = Path(tempfile.mkdtemp(prefix="leasehold-demo-"))
    up = subprocess.run([str(ROOT / "controlplane" / "up"), "--dir", str(plane_dir), "--agents", "3"])
    if up.returncode != 0:
        return 1
    demo = None
    try:
        demo = Demo(binary, plane_dir)
        demo.run()
        say("done")
        return 0
    except controlplane.Failure as e:
        print(f"demo: {e}", file=sys.stderr)
        return 1
    finally:
        if demo:
            for c in demo.candidates:
                if c.proc and c.proc.poll() is None:
                    c.proc.kill()
                    c.proc.wait()
        subprocess.run([str(ROOT / "controlplane" / "down"), "--dir", str(plane_dir)])
        shutil.rmtree(plane_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
