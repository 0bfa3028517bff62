#!/usr/bin/env python3
"""A real single Kubernetes node beside a plane of `controlplane/up`:
containerd + runc + the CNI bridge from Debian packages; kubelet,
kube-scheduler and kube-controller-manager built from the same
k8s.io/kubernetes release as the plane's kube-apiserver (cached per version
like the rest of controlplane/); images assembled locally (no registry).

  controlplane/node build                       the three binaries, once per machine
  controlplane/node images --work W [--leasehold BIN] [--leasehold-image NAME]
                                                pause, busybox, kube-state-metrics (and
                                                the agent) archives
  controlplane/node up --plane D --work W       the node, Ready, images imported
  controlplane/node tag --work W SOURCE TARGET  another name for an imported image
  controlplane/node down --work W               everything stopped by pid, host undone

Needs (Debian): containerd runc containernetworking-plugins busybox-static
gcc openssl util-linux iproute2; root. One node per machine: it uses fixed
ports (19640-19659), the bridge `lh0` and the `/kubepods` cgroups.

containerd runs in a mount namespace of its own that is shared inside
(`unshare --mount --propagation shared`) and kubelet joins it, so every
mount they make (container root file systems, volumes, network namespaces)
disappears with them, and HostToContainer propagation works although the
host's `/` is a private mount.
"""

from __future__ import annotations

import argparse
import base64
import fcntl
import hashlib
import json
import os
import shutil
import ssl
import string
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ociimage  # noqa: E402
from controlplane import (  # noqa: E402
    KSM_VERSION,
    KUBERNETES_VERSION,
    ROOT,
    build_ksm,
    Failure,
    alive,
    cache_base,
    check_go,
    ldflags,
    openssl,
    run_command,
    stop_pid,
    tail_of,
)

BINARIES_SRC = ROOT / "node-binaries"
FILES = ROOT / "node-files"
BINARIES = ("kubelet", "kube-scheduler", "kube-controller-manager")
PORTS = {"containerd-stream": 19640, "kubelet-healthz": 19648, "kubelet": 19650,
         "kube-controller-manager": 19657, "kube-scheduler": 19659}
BRIDGE = "lh0"
POD_SUBNET = "10.244.0.0/24"
SANDBOX_IMAGE = "leasehold.local/pause:1"
BUSYBOX_IMAGE = "leasehold.local/busybox:1"
AGENT_IMAGE = "ghcr.io/leasehold/leasehold:0.1.0"
KSM_IMAGE = f"leasehold.local/kube-state-metrics:{KSM_VERSION}"
# The node name is its address: the plane's kube-apiserver reaches the
# kubelet (logs, exec) at a node's Hostname/InternalIP, and a loopback
# --node-ip is refused.
NODE_NAME = "127.0.0.1"
# Set by kubelet at start (protectKernelDefaults: false) and by the CNI
# bridge (forwarding): `up` saves them, `down` puts them back.
SYSCTLS = ("vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
           "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes", "net/ipv4/ip_forward")
# Used whatever the roots given: removed by `down` when `up` found them absent.
HOST_DIRS = ("/var/log/pods", "/var/log/containers", "/run/containerd", "/var/lib/kubelet")
HOST_TOOLS = {"containerd": "containerd", "ctr": "containerd", "runc": "runc",
              "unshare": "util-linux", "nsenter": "util-linux", "ip": "iproute2",
              "gcc": "gcc", "openssl": "openssl"}
CNI_BIN = Path("/usr/lib/cni")
BUSYBOX = Path("/bin/busybox")


def log(msg: str) -> None:
    print(f"node: {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- build


def cache_dir() -> Path:
    """Keyed by the Kubernetes version and the wrapper module's files."""
    h = hashlib.sha256()
    for p in sorted(BINARIES_SRC.rglob("*")):
        if p.is_file() and (p.suffix == ".go" or p.name in ("go.mod", "go.sum")):
            h.update(str(p.relative_to(BINARIES_SRC)).encode() + b"\0" + p.read_bytes())
    return cache_base() / "node" / f"k8s-{KUBERNETES_VERSION}_{h.hexdigest()[:12]}"


def build() -> dict[str, Path]:
    """Builds the missing node binaries into the versioned cache."""
    out = cache_dir()
    bins = {b: out / b for b in BINARIES}
    if all(p.exists() for p in bins.values()):
        return bins
    check_go(f"kubelet, kube-scheduler and kube-controller-manager {KUBERNETES_VERSION}")
    out.mkdir(parents=True, exist_ok=True)
    # The lock of every Go build of this project: one at a time.
    lock_path = cache_base() / "controlplane" / ".build.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for name, dest in bins.items():
            if dest.exists():
                continue
            log(f"building {name} {KUBERNETES_VERSION} into {out}; the first build takes a few minutes")
            started = time.monotonic()
            tmp = dest.with_name(name + ".tmp")
            res = subprocess.run(["go", "build", "-trimpath", "-buildvcs=false", "-ldflags", ldflags(),
                                  "-o", str(tmp), f"./{name}"], cwd=BINARIES_SRC,
                                 env={**os.environ, "CGO_ENABLED": "0"})
            if res.returncode != 0:
                raise Failure(f"building {name} failed (go build in {BINARIES_SRC} exited {res.returncode})")
            tmp.rename(dest)
            log(f"built {name} in {time.monotonic() - started:.0f} s")
    return bins


def check_host() -> None:
    """Fails naming the Debian packages to install when a tool is missing."""
    missing = sorted({pkg for tool, pkg in HOST_TOOLS.items() if shutil.which(tool) is None})
    if not (CNI_BIN / "bridge").exists():
        missing.append("containernetworking-plugins")
    if not BUSYBOX.exists():
        missing.append("busybox-static")
    if missing:
        raise Failure("the node needs: apt-get install -y --no-install-recommends " + " ".join(missing))
    if os.geteuid() != 0:
        raise Failure("the node runs containerd and kubelet: run as root")


# ---------------------------------------------------------------- images


def agent_image(binary: Path, name: str, scratch: Path) -> ociimage.Image:
    """The agent as the Dockerfile ships it (entrypoint, user 65532),
    from a release binary of this machine: with the glibc libraries `ldd`
    names, CA certificates and a passwd naming the user."""
    binary = binary.resolve()
    if not binary.is_file():
        raise Failure(f"{binary} is not a file: build it with `cargo build --release --locked -p leasehold`")
    files = [(binary, "/usr/local/bin/leasehold")]
    ldd = subprocess.run(["ldd", str(binary)], capture_output=True, text=True)
    for line in ldd.stdout.splitlines():
        parts = line.split()
        path = parts[2] if "=>" in parts and len(parts) > 2 else (parts[0] if parts else "")
        if path.startswith("/"):
            files.append((Path(os.path.realpath(path)), path))
    scratch.mkdir(parents=True, exist_ok=True)
    (scratch / "passwd").write_text("root:x:0:0:root:/root:/sbin/nologin\n"
                                    "nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")
    (scratch / "group").write_text("root:x:0:\nnonroot:x:65532:\n")
    files += [(scratch / "passwd", "/etc/passwd"), (scratch / "group", "/etc/group")]
    certs = Path("/etc/ssl/certs/ca-certificates.crt")
    if certs.exists():
        files.append((certs, str(certs)))
    return ociimage.Image(name=name, files=files, dirs=["/tmp"],
                          entrypoint=["/usr/local/bin/leasehold"],
                          cmd=["run", "-c", "/etc/leasehold/leasehold.yml", "--path.data", "/var/lib/leasehold"],
                          user="65532:65532")


def cmd_images(args: argparse.Namespace) -> None:
    work = Path(args.work).resolve()
    img = work / "images"
    img.mkdir(parents=True, exist_ok=True)
    res = subprocess.run(["gcc", "-static", "-Os", "-s", "-o", str(img / "pause"), str(FILES / "pause.c")],
                         capture_output=True, text=True)
    if res.returncode != 0:
        raise Failure(f"building the pause program failed: {res.stderr.strip()}")
    ociimage.write(ociimage.Image(name=SANDBOX_IMAGE, files=[(img / "pause", "/pause")],
                                  entrypoint=["/pause"]), img / "pause.tar")
    applets = subprocess.run([str(BUSYBOX), "--list"], capture_output=True, text=True, check=True).stdout.split()
    ociimage.write(ociimage.Image(
        name=BUSYBOX_IMAGE, files=[(BUSYBOX, "/bin/busybox")],
        symlinks=[("busybox", f"/bin/{a}") for a in applets if a != "busybox"],
        dirs=["/tmp", "/etc"], cmd=["/bin/sh"]), img / "busybox.tar")
    # kube-state-metrics as its own image publishes it: the static binary
    # alone, an unprivileged user.
    ociimage.write(ociimage.Image(name=KSM_IMAGE, files=[(build_ksm(), "/kube-state-metrics")],
                                  entrypoint=["/kube-state-metrics"], user="65534:65534"),
                   img / "kube-state-metrics.tar")
    if args.leasehold:
        ociimage.write(agent_image(Path(args.leasehold), args.leasehold_image, img / "agent-files"),
                       img / "leasehold.tar")
    log(f"images in {img}: {', '.join(sorted(p.name for p in img.glob('*.tar')))}")


# ---------------------------------------------------------------- the plane's API


class Api:
    """The plane's API server, as its admin."""

    def __init__(self, plane: Path):
        try:
            self.state = json.loads((plane / "state.json").read_text())
        except FileNotFoundError:
            raise Failure(f"{plane / 'state.json'} not found: was `controlplane/up --dir {plane}` run?")
        self.base = f"https://127.0.0.1:{self.state['apiserver_port']}"
        self.ctx = ssl.create_default_context(cafile=str(plane / "pki" / "ca.crt"))
        self.token = self.state["tokens"]["admin"]

    def call(self, method: str, path: str, body: dict | None = None, missing_ok: bool = False):
        req = urllib.request.Request(self.base + path, method=method,
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Authorization": f"Bearer {self.token}",
                                              "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10, context=self.ctx) as r:
                return json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            if (e.code == 409 and method == "POST") or (e.code == 404 and missing_ok):
                return None
            raise Failure(f"{method} {path}: HTTP {e.code}: {e.read().decode(errors='replace')[:300]}")


def kubeconfig(api: Api, plane: Path, pki: Path, user: str) -> str:
    def b64(p: Path) -> str:
        return base64.b64encode(p.read_bytes()).decode()

    return json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "node",
        "clusters": [{"name": "leasehold", "cluster": {
            "server": api.base, "certificate-authority-data": b64(plane / "pki" / "ca.crt")}}],
        "users": [{"name": user, "user": {"client-certificate-data": b64(pki / f"{user}.crt"),
                                          "client-key-data": b64(pki / f"{user}.key")}}],
        "contexts": [{"name": "node", "context": {"cluster": "leasehold", "user": user}}],
    }, indent=1)


def client_cert(plane: Path, pki: Path, name: str, cn: str, org: str | None) -> None:
    """A client certificate signed by the plane's CA."""
    subj = f"/CN={cn}" + (f"/O={org}" if org else "")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
            "-subj", subj, cwd=pki)
    (pki / "client.ext").write_text("extendedKeyUsage=clientAuth\nkeyUsage=digitalSignature,keyEncipherment\n")
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", str(plane / "pki" / "ca.crt"),
            "-CAkey", str(plane / "pki" / "ca.key"), "-CAcreateserial", "-days", "30",
            "-extfile", "client.ext", "-out", f"{name}.crt", cwd=pki)
    (pki / f"{name}.key").chmod(0o600)


# ---------------------------------------------------------------- up


def render(template: str, **values: str) -> str:
    return string.Template((FILES / template).read_text()).substitute(values)


def spawn(cmd: list[str], logfile: Path, work: Path) -> int:
    with open(logfile, "ab") as out:
        p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                             start_new_session=True, cwd=work)
    return p.pid


def wait_for(what: str, check, timeout_s: float, pid: int | None = None, logfile: Path | None = None) -> float:
    """Polls `check` until true (bounded); fails at once if `pid` exits."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if pid is not None and not alive(pid):
            raise Failure(f"{what}: process {pid} exited; last log lines:\n"
                          + (tail_of(logfile) if logfile else ""))
        try:
            if check():
                return time.monotonic() - started
        except (OSError, Failure, ValueError):
            pass
        time.sleep(0.2)
    raise Failure(f"{what}: not within {timeout_s:.0f} s"
                  + (f"; last log lines:\n{tail_of(logfile)}" if logfile else ""))


class Node:
    """What `up` recorded in WORK/node.json; `down` reads it back."""

    def __init__(self, work: Path):
        self.work = work.resolve()
        self.file = self.work / "node.json"

    def load(self) -> dict | None:
        try:
            return json.loads(self.file.read_text())
        except FileNotFoundError:
            return None

    def save(self, state: dict) -> None:
        tmp = self.file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=1) + "\n")
        tmp.rename(self.file)


def cmd_up(args: argparse.Namespace) -> None:
    t0 = time.monotonic()
    check_host()
    node = Node(Path(args.work))
    work, plane = node.work, Path(args.plane).resolve()
    old = node.load()
    if old and any(alive(p) for p in old.get("pids", {}).values()):
        raise Failure(f"a node of {work} is still running: `controlplane/node down --work {work}` first")
    api = Api(plane)
    api.call("GET", "/version")
    bins = build()
    for d in ("containerd", "cni/net.d", "cni/ipam", "kubelet", "pki", "logs"):
        (work / d).mkdir(parents=True, exist_ok=True)
    st: dict = {"plane": str(plane), "node": NODE_NAME, "pids": {},
                "sysctls": {k: Path("/proc/sys", k).read_text().strip() for k in SYSCTLS},
                "created_dirs": [d for d in HOST_DIRS if not os.path.exists(d)],
                "bridge_existed": os.path.exists(f"/sys/class/net/{BRIDGE}")}
    node.save(st)
    logs = work / "logs"
    values = dict(WORK=str(work), PLANE=str(plane), NODE=NODE_NAME, BRIDGE=BRIDGE, POD_SUBNET=POD_SUBNET,
                  SANDBOX_IMAGE=SANDBOX_IMAGE,
                  **{k.upper().replace("-", "_") + "_PORT": str(v) for k, v in PORTS.items()})
    (work / "containerd" / "config.toml").write_text(render("containerd.toml.in", **values))
    # Written before containerd starts: it does not notice a renamed-in file.
    (work / "cni" / "net.d" / "10-leasehold.conflist").write_text(render("cni.conflist.in", **values))
    (work / "kubelet" / "config.yaml").write_text(render("kubelet.yaml.in", **values))

    sock = work / "containerd" / "containerd.sock"
    pid = spawn(["unshare", "--mount", "--propagation", "shared", "--",
                 "containerd", "--config", str(work / "containerd" / "config.toml")],
                logs / "containerd.log", work)
    st["pids"]["containerd"] = pid
    node.save(st)
    ctr = ["ctr", "--address", str(sock), "-n", "k8s.io"]
    wait_for("containerd", lambda: subprocess.run(ctr + ["version"], capture_output=True).returncode == 0,
             30, pid, logs / "containerd.log")
    images = sorted((work / "images").glob("*.tar"))
    if not any(p.name == "pause.tar" for p in images):
        raise Failure(f"no pause image in {work / 'images'}: run `controlplane/node images --work {work}` first")
    for tar in images:
        res = subprocess.run(ctr + ["images", "import", str(tar)], capture_output=True, text=True)
        if res.returncode != 0:
            raise Failure(f"importing {tar} failed: {res.stderr.strip()}")

    pki = work / "pki"
    client_cert(plane, pki, "kubelet", f"system:node:{NODE_NAME}", "system:nodes")
    client_cert(plane, pki, "kube-scheduler", "system:kube-scheduler", None)
    client_cert(plane, pki, "kube-controller-manager", "system:kube-controller-manager", None)
    for user in BINARIES:
        path = work / f"{user}.kubeconfig"
        path.write_text(kubeconfig(api, plane, pki, user))
        path.chmod(0o600)
    # The plane authorizes with RBAC alone (no Node authorizer): nodes get
    # the stock system:node role.
    api.call("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "leasehold-node:system:nodes"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:node"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:nodes"}]})

    # As kubeadm runs them: callers of their /metrics authenticate with a
    # token (TokenReview) and are authorized by RBAC (SubjectAccessReview)
    # through the component's own kubeconfig.
    def delegated(user: str) -> list[str]:
        kc = work / f"{user}.kubeconfig"
        return [f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}"]

    kcm = [str(bins["kube-controller-manager"]), f"--kubeconfig={work / 'kube-controller-manager.kubeconfig'}",
           *delegated("kube-controller-manager"),
           "--bind-address=127.0.0.1", f"--secure-port={PORTS['kube-controller-manager']}",
           "--leader-elect=false", "--use-service-account-credentials=true",
           f"--service-account-private-key-file={plane / 'pki' / 'sa.key'}",
           f"--root-ca-file={plane / 'pki' / 'ca.crt'}", "--controllers=*", "--v=1"]
    sched = [str(bins["kube-scheduler"]), f"--kubeconfig={work / 'kube-scheduler.kubeconfig'}",
             *delegated("kube-scheduler"),
             "--bind-address=127.0.0.1", f"--secure-port={PORTS['kube-scheduler']}",
             "--leader-elect=false", "--v=1"]
    st["pids"]["kube-controller-manager"] = spawn(kcm, logs / "kube-controller-manager.log", work)
    st["pids"]["kube-scheduler"] = spawn(sched, logs / "kube-scheduler.log", work)
    node.save(st)
    # A Node object of an earlier run would read Ready at once.
    api.call("DELETE", f"/api/v1/nodes/{NODE_NAME}", missing_ok=True)
    # kubelet joins containerd's mount namespace, so the volumes it mounts
    # are visible to the containers.
    kubelet = ["nsenter", f"--mount=/proc/{pid}/ns/mnt", "--", str(bins["kubelet"]),
               f"--config={work / 'kubelet' / 'config.yaml'}", f"--kubeconfig={work / 'kubelet.kubeconfig'}",
               f"--root-dir={work / 'kubelet'}", f"--cert-dir={work / 'kubelet' / 'pki'}",
               f"--hostname-override={NODE_NAME}", "--v=1"]
    st["pids"]["kubelet"] = spawn(kubelet, logs / "kubelet.log", work)
    node.save(st)

    def ready() -> bool:
        n = api.call("GET", f"/api/v1/nodes/{NODE_NAME}", missing_ok=True)
        return bool(n) and any(c["type"] == "Ready" and c["status"] == "True"
                               for c in n["status"]["conditions"]) \
            and not any(t["key"] == "node.kubernetes.io/not-ready" for t in n["spec"].get("taints", []))

    took = wait_for(f"node {NODE_NAME} Ready", ready, args.timeout, st["pids"]["kubelet"], logs / "kubelet.log")
    # Pods need the `default` ServiceAccount the controller manager makes.
    wait_for("the default ServiceAccount",
             lambda: api.call("GET", "/api/v1/namespaces/default/serviceaccounts/default",
                              missing_ok=True) is not None, 60)
    log(f"node {NODE_NAME} Ready {took:.1f} s after kubelet started; up took {time.monotonic() - t0:.1f} s")
    print(json.dumps({"node": NODE_NAME, "pids": st["pids"], "containerd": str(sock),
                      "logs": str(logs)}))


# ---------------------------------------------------------------- down


def mounts_under(prefixes: tuple[str, ...]) -> list[str]:
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            mount_point = line.split()[4].replace("\\040", " ")
            if mount_point.startswith(prefixes):
                out.append(mount_point)
    return out


def stop_pods(api: Api, node: str, timeout_s: float) -> None:
    """Deletes this node's pods (their grace periods apply) and waits for
    the kubelet to stop them and unmount their volumes."""
    sel = urllib.parse.quote(f"spec.nodeName={node}")
    for p in api.call("GET", f"/api/v1/pods?fieldSelector={sel}")["items"]:
        m = p["metadata"]
        api.call("DELETE", f"/api/v1/namespaces/{m['namespace']}/pods/{m['name']}", missing_ok=True)
    try:
        wait_for("pods gone", lambda: not api.call("GET", f"/api/v1/pods?fieldSelector={sel}")["items"],
                 timeout_s)
    except Failure as e:
        log(f"{e}; going on")


def stop_containers(work: Path) -> None:
    """Kills and removes whatever containerd still runs."""
    ctr = ["ctr", "--address", str(work / "containerd" / "containerd.sock"), "-n", "k8s.io"]
    tasks = subprocess.run(ctr + ["tasks", "ls", "-q"], capture_output=True, text=True).stdout.split()
    for cid in tasks:
        subprocess.run(ctr + ["tasks", "kill", "-s", "SIGKILL", cid], capture_output=True)
    for cid in tasks:
        for _ in range(50):
            if subprocess.run(ctr + ["tasks", "delete", cid], capture_output=True).returncode == 0:
                break
            time.sleep(0.1)
    containers = subprocess.run(ctr + ["containers", "ls", "-q"], capture_output=True, text=True).stdout.split()
    for cid in containers:
        subprocess.run(ctr + ["containers", "delete", cid], capture_output=True)


def stop_shims(sock: str) -> None:
    """Shims outlive containerd; ours name our socket on their command line."""
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{d}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmd and cmd[0].endswith(b"containerd-shim-runc-v2") and sock.encode() in cmd:
            stop_pid(int(d), "containerd shim")


def remove_cgroups() -> None:
    for controller in os.listdir("/sys/fs/cgroup"):
        for top in ("kubepods", "k8s.io"):
            root = Path("/sys/fs/cgroup", controller, top)
            if not root.is_dir():
                continue
            for d in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
                try:
                    d.rmdir()
                except OSError as e:
                    log(f"cgroup {d}: {e}")
            try:
                root.rmdir()
            except OSError as e:
                log(f"cgroup {root}: {e}")


def cmd_down(args: argparse.Namespace) -> None:
    t0 = time.monotonic()
    node = Node(Path(args.work))
    work = node.work
    st = node.load()
    if st is None:
        log(f"nothing to stop in {work}")
        return
    pids = st["pids"]
    api: Api | None
    try:
        api = Api(Path(st["plane"]))
        api.call("GET", "/version")
    except (OSError, Failure, KeyError, ValueError):
        api = None
    # No controller recreates pods once the controller manager is gone.
    for name in ("kube-controller-manager", "kube-scheduler"):
        if name in pids:
            stop_pid(pids[name], name)
    if api is not None and "kubelet" in pids and alive(pids["kubelet"]):
        stop_pods(api, st["node"], args.timeout)
    if "kubelet" in pids:
        stop_pid(pids["kubelet"], "kubelet")
    if api is not None:
        api.call("DELETE", f"/api/v1/nodes/{st['node']}", missing_ok=True)
    if "containerd" in pids and alive(pids["containerd"]):
        stop_containers(work)
        stop_pid(pids["containerd"], "containerd")
    stop_shims(str(work / "containerd" / "containerd.sock"))
    for mount_point in sorted(mounts_under((str(work), "/run/containerd", "/var/log/pods")), key=len,
                              reverse=True):
        subprocess.run(["umount", "-l", mount_point], capture_output=True)
    if not st.get("bridge_existed") and os.path.exists(f"/sys/class/net/{BRIDGE}"):
        subprocess.run(["ip", "link", "del", BRIDGE], capture_output=True)
    remove_cgroups()
    for key, value in st.get("sysctls", {}).items():
        try:
            Path("/proc/sys", key).write_text(value + "\n")
        except OSError as e:
            log(f"sysctl {key}: {e}")
    for d in st.get("created_dirs", []):
        shutil.rmtree(d, ignore_errors=True)
    still = [f"{n} {p}" for n, p in pids.items() if alive(p)]
    st["pids"] = {}
    node.save(st)
    if still:
        raise Failure(f"still running after down: {', '.join(still)}")
    log(f"down in {time.monotonic() - t0:.1f} s")


def cmd_tag(args: argparse.Namespace) -> None:
    """Another name for an imported image (a new tag for a rolling update
    without rebuilding it)."""
    sock = Path(args.work).resolve() / "containerd" / "containerd.sock"
    if not sock.exists():
        raise Failure(f"no node runs in {args.work}: run `controlplane/node up` first")
    res = subprocess.run(["ctr", "--address", str(sock), "-n", "k8s.io", "images", "tag", "--force",
                          args.source, args.target], capture_output=True, text=True)
    if res.returncode != 0:
        raise Failure(f"tagging {args.source} as {args.target} failed: {res.stderr.strip()}")
    log(f"{args.target} is {args.source}")


def cmd_build(_args: argparse.Namespace) -> None:
    for name, path in build().items():
        print(f"{name} {path}")


def main() -> int:
    p = argparse.ArgumentParser(prog="controlplane/node", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("build").set_defaults(fn=cmd_build)
    s = sub.add_parser("images")
    s.add_argument("--work", required=True)
    s.add_argument("--leasehold", help="a release binary to build the agent image from")
    s.add_argument("--leasehold-image", default=AGENT_IMAGE)
    s.set_defaults(fn=cmd_images)
    s = sub.add_parser("up")
    s.add_argument("--plane", required=True, help="the DIR of `controlplane/up --dir DIR`")
    s.add_argument("--work", required=True)
    s.add_argument("--timeout", type=float, default=120)
    s.set_defaults(fn=cmd_up)
    s = sub.add_parser("tag")
    s.add_argument("--work", required=True)
    s.add_argument("source")
    s.add_argument("target")
    s.set_defaults(fn=cmd_tag)
    s = sub.add_parser("down")
    s.add_argument("--work", required=True)
    s.add_argument("--timeout", type=float, default=60)
    s.set_defaults(fn=cmd_down)
    return run_command(p.parse_args(), log)


if __name__ == "__main__":
    sys.exit(main())
