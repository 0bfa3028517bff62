#!/usr/bin/env python3
"""Build, start and stop the real servers leasehold's outputs are tested
against, on loopback: OpenSearch 2.19.6 and Elasticsearch 7.17.29 (jars from
Maven Central, run on Java 17) and an OpenTelemetry Collector v0.165.0
(built from the Go module proxy; OTLP gRPC + HTTP in, file out).

Everything is fetched from the package registries and cached per version
outside the repository; only the first use on a machine builds. Standard
library only, plus `mvn`, `java` and `go`.

  build [opensearch|es7|otelcol|all]
  up NAME --dir DIR     start NAME with its state in DIR/NAME; waits until it
                        is ready and writes DIR/NAME.json (pid, ports, URLs).
                        A sink started again in the same DIR reuses its
                        ports and its data.
  down NAME --dir DIR   stop it (SIGTERM, then SIGKILL after a timeout)

OpenSearch and Elasticsearch refuse to run as root: as root they run as
uid/gid 65534 (nobody), so their cache lives where that uid can read it
(/var/cache/leasehold/sinks), and DIR is made traversable for it.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOBODY = 65534
READY_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 20.0
JAVA_MAJOR = 17
OTELCOL_VERSION = "v0.165.0"

# The Java servers: Maven coordinates, the netty transport module, the
# main class and the prefix of their system properties.
JAVA_SINKS = {
    "opensearch": {
        "product": "OpenSearch",
        "version": "2.19.6",
        "group": "org.opensearch",
        "server": "opensearch",
        "classloader": "opensearch-plugin-classloader",
        "log4j": "2.25.4",
        "plugin_group": "org.opensearch.plugin",
        "main": "org.opensearch.bootstrap.OpenSearch",
        "prop": "opensearch",
        "config": "opensearch.yml",
        "descriptor_version_key": "opensearch.version",
        "descriptor_java": "11",
        "netty_class": "org.opensearch.transport.Netty4Plugin",
    },
    "es7": {
        "product": "Elasticsearch",
        "version": "7.17.29",
        "group": "org.elasticsearch",
        "server": "elasticsearch",
        "classloader": "elasticsearch-plugin-classloader",
        "log4j": "2.17.1",
        "plugin_group": "org.elasticsearch.plugin",
        "main": "org.elasticsearch.bootstrap.Elasticsearch",
        "prop": "es",
        "config": "elasticsearch.yml",
        "descriptor_version_key": "elasticsearch.version",
        "descriptor_java": "1.8",
        "netty_class": "org.elasticsearch.transport.Netty4Plugin",
    },
}
NAMES = (*JAVA_SINKS, "otelcol")


class Failure(Exception):
    """A step failed; the message says which and what to look at."""


def log(msg: str) -> None:
    print(f"sinks: {msg}", file=sys.stderr, flush=True)


def is_root() -> bool:
    return os.geteuid() == 0


def cache_root() -> Path:
    if is_root():
        # uid 65534 must read the Java homes; /root is not traversable.
        return Path("/var/cache/leasehold/sinks")
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "leasehold" / "sinks"


def files_hash(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for p in sorted(paths):
        h.update(str(p.relative_to(ROOT)).encode() + b"\0")
        h.update(p.read_bytes())
    return h.hexdigest()[:12]


def java_key(name: str) -> str:
    spec = JAVA_SINKS[name]
    return f"{name}-{spec['version']}_{files_hash([Path(__file__)])}"


def java_home(name: str) -> Path:
    return cache_root() / java_key(name) / "home"


def otelcol_binary() -> Path:
    d = ROOT / "otelcol"
    key = f"otelcol-{OTELCOL_VERSION}_{files_hash([d / 'go.mod', d / 'go.sum', d / 'main.go'])}"
    return cache_root() / key / "otelcol"


# ---------------------------------------------------------------- building


def java_binary() -> str:
    """A Java 17 (OpenSearch 2.x needs its Security Manager)."""
    candidates = [os.environ.get("LEASEHOLD_JAVA"), shutil.which("java")]
    candidates += sorted(str(p) for p in Path("/usr/lib/jvm").glob("*17*/bin/java"))
    for c in candidates:
        if not c or not Path(c).exists():
            continue
        out = subprocess.run([c, "-version"], capture_output=True, text=True)
        text = out.stderr + out.stdout
        if f'version "{JAVA_MAJOR}.' in text or f'version "{JAVA_MAJOR}"' in text:
            return c
    raise Failure(f"no Java {JAVA_MAJOR} found (set LEASEHOLD_JAVA, or install openjdk-{JAVA_MAJOR}-jdk-headless)")


def pom(artifacts: list[tuple[str, str, str]], exclude_group: str | None = None) -> str:
    deps = []
    for group, artifact, version in artifacts:
        excl = ""
        if exclude_group:
            excl = f"<exclusions><exclusion><groupId>{exclude_group}</groupId><artifactId>*</artifactId></exclusion></exclusions>"
        deps.append(
            f"<dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId><version>{version}</version>{excl}</dependency>"
        )
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        "<groupId>dev.leasehold.sinks</groupId><artifactId>fetch</artifactId><version>1</version><packaging>pom</packaging>"
        f"<dependencies>{''.join(deps)}</dependencies></project>\n"
    )


def mvn_copy(pom_text: str, work: Path, out: Path) -> None:
    if shutil.which("mvn") is None:
        raise Failure("the `mvn` command is not on PATH; install maven")
    work.mkdir(parents=True, exist_ok=True)
    (work / "pom.xml").write_text(pom_text)
    res = subprocess.run(
        ["mvn", "-q", "-B", "-Dstyle.color=never", "-f", str(work / "pom.xml"), "dependency:copy-dependencies", f"-DoutputDirectory={out}"],
        stdout=sys.stderr,
    )
    if res.returncode != 0:
        raise Failure(f"mvn dependency:copy-dependencies failed in {work} (exit {res.returncode})")


def netty_policy(name: str) -> str:
    """The netty transport's Security Manager grants."""
    if name == "es7":
        # Elasticsearch 7 grants per jar (codebase) only.
        return (
            'grant codeBase "${codebase.netty-common}" {\n'
            '  permission java.io.FilePermission "/proc/sys/net/core/somaxconn", "read";\n'
            '  permission java.net.SocketPermission "*", "accept,connect";\n'
            '  permission java.lang.RuntimePermission "setContextClassLoader";\n'
            "};\n"
            'grant codeBase "${codebase.netty-transport}" {\n'
            '  permission java.util.PropertyPermission "sun.nio.ch.bugLevel", "write";\n'
            "};\n"
        )
    return (
        "grant {\n"
        '  permission java.io.FilePermission "/proc/sys/net/core/somaxconn", "read";\n'
        '  permission java.net.SocketPermission "*", "accept,connect";\n'
        '  permission java.lang.RuntimePermission "*", "setContextClassLoader";\n'
        '  permission java.lang.RuntimePermission "getClassLoader";\n'
        '  permission java.util.PropertyPermission "sun.nio.ch.bugLevel", "write";\n'
        "};\n"
    )


def build_java(name: str) -> Path:
    home = java_home(name)
    if (home / ".complete").exists():
        return home
    spec = JAVA_SINKS[name]
    v = spec["version"]
    root = home.parent
    root.mkdir(parents=True, exist_ok=True)
    with open(root.parent / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (home / ".complete").exists():
            return home
        started = time.monotonic()
        log(f"fetching {spec['product']} {v} from Maven Central into {home}")
        if home.exists():
            shutil.rmtree(home)
        mvn_copy(
            pom([
                (spec["group"], spec["server"], v),
                (spec["group"], spec["classloader"], v),
                ("org.apache.logging.log4j", "log4j-core", spec["log4j"]),
            ]),
            root / "mvn-server",
            home / "lib",
        )
        module = home / "modules" / "transport-netty4"
        mvn_copy(
            pom([(spec["plugin_group"], "transport-netty4-client", v)], exclude_group=spec["group"]),
            root / "mvn-netty",
            module,
        )
        (module / "plugin-descriptor.properties").write_text(
            "description=Netty 4 based transport implementation\n"
            f"version={v}\n"
            "name=transport-netty4\n"
            f"classname={spec['netty_class']}\n"
            f"java.version={spec['descriptor_java']}\n"
            f"{spec['descriptor_version_key']}={v}\n"
            "extended.plugins=\n"
            "has.native.controller=false\n"
        )
        (module / "plugin-security.policy").write_text(netty_policy(name))
        (home / "bin").mkdir(exist_ok=True)
        (home / "plugins").mkdir(exist_ok=True)
        for p in [root.parent, root, *root.rglob("*")]:
            os.chmod(p, 0o755 if p.is_dir() else 0o644)
        (home / ".complete").write_text(v + "\n")
        log(f"{spec['product']} {v} ready in {time.monotonic() - started:.0f} s")
    return home


def build_otelcol() -> Path:
    dest = otelcol_binary()
    if dest.exists():
        return dest
    if shutil.which("go") is None:
        raise Failure("the `go` command is not on PATH; install Go 1.26 or newer")
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest.parent.parent / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if dest.exists():
            return dest
        log(f"building the OpenTelemetry Collector {OTELCOL_VERSION} into {dest.parent}; the first build takes a few minutes")
        started = time.monotonic()
        tmp = dest.with_name(dest.name + ".tmp")
        res = subprocess.run(
            ["go", "build", "-trimpath", "-buildvcs=false", "-ldflags", "-s -w", "-o", str(tmp), "."],
            cwd=ROOT / "otelcol",
            env={**os.environ, "CGO_ENABLED": "0"},
        )
        if res.returncode != 0:
            raise Failure(f"building the collector failed (go build in {ROOT / 'otelcol'} exited {res.returncode})")
        tmp.rename(dest)
        log(f"built the collector in {time.monotonic() - started:.0f} s")
    return dest


def build(which: str) -> None:
    names = NAMES if which == "all" else (which,)
    for n in names:
        if n == "otelcol":
            build_otelcol()
        else:
            build_java(n)


# ---------------------------------------------------------------- running


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def info_path(d: Path, name: str) -> Path:
    return d / f"{name}.json"


def read_info(d: Path, name: str) -> dict:
    p = info_path(d, name)
    return json.loads(p.read_text()) if p.exists() else {}


def write_info(d: Path, name: str, info: dict) -> None:
    tmp = info_path(d, name).with_suffix(".tmp")
    tmp.write_text(json.dumps(info, indent=1) + "\n")
    tmp.rename(info_path(d, name))


def alive(pid: int | None, marker: str) -> bool:
    if not pid:
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return marker in cmdline


def tail(path: Path, n: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


def own(path: Path) -> None:
    """Makes `path` and what it holds belong to uid 65534 when root."""
    if not is_root():
        return
    for p in [path, *path.rglob("*")]:
        os.chown(p, NOBODY, NOBODY, follow_symlinks=False)


def up_java(name: str, d: Path, port: int | None) -> dict:
    spec = JAVA_SINKS[name]
    home = build_java(name)
    java = java_binary()
    inst = d / name
    for sub in ("config", "data", "logs", "tmp"):
        (inst / sub).mkdir(parents=True, exist_ok=True)
    ports_file = inst / "logs" / "http.ports"
    ports_file.unlink(missing_ok=True)
    (inst / "config" / spec["config"]).write_text(
        f"cluster.name: leasehold-{name}\n"
        "node.name: node-1\n"
        "discovery.type: single-node\n"
        "network.host: 127.0.0.1\n"
        f"path.data: {inst / 'data'}\n"
        f"path.logs: {inst / 'logs'}\n"
        f"http.port: {port or 0}\n"
        "transport.port: 0\n"
        "node.portsfile: true\n"
        "action.auto_create_index: true\n"
    )
    (inst / "config" / "log4j2.properties").write_text(
        "status = error\n"
        "appender.console.type = Console\n"
        "appender.console.name = console\n"
        "appender.console.layout.type = PatternLayout\n"
        "appender.console.layout.pattern = [%d{ISO8601}][%-5p][%c{1.}] %m%n\n"
        "rootLogger.level = info\n"
        "rootLogger.appenderRef.console.ref = console\n"
    )
    if is_root():
        own(inst)
        # Let uid 65534 reach DIR/NAME through DIR.
        os.chmod(d, os.stat(d).st_mode | 0o011)
    p = spec["prop"]
    cmd = [
        java, "-Xms256m", "-Xmx256m", "-XX:+UseSerialGC", "-Djava.awt.headless=true",
        "-Dfile.encoding=UTF-8", "-Djna.nosys=true", "-Dio.netty.noUnsafe=true",
        "-Dio.netty.noKeySetOptimization=true", "-Dio.netty.recycler.maxCapacityPerThread=0",
        "-Dlog4j.shutdownHookEnabled=false", "-Dlog4j2.disable.jmx=true",
        f"-Djava.io.tmpdir={inst / 'tmp'}", "-Djava.locale.providers=SPI,COMPAT",
        f"-D{p}.path.home={home}", f"-D{p}.path.conf={inst / 'config'}",
        f"-D{p}.distribution.type=tar", f"-D{p}.bundled_jdk=false",
    ]
    if name == "es7":
        cmd.append("-Des.distribution.flavor=oss")
    cmd += ["-cp", f"{home}/lib/*", spec["main"]]
    env = {**os.environ, "LIBFFI_TMPDIR": str(inst / "tmp"), "ES_TMPDIR": str(inst / "tmp")}
    if is_root():
        cmd = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *cmd]
    logf = inst / f"{name}.log"
    with open(logf, "ab") as out:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                env=env, cwd=inst, start_new_session=True)
    deadline = time.monotonic() + READY_TIMEOUT_S
    http_port = port
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise Failure(f"{spec['product']} exited ({proc.returncode}) while starting; {logf}:\n{tail(logf)}")
        if http_port is None and ports_file.exists():
            text = ports_file.read_text().strip()
            if text:
                http_port = int(text.splitlines()[0].rsplit(":", 1)[1])
        if http_port:
            try:
                url = f"http://127.0.0.1:{http_port}/_cluster/health?wait_for_status=yellow&timeout=1s"
                with urllib.request.urlopen(url, timeout=3) as r:
                    if r.status == 200:
                        return {
                            "pid": proc.pid, "http_port": http_port,
                            "url": f"http://127.0.0.1:{http_port}", "home": str(home),
                            "product": spec["product"], "version": spec["version"],
                        }
            except (urllib.error.URLError, OSError, ValueError):
                pass
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    raise Failure(f"{spec['product']} not ready within {READY_TIMEOUT_S:.0f} s; {logf}:\n{tail(logf)}")


def up_otelcol(d: Path, grpc_port: int | None, http_port: int | None) -> dict:
    binary = build_otelcol()
    inst = d / "otelcol"
    inst.mkdir(parents=True, exist_ok=True)
    grpc_port = grpc_port or free_port()
    http_port = http_port or free_port()
    out = inst / "out.jsonl"
    config = inst / "config.yaml"
    config.write_text(
        "receivers:\n"
        "  otlp:\n"
        "    protocols:\n"
        f"      grpc: {{endpoint: '127.0.0.1:{grpc_port}'}}\n"
        f"      http: {{endpoint: '127.0.0.1:{http_port}'}}\n"
        "exporters:\n"
        f"  file: {{path: '{out}', flush_interval: 100ms}}\n"
        "service:\n"
        "  telemetry:\n"
        "    metrics: {level: none}\n"
        "  pipelines:\n"
        "    logs: {receivers: [otlp], exporters: [file]}\n"
        "    metrics: {receivers: [otlp], exporters: [file]}\n"
        "    traces: {receivers: [otlp], exporters: [file]}\n"
    )
    logf = inst / "otelcol.log"
    with open(logf, "ab") as lf:
        proc = subprocess.Popen([str(binary), "--config", f"file:{config}"], stdin=subprocess.DEVNULL,
                                stdout=lf, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise Failure(f"the collector exited ({proc.returncode}) while starting; {logf}:\n{tail(logf)}")
        ready = True
        for p in (grpc_port, http_port):
            try:
                socket.create_connection(("127.0.0.1", p), timeout=1).close()
            except OSError:
                ready = False
        if ready:
            return {
                "pid": proc.pid, "grpc_port": grpc_port, "http_port": http_port,
                "grpc_endpoint": f"127.0.0.1:{grpc_port}", "http_endpoint": f"http://127.0.0.1:{http_port}",
                "output": str(out), "binary": str(binary),
            }
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    raise Failure(f"the collector did not listen within 60 s; {logf}:\n{tail(logf)}")


def marker(info: dict) -> str:
    return info.get("home") or info.get("binary") or "\0"


def up(name: str, d: Path, port: int | None) -> None:
    d = d.resolve()
    d.mkdir(parents=True, exist_ok=True)
    old = read_info(d, name)
    if alive(old.get("pid"), marker(old)):
        raise Failure(f"{name} already runs for {d} (pid {old['pid']}); `sinks/down {name} --dir {d}` first")
    if name == "otelcol":
        info = up_otelcol(d, old.get("grpc_port"), old.get("http_port"))
    else:
        info = up_java(name, d, port or old.get("http_port"))
    write_info(d, name, info)
    print(json.dumps(info))


def down(name: str, d: Path) -> None:
    d = d.resolve()
    info = read_info(d, name)
    pid = info.get("pid")
    if alive(pid, marker(info)):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while alive(pid, marker(info)) and time.monotonic() < deadline:
            time.sleep(0.05)
        if alive(pid, marker(info)):
            os.kill(pid, signal.SIGKILL)
            while alive(pid, marker(info)):
                time.sleep(0.05)
    if info:
        info["pid"] = None
        write_info(d, name, info)


def main() -> int:
    ap = argparse.ArgumentParser(prog="sinks", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("name", nargs="?", default="all", choices=[*NAMES, "all"])
    u = sub.add_parser("up")
    u.add_argument("name", choices=NAMES)
    u.add_argument("--dir", required=True, type=Path)
    u.add_argument("--port", type=int)
    dn = sub.add_parser("down")
    dn.add_argument("name", choices=NAMES)
    dn.add_argument("--dir", required=True, type=Path)
    args = ap.parse_args()
    try:
        if args.cmd == "build":
            build(args.name)
        elif args.cmd == "up":
            up(args.name, args.dir, args.port)
        else:
            down(args.name, args.dir)
    except Failure as e:
        log(str(e))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
