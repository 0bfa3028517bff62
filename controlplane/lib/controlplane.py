#!/usr/bin/env python3
"""Build, start and stop a real local Kubernetes control plane on loopback.

kube-apiserver, etcd and kube-state-metrics are compiled from the Go module
proxy (see the wrapper modules next to this directory), cached per pinned
version outside the repository, and started with TLS, static-token
authentication and RBAC. Only the Python standard library and the `openssl`
and `go` commands are used.

Subcommands (the shell wrappers `controlplane/up`, `down`, `build` and `ksm`
call these; the Rust testkit calls `start` and `stop` to restart one
component):

  build                         build the binaries if the cache lacks them
  up --dir DIR [--agents N] [--no-rbac]
                                (--no-rbac: RBAC stays on, but agents get
                                no Role or RoleBinding, so no rights at all)
  down --dir DIR                (also stops kube-state-metrics)
  start --dir DIR COMPONENT     start etcd or kube-apiserver again
  stop --dir DIR COMPONENT      stop one component
  ksm up --dir DIR              run kube-state-metrics against the plane in
                                DIR as a list/watch-only identity
  ksm down --dir DIR            stop it (nothing to do if it is not running)
"""

from __future__ import annotations

import argparse
import base64
import fcntl
import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KUBERNETES_VERSION = "v1.36.3"
ETCD_VERSION = "v3.6.16"
COMPONENTS = ("etcd", "kube-apiserver")
NAMESPACE = "leasehold"
ROLE = "leasehold-lease"
READY_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 20.0

KSM_VERSION = "v2.20.0"
KSM_CLIENT_GO_VERSION = "v0.36.3"
KSM = "kube-state-metrics"
KSM_ROLE = "leasehold-kube-state-metrics"
# What kube-state-metrics exports (its --resources names), with the API group
# of each: its ClusterRole grants list and watch on exactly these.
KSM_RESOURCES = {
    "namespaces": "",
    "nodes": "",
    "pods": "",
    "services": "",
    "persistentvolumes": "",
    "persistentvolumeclaims": "",
    "resourcequotas": "",
    "deployments": "apps",
    "daemonsets": "apps",
    "statefulsets": "apps",
    "replicasets": "apps",
    "jobs": "batch",
    "cronjobs": "batch",
    "storageclasses": "storage.k8s.io",
    "leases": "coordination.k8s.io",
}
KSM_STOP_TIMEOUT_S = 10.0


class Failure(Exception):
    """A step failed; the message says which and what to look at."""


def log(msg: str) -> None:
    print(f"controlplane: {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- building


def module_dirs() -> dict[str, Path]:
    return {"kube-apiserver": ROOT / "kube-apiserver", "etcd": ROOT / "etcd"}


def wrapper_hash(dirs: dict[str, Path]) -> str:
    h = hashlib.sha256()
    for name, d in sorted(dirs.items()):
        for f in ("go.mod", "go.sum", "main.go"):
            p = d / f
            h.update(f"{name}/{f}\0".encode())
            if p.exists():
                h.update(p.read_bytes())
    return h.hexdigest()[:12]


def build_key() -> str:
    """A cache key that changes whenever a pinned version or wrapper changes."""
    return f"k8s-{KUBERNETES_VERSION}_etcd-{ETCD_VERSION}_{wrapper_hash(module_dirs())}"


def ksm_build_key() -> str:
    """kube-state-metrics has a key (and directory) of its own, so pinning a
    new version of it does not rebuild kube-apiserver and etcd."""
    return f"ksm-{KSM_VERSION}_{wrapper_hash({KSM: ROOT / KSM})}"


def cache_base() -> Path:
    """The per-user cache every build of this project shares; each kind
    of build keeps its own directory under it."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "leasehold"


def cache_root() -> Path:
    return cache_base() / "controlplane"


def cache_dir() -> Path:
    return cache_root() / build_key()


def ksm_binary() -> Path:
    return cache_root() / ksm_build_key() / KSM


def binaries() -> dict[str, Path]:
    d = cache_dir()
    return {c: d / c for c in COMPONENTS}


def ldflags() -> str:
    major, minor = KUBERNETES_VERSION.lstrip("v").split(".")[:2]
    flags = ["-s", "-w"]
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {pkg}.gitVersion={KUBERNETES_VERSION}",
            f"-X {pkg}.gitMajor={major}",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
            f"-X {pkg}.buildDate=1970-01-01T00:00:00Z",
        ]
    return " ".join(flags)


def check_go(building: str) -> None:
    """Fails unless a Go of at least 1.26 is on PATH; `building` names
    what was about to be built, for the message."""
    if shutil.which("go") is None:
        raise Failure(f"the `go` command is not on PATH; building {building} needs Go 1.26 or newer: "
                      "install it and retry")
    out = subprocess.run(["go", "env", "GOVERSION"], capture_output=True, text=True)
    ver = out.stdout.strip().removeprefix("go")
    parts = [int(p) for p in ver.split(".")[:2] if p.isdigit()]
    if len(parts) < 2 or tuple(parts) < (1, 26):
        raise Failure(f"Go {ver or '?'} is too old: building {building} needs Go 1.26 or newer; "
                      "install it and retry")


def build() -> dict[str, Path]:
    """Builds missing control plane binaries into the versioned cache, once
    per machine."""
    bins = binaries()
    if all(p.exists() for p in bins.values()):
        return bins
    check_go(f"kube-apiserver {KUBERNETES_VERSION} and etcd {ETCD_VERSION}")
    out_dir = cache_dir()
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir.parent / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for comp, src in module_dirs().items():
            dest = bins[comp]
            if dest.exists():
                continue
            log(f"building {comp} ({KUBERNETES_VERSION if comp != 'etcd' else ETCD_VERSION}) into {out_dir}; the first build takes several minutes")
            tmp = dest.with_name(dest.name + ".tmp")
            cmd = ["go", "build", "-trimpath", "-buildvcs=false", "-o", str(tmp)]
            if comp == "kube-apiserver":
                cmd += ["-ldflags", ldflags()]
            else:
                cmd += ["-ldflags", "-s -w"]
            cmd.append(".")
            started = time.monotonic()
            res = subprocess.run(cmd, cwd=src, env={**os.environ, "CGO_ENABLED": "0"})
            if res.returncode != 0:
                raise Failure(f"building {comp} failed (go build in {src} exited {res.returncode})")
            tmp.rename(dest)
            log(f"built {comp} in {time.monotonic() - started:.0f} s")
    return bins


def build_ksm() -> Path:
    """Builds kube-state-metrics into its versioned cache, once per machine."""
    dest = ksm_binary()
    if dest.exists():
        return dest
    check_go(f"{KSM} {KSM_VERSION}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    # The lock of the other builds: one Go build at a time per machine.
    with open(cache_root() / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if dest.exists():
            return dest
        log(f"building {KSM} ({KSM_VERSION}) into {dest.parent}; the first build takes a few minutes")
        tmp = dest.with_name(dest.name + ".tmp")
        flags = " ".join([
            "-s", "-w",
            f"-X github.com/prometheus/common/version.Version={KSM_VERSION}",
            "-X github.com/prometheus/common/version.BuildDate=1970-01-01T00:00:00Z",
            f"-X k8s.io/kube-state-metrics/v2/pkg/app.ClientGoVersion={KSM_CLIENT_GO_VERSION}",
        ])
        # The wrapper module names kube-state-metrics in a `tool` line, so its
        # main package builds at the versions go.mod and go.sum pin.
        cmd = ["go", "build", "-trimpath", "-buildvcs=false", "-o", str(tmp), "-ldflags", flags,
               "k8s.io/kube-state-metrics/v2"]
        started = time.monotonic()
        res = subprocess.run(cmd, cwd=ROOT / KSM, env={**os.environ, "CGO_ENABLED": "0"})
        if res.returncode != 0:
            raise Failure(f"building {KSM} failed (go build in {ROOT / KSM} exited {res.returncode})")
        tmp.rename(dest)
        log(f"built {KSM} in {time.monotonic() - started:.0f} s")
    return dest


# ---------------------------------------------------------------- state


class Plane:
    """What `up` recorded under DIR; every other subcommand reads it back."""

    def __init__(self, dir_: Path):
        self.dir = dir_.resolve()

    @property
    def state_file(self) -> Path:
        return self.dir / "state.json"

    def load(self) -> dict:
        try:
            return json.loads(self.state_file.read_text())
        except FileNotFoundError:
            raise Failure(f"{self.state_file} not found: was `controlplane/up --dir {self.dir}` run?")

    def save(self, state: dict) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        write_private(tmp, json.dumps(state, indent=2) + "\n")
        tmp.rename(self.state_file)

    def read_pids(self) -> dict[str, int]:
        pids = {}
        p = self.dir / "pids"
        if p.exists():
            for line in p.read_text().splitlines():
                parts = line.split()
                if len(parts) == 2 and parts[1].isdigit():
                    pids[parts[0]] = int(parts[1])
        return pids

    def write_pids(self, pids: dict[str, int]) -> None:
        tmp = self.dir / "pids.tmp"
        tmp.write_text("".join(f"{c} {pids[c]}\n" for c in COMPONENTS if c in pids))
        tmp.rename(self.dir / "pids")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def openssl(*args: str, cwd: Path) -> None:
    res = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    if res.returncode != 0:
        raise Failure(f"openssl {' '.join(args[:2])} failed: {res.stderr.strip()}")


def make_pki(pki: Path) -> None:
    """A fresh CA, serving certificate and service-account key pair per start."""
    if shutil.which("openssl") is None:
        raise Failure("the `openssl` command is not on PATH; install the openssl package")
    pki.mkdir(parents=True, exist_ok=True)
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30", "-keyout", "ca.key",
            "-out", "ca.crt", "-subj", "/CN=leasehold-local-ca", cwd=pki)
    (pki / "san.ext").write_text(
        "subjectAltName=IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,"
        "DNS:kubernetes.default,DNS:kubernetes.default.svc\n"
        "extendedKeyUsage=serverAuth\nkeyUsage=digitalSignature,keyEncipherment\n"
    )
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "apiserver.key", "-out", "apiserver.csr",
            "-subj", "/CN=kube-apiserver", cwd=pki)
    openssl("x509", "-req", "-in", "apiserver.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "30", "-extfile", "san.ext", "-out", "apiserver.crt", cwd=pki)
    # The API server's client certificate for kubelets (logs, exec, port
    # forwarding): a kubelet that authenticates its callers needs one.
    (pki / "client.ext").write_text("extendedKeyUsage=clientAuth\nkeyUsage=digitalSignature,keyEncipherment\n")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "kubelet-client.key", "-out",
            "kubelet-client.csr", "-subj", "/O=system:masters/CN=kube-apiserver-kubelet-client", cwd=pki)
    openssl("x509", "-req", "-in", "kubelet-client.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "30", "-extfile", "client.ext", "-out", "kubelet-client.crt", cwd=pki)
    openssl("genrsa", "-out", "sa.key", "2048", cwd=pki)
    openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)
    for f in pki.iterdir():
        if f.suffix == ".key":
            f.chmod(0o600)


def component_args(state: dict, comp: str) -> list[str]:
    d = Path(state["dir"])
    bins = state["binaries"]
    if comp == "etcd":
        client = f"http://127.0.0.1:{state['etcd_client_port']}"
        peer = f"http://127.0.0.1:{state['etcd_peer_port']}"
        return [
            bins["etcd"], "--name", "leasehold", "--data-dir", str(d / "etcd-data"),
            "--listen-client-urls", client, "--advertise-client-urls", client,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"leasehold={peer}", "--initial-cluster-state", "new",
            "--listen-metrics-urls", "", "--unsafe-no-fsync", "--log-level", "warn",
        ]
    pki = d / "pki"
    # An audit log as kubeadm clusters are often set up (Metadata level),
    # for the agent's audit-log stream to read (DIR/audit/).
    (d / "audit").mkdir(exist_ok=True)
    policy = d / "audit-policy.yaml"
    if not policy.exists():
        policy.write_text(
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\n"
            "rules:\n  - level: Metadata\n"
        )
    return [
        bins["kube-apiserver"],
        f"--audit-policy-file={policy}",
        f"--audit-log-path={d / 'audit' / 'kube-apiserver-audit.log'}",
        "--audit-log-maxsize=50", "--audit-log-maxbackup=1",
        "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
        f"--secure-port={state['apiserver_port']}",
        f"--etcd-servers=http://127.0.0.1:{state['etcd_client_port']}",
        f"--tls-cert-file={pki / 'apiserver.crt'}", f"--tls-private-key-file={pki / 'apiserver.key'}",
        f"--client-ca-file={pki / 'ca.crt'}",
        f"--kubelet-client-certificate={pki / 'kubelet-client.crt'}",
        f"--kubelet-client-key={pki / 'kubelet-client.key'}",
        f"--token-auth-file={d / 'tokens.csv'}",
        f"--service-account-key-file={pki / 'sa.pub'}",
        f"--service-account-signing-key-file={pki / 'sa.key'}",
        "--service-account-issuer=https://kubernetes.default.svc",
        "--service-cluster-ip-range=10.0.0.0/24",
        "--authorization-mode=RBAC",
        "--anonymous-auth=false",
        "--allow-privileged=false",
        "--profiling=false",
        "--v=1",
    ]


def start_component(plane: Plane, state: dict, comp: str) -> int:
    d = plane.dir
    log_file = open(d / f"{comp}.log", "ab")
    proc = subprocess.Popen(
        component_args(state, comp), stdin=subprocess.DEVNULL, stdout=log_file, stderr=log_file,
        start_new_session=True, cwd=d,
    )
    log_file.close()
    pids = plane.read_pids()
    pids[comp] = proc.pid
    plane.write_pids(pids)
    wait_ready(plane, state, comp, proc)
    return proc.pid


def tls_context(state: dict) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(Path(state["dir"]) / "pki" / "ca.crt"))


def probe(state: dict, comp: str) -> bool:
    try:
        if comp == "etcd":
            url = f"http://127.0.0.1:{state['etcd_client_port']}/health"
            with urllib.request.urlopen(url, timeout=2) as r:
                return json.loads(r.read()).get("health") == "true"
        req = urllib.request.Request(
            f"https://127.0.0.1:{state['apiserver_port']}/readyz",
            headers={"Authorization": f"Bearer {state['tokens']['admin']}"},
        )
        with urllib.request.urlopen(req, timeout=2, context=tls_context(state)) as r:
            return r.status == 200
    except (OSError, ValueError, urllib.error.URLError):
        return False


def wait_ready(plane: Plane, state: dict, comp: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    delay = 0.05
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = tail_of(plane.dir / f"{comp}.log")
            raise Failure(f"{comp} exited with code {proc.returncode} while starting; last log lines:\n{tail}")
        if probe(state, comp):
            return
        time.sleep(delay)
        delay = min(delay * 1.5, 0.5)
    raise Failure(f"{comp} was not ready within {READY_TIMEOUT_S:.0f} s; see {plane.dir / (comp + '.log')}")


def tail_of(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours is as good as gone.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def stop_pid(pid: int, comp: str, timeout_s: float = STOP_TIMEOUT_S) -> None:
    """SIGTERM (after SIGCONT, for a paused process), then SIGKILL after
    `timeout_s`; returns once the process is gone (bounded)."""
    if not alive(pid):
        return
    # A paused process cannot act on SIGTERM; let it run so it can exit.
    for sig in (signal.SIGCONT, signal.SIGTERM):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and alive(pid):
        time.sleep(0.05)
    if alive(pid):
        log(f"{comp} (pid {pid}) ignored SIGTERM for {timeout_s:.0f} s; sending SIGKILL")
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and alive(pid):
            time.sleep(0.05)
        if alive(pid):
            raise Failure(f"{comp} (pid {pid}) survived SIGKILL for {timeout_s:.0f} s")


def stop_component(plane: Plane, comp: str) -> None:
    pids = plane.read_pids()
    pid = pids.pop(comp, None)
    if pid is not None:
        stop_pid(pid, comp)
    plane.write_pids(pids)


# ---------------------------------------------------------------- API objects


def api(state: dict, method: str, path: str, body: dict | None = None) -> dict:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        f"https://127.0.0.1:{state['apiserver_port']}{path}", data=data, method=method,
        headers={"Authorization": f"Bearer {state['tokens']['admin']}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=10, context=tls_context(state)) as r:
            return json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        if e.code == 409 and method == "POST":
            return {}
        raise Failure(f"{method} {path} failed: HTTP {e.code}: {e.read().decode(errors='replace')[:300]}")


def agent_user(k: int) -> str:
    return f"system:serviceaccount:{NAMESPACE}:agent-{k}"


def ksm_user() -> str:
    return f"system:serviceaccount:{NAMESPACE}:{KSM}"


def bootstrap(state: dict) -> None:
    """Namespace, service accounts, and (with RBAC) one binding per agent."""
    api(state, "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    for k in range(1, state["agents"] + 1):
        api(state, "POST", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts",
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": f"agent-{k}"}})
    if not state["rbac"]:
        return
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NAMESPACE}"
    api(state, "POST", f"{rbac}/roles", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": ROLE},
        "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                   "verbs": ["get", "list", "watch", "create", "update", "patch"]}],
    })
    for k in range(1, state["agents"] + 1):
        api(state, "POST", f"{rbac}/rolebindings", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": f"{ROLE}-agent-{k}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ROLE},
            "subjects": [{"kind": "ServiceAccount", "name": f"agent-{k}", "namespace": NAMESPACE}],
        })


def kubeconfig(state: dict, user: str, token: str) -> str:
    ca = (Path(state["dir"]) / "pki" / "ca.crt").read_text()
    cfg = {
        "apiVersion": "v1", "kind": "Config", "current-context": "leasehold",
        "clusters": [{"name": "leasehold", "cluster": {
            "server": f"https://127.0.0.1:{state['apiserver_port']}",
            "certificate-authority-data": base64.b64encode(ca.encode()).decode()}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "leasehold", "context": {"cluster": "leasehold", "user": user, "namespace": NAMESPACE}}],
    }
    return json.dumps(cfg, indent=2) + "\n"


def write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


# ---------------------------------------------------------------- commands


def cmd_up(args: argparse.Namespace) -> None:
    if args.agents < 0:
        raise Failure("--agents must be 0 or more")
    plane = Plane(Path(args.dir))
    plane.dir.mkdir(parents=True, exist_ok=True)
    running = {c: p for c, p in plane.read_pids().items() if alive(p)}
    if running:
        raise Failure(f"{plane.dir} already has a running control plane ({running}); run `controlplane/down --dir {plane.dir}` first")
    bins = build()
    for stale in ("etcd-data", "pki"):
        shutil.rmtree(plane.dir / stale, ignore_errors=True)
    make_pki(plane.dir / "pki")
    tokens = {"admin": secrets.token_hex(24), KSM: secrets.token_hex(24)}
    tokens.update({f"agent-{k}": secrets.token_hex(24) for k in range(1, args.agents + 1)})
    lines = [f'{tokens["admin"]},admin,admin,"system:masters"']
    for k in range(1, args.agents + 1):
        lines.append(f'{tokens[f"agent-{k}"]},{agent_user(k)},agent-{k},'
                     f'"system:serviceaccounts,system:serviceaccounts:{NAMESPACE}"')
    # The API server reads this file only at start, so the identity `ksm up`
    # may later give rights to is made now; until then it has none.
    lines.append(f'{tokens[KSM]},{ksm_user()},{KSM},'
                 f'"system:serviceaccounts,system:serviceaccounts:{NAMESPACE}"')
    write_private(plane.dir / "tokens.csv", "\n".join(lines) + "\n")
    state = {
        "dir": str(plane.dir), "agents": args.agents, "rbac": not args.no_rbac,
        "binaries": {c: str(p) for c, p in bins.items()}, "tokens": tokens,
        "etcd_client_port": free_port(), "etcd_peer_port": free_port(), "apiserver_port": free_port(),
    }
    plane.save(state)
    try:
        start_component(plane, state, "etcd")
        start_component(plane, state, "kube-apiserver")
        write_private(plane.dir / "admin.kubeconfig", kubeconfig(state, "admin", tokens["admin"]))
        for k in range(1, args.agents + 1):
            write_private(plane.dir / f"agent-{k}.kubeconfig", kubeconfig(state, agent_user(k), tokens[f"agent-{k}"]))
        bootstrap(state)
    except BaseException:
        for comp in reversed(COMPONENTS):
            stop_component(plane, comp)
        raise
    (plane.dir / "versions").write_text(
        f"kube-apiserver {KUBERNETES_VERSION}\netcd {ETCD_VERSION}\n"
    )
    print(f"control plane ready: https://127.0.0.1:{state['apiserver_port']} "
          f"(admin: {plane.dir / 'admin.kubeconfig'}, agents: {args.agents})")


def cmd_down(args: argparse.Namespace) -> None:
    plane = Plane(Path(args.dir))
    try:
        ksm_down_all(plane)
    except Failure as e:
        log(f"error: {e}")
    if not (plane.dir / "pids").exists():
        log(f"nothing to stop in {plane.dir}")
        return
    for comp in reversed(COMPONENTS):
        stop_component(plane, comp)
    (plane.dir / "pids").unlink(missing_ok=True)


def cmd_start(args: argparse.Namespace) -> None:
    plane = Plane(Path(args.dir))
    state = plane.load()
    pid = plane.read_pids().get(args.component)
    if pid is not None and alive(pid):
        raise Failure(f"{args.component} is already running (pid {pid})")
    print(start_component(plane, state, args.component))


def cmd_stop(args: argparse.Namespace) -> None:
    stop_component(Plane(Path(args.dir)), args.component)


# ---------------------------------------------------------------- kube-state-metrics


def ksm_state_file(plane: Plane, shard: int | None = None) -> Path:
    """`ksm.json`, or `ksm-shard-I.json` for shard I of a sharded run."""
    return plane.dir / ("ksm.json" if shard is None else f"ksm-shard-{shard}.json")


def ksm_state_files(plane: Plane) -> list[Path]:
    """Every kube-state-metrics recorded in DIR, sharded or not."""
    return sorted(plane.dir.glob("ksm*.json"))


def ksm_identity(state: dict) -> None:
    """A ServiceAccount whose only rights are list and watch on what
    kube-state-metrics exports (the static token of `up` authenticates as it)."""
    api(state, "POST", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": KSM}})
    groups: dict[str, list[str]] = {}
    for resource, group in KSM_RESOURCES.items():
        groups.setdefault(group, []).append(resource)
    rules = [{"apiGroups": [g], "resources": sorted(r), "verbs": ["list", "watch"]}
             for g, r in sorted(groups.items())]
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": KSM_ROLE}, "rules": rules}
    # PUT after POST: a role left from an older resource list is brought up to date.
    api(state, "POST", f"{rbac}/clusterroles", role)
    api(state, "PUT", f"{rbac}/clusterroles/{KSM_ROLE}", role)
    api(state, "POST", f"{rbac}/clusterrolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": KSM_ROLE},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": KSM_ROLE},
        "subjects": [{"kind": "ServiceAccount", "name": KSM, "namespace": NAMESPACE}],
    })


def http_get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, ""
    except (OSError, ValueError, urllib.error.URLError):
        return 0, ""


def ksm_listed(telemetry: str) -> bool:
    """Every exported resource has been listed, or (client-go's streaming
    list) watched from the start, successfully."""
    seen = set()
    for line in telemetry.splitlines():
        if not line.startswith(("kube_state_metrics_list_total{", "kube_state_metrics_watch_total{")):
            continue
        labels, _, value = line.rpartition(" ")
        if 'result="success"' in labels and value not in ("0", "0.0") and 'resource="' in labels:
            seen.add(labels.split('resource="', 1)[1].split('"', 1)[0])
    return len(seen) >= len(KSM_RESOURCES)


def ksm_alive(pid: int) -> bool:
    """The pid is a live kube-state-metrics (not a recycled pid)."""
    if not alive(pid):
        return False
    try:
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0]
    except OSError:
        return False
    return argv0.decode(errors="replace").endswith("/" + KSM)


def ksm_up(plane: Plane, shard: int | None = None, total: int | None = None,
           host: str = "127.0.0.1", port: int | None = None) -> dict:
    """Starts kube-state-metrics; with `shard`/`total`, as shard `shard` of
    `total` (its `--shard`/`--total-shards`), serving on `host`:`port`."""
    if (shard is None) != (total is None):
        raise Failure("--shard and --total-shards go together")
    if shard is not None and not 0 <= shard < total:
        raise Failure(f"--shard must be from 0 to {total - 1}, got {shard}")
    state = plane.load()
    pid = plane.read_pids().get("kube-apiserver")
    if pid is None or not alive(pid):
        raise Failure(f"no running kube-apiserver in {plane.dir}: run `controlplane/up --dir {plane.dir}` first")
    try:
        running = json.loads(ksm_state_file(plane, shard).read_text())
    except (FileNotFoundError, ValueError):
        running = None
    if running and ksm_alive(running.get("pid", 0)):
        raise Failure(f"{KSM} is already running in {plane.dir} (pid {running['pid']}); "
                      f"run `controlplane/ksm down --dir {plane.dir}` first")
    token = state["tokens"].get(KSM)
    if token is None:
        raise Failure(f"the control plane in {plane.dir} was started without a {KSM} token; "
                      "restart it with this version of `controlplane/up`")
    binary = build_ksm()
    try:
        ksm_identity(state)
    except Failure as e:
        raise Failure(f"creating the {KSM} identity failed: {e}")
    kubeconfig_path = plane.dir / f"{KSM}.kubeconfig"
    write_private(kubeconfig_path, kubeconfig(state, ksm_user(), token))
    port, telemetry_port = port or free_port(), free_port()
    log_path = plane.dir / ("ksm.log" if shard is None else f"ksm-shard-{shard}.log")
    log_file = open(log_path, "ab")
    sharding = [] if shard is None else [f"--shard={shard}", f"--total-shards={total}"]
    proc = subprocess.Popen(
        [str(binary), f"--kubeconfig={kubeconfig_path}",
         f"--host={host}", f"--port={port}",
         "--telemetry-host=127.0.0.1", f"--telemetry-port={telemetry_port}",
         f"--resources={','.join(KSM_RESOURCES)}", *sharding],
        stdin=subprocess.DEVNULL, stdout=log_file, stderr=log_file, start_new_session=True, cwd=plane.dir,
    )
    log_file.close()
    info = {"pid": proc.pid, "host": host, "port": port, "telemetry_port": telemetry_port,
            "shard": shard, "total_shards": total,
            "kubeconfig": str(kubeconfig_path), "user": ksm_user(), "version": KSM_VERSION,
            "resources": list(KSM_RESOURCES)}
    # Recorded before the wait, so that `down` finds it whatever happens next.
    write_private(ksm_state_file(plane, shard), json.dumps(info, indent=2) + "\n")
    started = time.monotonic()
    try:
        ksm_wait_ready(proc, host, port, telemetry_port, log_path)
    except BaseException:
        ksm_down(plane, shard)
        raise
    log(f"{KSM} ready in {time.monotonic() - started:.1f} s")
    return info


def ksm_wait_ready(proc: subprocess.Popen, host: str, port: int, telemetry_port: int,
                   log_path: Path) -> None:
    """Ready: its telemetry `/readyz` answers 200, every resource has been
    listed, and `/metrics` answers 200."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    delay = 0.05
    step = "waiting for /readyz"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise Failure(f"{KSM} exited with code {proc.returncode} while {step}; last log lines:\n"
                          f"{tail_of(log_path)}")
        base = f"http://127.0.0.1:{telemetry_port}"
        if http_get(f"{base}/readyz")[0] == 200:
            step = "waiting for the first list or watch of every resource"
            status, telemetry = http_get(f"{base}/metrics")
            if status == 200 and ksm_listed(telemetry):
                step = "waiting for /metrics"
                if http_get(f"http://{host}:{port}/metrics")[0] == 200:
                    return
        time.sleep(delay)
        delay = min(delay * 1.5, 0.5)
    raise Failure(f"{KSM} was not ready within {READY_TIMEOUT_S:.0f} s ({step}); last log lines:\n"
                  f"{tail_of(log_path)}")


def ksm_down(plane: Plane, shard: int | None = None) -> None:
    """Stops the kube-state-metrics of `shard` (or the unsharded one)."""
    ksm_stop_recorded(ksm_state_file(plane, shard))


def ksm_down_all(plane: Plane) -> None:
    for path in ksm_state_files(plane):
        ksm_stop_recorded(path)


def ksm_stop_recorded(path: Path) -> None:
    try:
        pid = json.loads(path.read_text())["pid"]
    except (FileNotFoundError, ValueError, KeyError):
        path.unlink(missing_ok=True)
        return
    if ksm_alive(pid):
        stop_pid(pid, KSM, KSM_STOP_TIMEOUT_S)
    path.unlink(missing_ok=True)


def cmd_ksm_up(args: argparse.Namespace) -> None:
    plane = Plane(Path(args.dir))
    info = ksm_up(plane, args.shard, args.total_shards, args.host, args.port)
    print(f"{KSM} ready: http://{info['host']}:{info['port']}/metrics "
          f"(pid {info['pid']})")


def cmd_ksm_down(args: argparse.Namespace) -> None:
    plane = Plane(Path(args.dir))
    if args.shard is None:
        ksm_down_all(plane)
    else:
        ksm_down(plane, args.shard)


def cmd_build(_args: argparse.Namespace) -> None:
    for comp, path in build().items():
        print(f"{comp} {path}")
    print(f"{KSM} {build_ksm()}")


def main() -> int:
    p = argparse.ArgumentParser(prog="controlplane", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("build").set_defaults(fn=cmd_build)
    up = sub.add_parser("up")
    up.add_argument("--dir", required=True)
    up.add_argument("--agents", type=int, default=3)
    up.add_argument("--no-rbac", action="store_true")
    up.set_defaults(fn=cmd_up)
    down = sub.add_parser("down")
    down.add_argument("--dir", required=True)
    down.set_defaults(fn=cmd_down)
    for name, fn in (("start", cmd_start), ("stop", cmd_stop)):
        s = sub.add_parser(name)
        s.add_argument("--dir", required=True)
        s.add_argument("component", choices=COMPONENTS)
        s.set_defaults(fn=fn)
    ksm = sub.add_parser("ksm", help=f"run or stop {KSM} against a running plane")
    ksm_sub = ksm.add_subparsers(dest="ksm_cmd", required=True)
    for name, fn in (("up", cmd_ksm_up), ("down", cmd_ksm_down)):
        s = ksm_sub.add_parser(name)
        s.add_argument("--dir", required=True)
        s.add_argument("--shard", type=int, help="run as this shard (0-based) of --total-shards")
        if name == "up":
            s.add_argument("--total-shards", type=int)
            s.add_argument("--host", default="127.0.0.1",
                           help="address to serve /metrics on (any of 127.0.0.0/8)")
            s.add_argument("--port", type=int, help="port to serve /metrics on (default: a free one)")
        s.set_defaults(fn=fn)
    return run_command(p.parse_args(), log)


def run_command(args: argparse.Namespace, say) -> int:
    """Runs the chosen subcommand (`args.fn`); a Failure is said through
    `say` and exits 1, Ctrl-C exits 130."""
    try:
        args.fn(args)
    except Failure as e:
        say(f"error: {e}")
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
