#!/usr/bin/env python3
"""leasehold's demo on a real node (`demo/run --node`): the Helm chart's
DaemonSet pod and two more agent pods of the same image (a Deployment: one
node holds one DaemonSet pod) elect one leader through the chart's Lease,
on kubelet + containerd beside a real local control plane. Each pod writes
its leader-gated kube-state-metrics data (every second) to a file on a host
directory. The demo shows who leads, then replaces the leader as an admin
would:

1. `kubectl delete pod` of the leading pod: another pod leads;
2. `kubectl drain --ignore-daemonsets`: the Deployment's pods are evicted,
   the DaemonSet's pod stays and leads;
3. `kubectl uncordon`: the Deployment's pods come back as candidates;

then checks from every pod's documents that no two pods' gated data ever
overlapped, prints the gaps, and stops everything it started (also on
Ctrl-C). Needs root and the node's Debian packages (see docs/testing.md,
"A real node"). `--ci` runs without pauses and exits 1 when a check fails.
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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "controlplane" / "lib"))
sys.path.insert(0, str(ROOT / "demo"))
import controlplane  # noqa: E402
from demo import Failed, say, terms_in_order, ts_us  # noqa: E402

NS = "leasehold-demo"
LEASE = "leasehold-leader"
GATED = "cluster-state"
MONITORING_PORT = 19691
NODE_NAME = "127.0.0.1"
AGENT_IMAGE = "ghcr.io/leasehold/leasehold:0.1.0"
WAIT_S = 90.0


def tool(name: str) -> str:
    out = subprocess.run([str(ROOT / "controlplane" / "tools"), "build", name],
                         check=True, capture_output=True, text=True).stdout
    return out.split()[-1]


class NodeDemo:
    def __init__(self, work: Path, plane: Path, ksm_host: str, ci: bool):
        self.work, self.plane, self.ksm_host, self.ci = work, plane, ksm_host, ci
        self.kubeconfig = str(plane / "admin.kubeconfig")
        self.kubectl_bin, self.helm_bin = tool("kubectl"), tool("helm")
        self.ds_data = work / "ds-data"
        self.extra_data = work / "extra-data"
        self.steps: list[str] = []

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        res = subprocess.run([self.kubectl_bin, "--kubeconfig", self.kubeconfig, *args],
                             input=stdin, capture_output=True, text=True)
        if res.returncode != 0:
            raise Failed(f"kubectl {' '.join(args)}: {res.stderr.strip()}")
        return res.stdout

    def helm(self, *args: str) -> None:
        res = subprocess.run([self.helm_bin, "--kubeconfig", self.kubeconfig, *args],
                             capture_output=True, text=True)
        if res.returncode != 0:
            raise Failed(f"helm {' '.join(args[:2])}: {res.stderr.strip()}")

    def pause(self) -> None:
        if not self.ci:
            input("  (Enter to go on) ")

    def env(self) -> list[dict]:
        port = controlplane.Plane(self.plane).load()["apiserver_port"]
        return [{"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
                {"name": "KUBERNETES_SERVICE_PORT", "value": str(port)},
                {"name": "KSM_HOST", "value": self.ksm_host},
                {"name": "OUT_DIR", "value": "/var/lib/leasehold/out/$(POD_NAME)"}]

    def install(self) -> None:
        values = {
            "image": {"pullPolicy": "Never"}, "hostNetwork": True,
            "monitoring": {"port": MONITORING_PORT}, "data": {"hostPath": str(self.ds_data)},
            "lease": {"durationSeconds": 6, "renewDeadlineSeconds": 4, "retryPeriodSeconds": 1},
            "shutdownTimeoutSeconds": 10, "extraEnv": self.env(),
            "policy": {
                "outputs": {"default": {"type": "file", "path": "${env.OUT_DIR}", "filename": "events",
                                        "hosts": None, "username": None, "password": None}},
                "inputs": [{"id": GATED, "type": "kubernetes/metrics",
                            "condition": "${kubernetes_leaderelection.leader} == true",
                            "streams": [{"metricsets": ["state_namespace"], "hosts": ["${env.KSM_HOST}"],
                                         "period": "1s"}]}],
            },
        }
        vfile = self.work / "values.json"
        vfile.write_text(json.dumps(values))
        self.helm("install", "leasehold", str(ROOT / "deploy" / "helm" / "leasehold"), "-n", NS,
                  "--create-namespace", "--values", str(vfile))
        self.extra_data.mkdir(parents=True, exist_ok=True)
        os.chmod(self.extra_data, 0o777)
        env = [{"name": n, "valueFrom": {"fieldRef": {"fieldPath": f}}}
               for n, f in (("POD_NAME", "metadata.name"), ("POD_NAMESPACE", "metadata.namespace"),
                            ("NODE_NAME", "spec.nodeName"))] + self.env()
        labels = {"app": "leasehold-candidates"}
        deployment = {
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "leasehold-candidates", "namespace": NS},
            "spec": {"replicas": 2, "selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": labels}, "spec": {
                    "serviceAccountName": "leasehold", "hostNetwork": True,
                    "terminationGracePeriodSeconds": 25,
                    "securityContext": {"runAsUser": 65532, "runAsGroup": 65532},
                    "containers": [{
                        "name": "leasehold", "image": AGENT_IMAGE, "imagePullPolicy": "Never",
                        "args": ["run", "-c", "/etc/leasehold/leasehold.yml",
                                 "--path.data", "/var/lib/leasehold/data/$(POD_NAME)"],
                        "env": env,
                        "volumeMounts": [{"name": "policy", "mountPath": "/etc/leasehold", "readOnly": True},
                                         {"name": "data", "mountPath": "/var/lib/leasehold"}]}],
                    "volumes": [{"name": "policy", "configMap": {"name": "leasehold-policy"}},
                                {"name": "data", "hostPath": {"path": str(self.extra_data),
                                                              "type": "Directory"}}]}}}}
        self.kubectl("apply", "-f", "-", stdin=json.dumps(deployment))

    def pods(self) -> list[dict]:
        items = json.loads(self.kubectl("get", "pods", "-n", NS, "-o", "json"))["items"]
        return [p for p in items if not p["metadata"].get("deletionTimestamp")]

    def ready_pods(self) -> list[str]:
        return [p["metadata"]["name"] for p in self.pods()
                if any(c["type"] == "Ready" and c["status"] == "True"
                       for c in p.get("status", {}).get("conditions", []))]

    def holder(self) -> str:
        lease = json.loads(self.kubectl("get", "lease", "-n", NS, LEASE, "-o", "json", "--ignore-not-found")
                           or "{}")
        return lease.get("spec", {}).get("holderIdentity") or ""

    def docs(self) -> list[dict]:
        out = []
        for root in (self.ds_data / "out", self.extra_data / "out"):
            for f in sorted(root.glob("*/events.ndjson*")) if root.exists() else []:
                for line in f.read_text().splitlines(keepends=True):
                    if not line.endswith("\n"):
                        continue
                    d = json.loads(line)
                    if d.get("input", {}).get("id") == GATED:
                        out.append({"agent": d["agent"]["name"], "term": d["leader"]["term"],
                                    "at": ts_us(d["@timestamp"])})
        return out

    def wait(self, what: str, check) -> object:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            got = check()
            if got:
                return got
            time.sleep(0.5)
        raise Failed(f"{what}: not within {WAIT_S:.0f} s; pods: {self.kubectl('get', 'pods', '-n', NS)}")

    def leads_and_writes(self, not_: set[str], since_us: int) -> str:
        """Waits for a holder outside `not_` that wrote gated data since."""
        def check():
            h = self.holder()
            if h and h not in not_ and any(d["agent"] == h and d["at"] > since_us for d in self.docs()):
                return h
            return None
        return self.wait("a new leader writing gated data", check)

    def show(self) -> None:
        ready = {p["metadata"]["name"]: any(c["type"] == "Ready" and c["status"] == "True"
                                             for c in p.get("status", {}).get("conditions", []))
                 for p in self.pods()}
        print("  pods: " + ", ".join(f"{n}{'' if r else ' (not Ready)'}" for n, r in sorted(ready.items())))
        print(f"  Lease {NS}/{LEASE} held by {self.holder()!r}")

    def run(self) -> None:
        say("the Helm chart's DaemonSet pod and a Deployment of two more agent pods, one Lease")
        self.install()
        self.wait("three agent pods Ready", lambda: len(self.ready_pods()) >= 3)
        leader = self.leads_and_writes(set(), 0)
        self.show()
        self.pause()

        say(f"kubectl delete pod {leader}")
        at = int(time.time() * 1e6)
        self.kubectl("delete", "pod", "-n", NS, leader, "--wait=false")
        new = self.leads_and_writes({leader}, at)
        self.steps.append(f"pod deleted: {leader} -> {new}")
        self.show()
        self.pause()

        say(f"kubectl drain {NODE_NAME} --ignore-daemonsets: the Deployment's pods go, the DaemonSet's stays")
        self.kubectl("drain", NODE_NAME, "--ignore-daemonsets", "--timeout=120s")
        # The drain returns once the evicted pods are gone: from now on only
        # the DaemonSet's pod may lead.
        at = int(time.time() * 1e6)
        ds = [p["metadata"]["name"] for p in self.pods()
              if p["metadata"].get("labels", {}).get("app.kubernetes.io/name") == "leasehold"]
        if len(ds) != 1:
            raise Failed(f"one DaemonSet pod after the drain, not {ds}")
        others = {p["metadata"]["name"] for p in self.pods()} - set(ds) | {new}
        after = self.leads_and_writes(others - set(ds), at)
        if after != ds[0]:
            raise Failed(f"{after} leads after the drain, not the DaemonSet's pod {ds[0]}")
        self.steps.append(f"drain: {new} -> {after}" if after != new else f"drain: {after} kept leading")
        self.show()
        self.pause()

        say(f"kubectl uncordon {NODE_NAME}: the Deployment's pods come back as candidates")
        self.kubectl("uncordon", NODE_NAME)
        self.wait("three agent pods Ready again", lambda: len(self.ready_pods()) >= 3)
        self.leads_and_writes(set(), int(time.time() * 1e6))
        self.show()

        say("from the documents")
        for s in self.steps:
            print(f"  {s}")
        print(f"  {self.check_overlap()}")

    def check_overlap(self) -> str:
        docs = self.docs()
        terms, gaps = terms_in_order(docs)
        return (f"{terms} leadership terms over {len({d['agent'] for d in docs})} pods, none overlapping "
                "(gaps: " + ", ".join(f"{g:.1f} s" for g in gaps) + ")")


def main() -> int:
    ap = argparse.ArgumentParser(description="leasehold demo on a real node")
    ap.add_argument("binary")
    ap.add_argument("--ci", action="store_true", help="no pauses; exit 1 when a check fails")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    work = Path(tempfile.mkdtemp(prefix="leasehold-node-demo-"))
    plane_dir, node_dir = work / "plane", work / "node"
    started: list[list[str]] = []
    keep = False
    cp = ROOT / "controlplane"
    try:
        subprocess.run([str(cp / "node"), "build"], check=True, stdout=subprocess.DEVNULL)
        if subprocess.run([str(cp / "up"), "--dir", str(plane_dir)]).returncode != 0:
            return 1
        started.append([str(cp / "down"), "--dir", str(plane_dir)])
        subprocess.run([str(cp / "ksm"), "up", "--dir", str(plane_dir)], check=True)
        started.append([str(cp / "ksm"), "down", "--dir", str(plane_dir)])
        info = json.loads(controlplane.ksm_state_file(controlplane.Plane(plane_dir)).read_text())
        subprocess.run([str(cp / "node"), "images", "--work", str(node_dir), "--leasehold", args.binary],
                       check=True)
        started.append([str(cp / "node"), "down", "--work", str(node_dir)])
        subprocess.run([str(cp / "node"), "up", "--plane", str(plane_dir), "--work", str(node_dir)], check=True)
        NodeDemo(work, plane_dir, f"127.0.0.1:{info['port']}", args.ci).run()
        say("done")
        return 0
    except (Failed, controlplane.Failure, subprocess.CalledProcessError) as e:
        print(f"\ndemo: FAILED: {e} (node logs: {node_dir}/logs)", file=sys.stderr)
        keep = True
        return 1
    except KeyboardInterrupt:
        print("\ndemo: interrupted; cleaning up", file=sys.stderr)
        return 130
    finally:
        for cmd in reversed(started):
            subprocess.run(cmd)
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
