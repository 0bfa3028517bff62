#!/usr/bin/env python3
"""Build, start and stop the real servers leasehold's outputs are tested
against, on loopback: OpenSearch 2.19.6 and Elasticsearch 7.17.29 (jars from
Maven Central, run on Java 17) and an OpenTelemetry Collector v0.165.0
(built from the Go module proxy; OTLP gRPC + HTTP in, JSON lines out).

Everything is fetched from the package registries and cached per version
outside the repository; only the first use on a machine builds. Standard
library only, plus `mvn`, `java` (17) and `go` (1.26+).

  build [opensearch|es7|otelcol|all]
                        fetch/build what the cache lacks (default: all)
  up NAME --dir DIR [--port N] [--plugin P] [--heap SIZE] [--setting K=V]
                        start NAME with its state in DIR/NAME, wait until it
                        is ready, write DIR/NAME.json (pid, ports, URLs) and
                        print it. Started again with the same DIR, a sink
                        reuses its ports and its data. --port: the HTTP port
                        (opensearch, es7) or the OTLP/gRPC port (otelcol).
                        --plugin: also load plugin P, built from sinks/P/
                        (for the benchmarks; see PLUGINS below).
                        --heap: the Java heap (opensearch, es7), e.g. 1g;
                        default 256m (the tests' small footprint).
                        --setting: a node setting of opensearch or es7
                        (e.g. http.max_content_length=16kb), repeatable.
  down NAME --dir DIR   stop it (SIGTERM, SIGKILL after a timeout); keeps
                        DIR/NAME.json, marked stopped, for the next `up`.

OpenSearch and Elasticsearch refuse to run as root: as root they run as
uid/gid 65534, which must read their jars. /root is not searchable by
others, so as root the cache defaults to /var/cache/leasehold/sinks (an
explicit XDG_CACHE_HOME is used if 65534 can reach it), its files are made
world-readable at build time, DIR/NAME is owned by 65534 and DIR is made
searchable for it.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOBODY = 65534
READY_TIMEOUT_S = 180.0
OTELCOL_READY_TIMEOUT_S = 60.0
# Starts of the collector on fresh free ports when one was taken meanwhile.
OTELCOL_PORT_ATTEMPTS = 5
STOP_TIMEOUT_S = 20.0
KILL_TIMEOUT_S = 10.0
JAVA_MAJOR = 17
GO_MIN = (1, 26)
OTELCOL_VERSION = "v0.165.0"
OTELCOL_FILES = ("go.mod", "go.sum", "main.go", "components.go")

# The Java servers: Maven coordinates, the netty transport module, the main
# class and the prefix of their system properties.
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

# Plugins `up --plugin` adds to a Java server (never loaded without it): the
# server they are for. Each is built from its sources in sinks/PLUGIN/ (every
# *.java there and its plugin-descriptor.properties) with `javac` against the
# server's jars, into a home of its own in the cache: the server's lib/ and
# modules/ hard-linked, plus plugins/PLUGIN/.
#   license-stub: `GET /_license` answering a basic license, as Elasticsearch
#   does (Filebeat refuses a server without it); nothing else.
#   license-stub-es7: the same for Elasticsearch 7.17 (the Maven artifact is
#   the server without x-pack, where that API lives): license-stub's sources
#   with Elasticsearch's package names (PORTS), and a descriptor of its own.
PLUGINS = {"license-stub": "opensearch", "license-stub-es7": "es7"}

# A plugin ported from another's sources: (the plugin it is ported from,
# the textual replacements, in order).
PORTS = {
    "license-stub-es7": ("license-stub", [
        ("org.opensearch.core.rest.RestStatus", "org.elasticsearch.rest.RestStatus"),
        ("org.opensearch.core.xcontent.XContentBuilder", "org.elasticsearch.xcontent.XContentBuilder"),
        ("org.opensearch.", "org.elasticsearch."),
        ("package dev.leasehold.sinks.licensestub;", "package dev.leasehold.sinks.licensestubes7;"),
        ("An OpenSearch plugin", "An Elasticsearch 7 plugin"),
        ("Nothing else of OpenSearch changes.", "Nothing else of Elasticsearch changes."),
        ("leasehold-opensearch", "leasehold-elasticsearch7"),
    ]),
}


class Failure(Exception):
    """A step failed; the message says which and what to look at."""


def log(msg: str) -> None:
    print(f"sinks: {msg}", file=sys.stderr, flush=True)


def is_root() -> bool:
    return os.geteuid() == 0


# ---------------------------------------------------------------- the cache


def searchable_by_others(path: Path) -> Path | None:
    """The first directory on the way to `path` that uid 65534 cannot
    search (enter), or None."""
    for p in [*reversed(path.parents), path]:
        if not p.exists():
            break
        st = p.stat()
        if st.st_uid != NOBODY and not st.st_mode & stat.S_IXOTH:
            return p
    return None


def cache_root() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME")
    if is_root():
        # The Java servers run as uid 65534 and read their jars from here.
        if xdg and searchable_by_others(Path(xdg)) is None:
            return Path(xdg) / "leasehold" / "sinks"
        return Path("/var/cache/leasehold/sinks")
    return Path(xdg or Path.home() / ".cache") / "leasehold" / "sinks"


def digest(parts: dict[str, bytes]) -> str:
    h = hashlib.sha256()
    for name, data in sorted(parts.items()):
        h.update(name.encode() + b"\0" + data + b"\0")
    return h.hexdigest()[:12]


def lock_builds():
    """An exclusive lock on the cache: one build at a time, on the whole
    machine. Released when the returned file is closed."""
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    f = open(root / ".build.lock", "w")
    fcntl.flock(f, fcntl.LOCK_EX)
    return f


def make_readable(top: Path) -> None:
    """Root only: lets uid 65534 read everything under `top` (and enter
    `top`'s ancestors inside the cache)."""
    if not is_root():
        return
    for p in [*top.parents, top]:
        if p == cache_root().parent or cache_root().parent in p.parents:
            if p.exists() and not p.stat().st_mode & stat.S_IXOTH:
                os.chmod(p, p.stat().st_mode | 0o055)
    for p in [top, *top.rglob("*")]:
        st = p.lstat()
        if stat.S_ISLNK(st.st_mode):
            continue
        want = st.st_mode | (0o055 if stat.S_ISDIR(st.st_mode) else 0o044)
        if stat.S_ISREG(st.st_mode) and st.st_mode & stat.S_IXUSR:
            want |= 0o011
        if want != st.st_mode:
            os.chmod(p, stat.S_IMODE(want))
    blocked = searchable_by_others(top)
    if blocked is not None:
        raise Failure(f"uid {NOBODY} cannot enter {blocked}, so it cannot read {top}: "
                      f"`chmod o+x {blocked}`, or unset XDG_CACHE_HOME to use /var/cache/leasehold/sinks")


# ---------------------------------------------------------------- Java servers


def java_binary() -> str:
    """A Java 17 (OpenSearch 2.x needs its Security Manager, gone in 24)."""
    candidates = [os.environ.get("LEASEHOLD_JAVA"), shutil.which("java")]
    candidates += sorted(str(p) for p in Path("/usr/lib/jvm").glob(f"*{JAVA_MAJOR}*/bin/java"))
    for c in candidates:
        if not c or not Path(c).exists():
            continue
        out = subprocess.run([c, "-version"], capture_output=True, text=True)
        text = out.stderr + out.stdout
        if f'version "{JAVA_MAJOR}.' in text or f'version "{JAVA_MAJOR}"' in text:
            return c
    raise Failure(f"no Java {JAVA_MAJOR} found: install openjdk-{JAVA_MAJOR}-jdk-headless, or set LEASEHOLD_JAVA to its `java`")


def pom(artifact_id: str, deps: list[tuple[str, str, str]], exclude_group: str | None = None) -> str:
    lines = []
    for group, artifact, version in deps:
        excl = ""
        if exclude_group:
            excl = f"<exclusions><exclusion><groupId>{exclude_group}</groupId><artifactId>*</artifactId></exclusion></exclusions>"
        lines.append(f"  <dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId><version>{version}</version>{excl}</dependency>\n")
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>\n'
        f"<groupId>dev.leasehold.sinks</groupId><artifactId>{artifact_id}</artifactId><version>1</version><packaging>pom</packaging>\n"
        f"<dependencies>\n{''.join(lines)}</dependencies></project>\n"
    )


def netty_policy(name: str) -> str:
    """The netty transport module's Security Manager grants."""
    if name == "es7":
        # Elasticsearch 7 honours only grants per jar (codebase) here.
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


def java_recipe(name: str) -> dict[str, str]:
    """Every file a Java home is made from (its cache key hashes them)."""
    s = JAVA_SINKS[name]
    v = s["version"]
    return {
        "server.pom.xml": pom(f"{name}-server", [
            (s["group"], s["server"], v),
            (s["group"], s["classloader"], v),
            ("org.apache.logging.log4j", "log4j-core", s["log4j"]),
        ]),
        # The module's own jars only: the server's are in lib/ already.
        "netty.pom.xml": pom(f"{name}-netty", [(s["plugin_group"], "transport-netty4-client", v)], exclude_group=s["group"]),
        "plugin-descriptor.properties": (
            "description=Netty 4 based transport implementation\n"
            f"version={v}\n"
            "name=transport-netty4\n"
            f"classname={s['netty_class']}\n"
            f"java.version={s['descriptor_java']}\n"
            f"{s['descriptor_version_key']}={v}\n"
            "extended.plugins=\n"
            "has.native.controller=false\n"
        ),
        "plugin-security.policy": netty_policy(name),
    }


def java_home(name: str) -> Path:
    recipe = {k: v.encode() for k, v in java_recipe(name).items()}
    return cache_root() / f"{name}-{JAVA_SINKS[name]['version']}_{digest(recipe)}" / "home"


def mvn_copy(pom_file: Path, out: Path) -> None:
    if shutil.which("mvn") is None:
        raise Failure("the `mvn` command is not on PATH; install maven")
    cmd = ["mvn", "-q", "-B", "-Dstyle.color=never", "-f", str(pom_file),
           "dependency:copy-dependencies", f"-DoutputDirectory={out}"]
    res = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if res.returncode != 0:
        said = re.sub(r"\x1b\[[0-9;]*m", "", res.stdout + res.stderr).strip()
        raise Failure(f"`{' '.join(cmd)}` failed (exit {res.returncode}); Maven Central must be reachable:\n{said[-3000:]}")


def build_java(name: str) -> Path:
    home = java_home(name)
    if not (home / ".complete").exists():
        with lock_builds():
            if not (home / ".complete").exists():
                fetch_java(name, home)
    # A cache made earlier (another umask, another user) may not be readable
    # by uid 65534 yet.
    make_readable(home.parent)
    return home


def fetch_java(name: str, home: Path) -> None:
    s = JAVA_SINKS[name]
    started = time.monotonic()
    log(f"fetching {s['product']} {s['version']} from Maven Central into {home}")
    java_binary()  # fail early, before minutes of downloads
    work = home.parent / "recipe"
    for d in (home, work):
        if d.exists():
            shutil.rmtree(d)
    work.mkdir(parents=True)
    recipe = java_recipe(name)
    for fname, text in recipe.items():
        (work / fname).write_text(text)
    mvn_copy(work / "server.pom.xml", home / "lib")
    module = home / "modules" / "transport-netty4"
    mvn_copy(work / "netty.pom.xml", module)
    shutil.copy(work / "plugin-descriptor.properties", module)
    shutil.copy(work / "plugin-security.policy", module)
    # The servers look for both directories in their home.
    (home / "bin").mkdir(exist_ok=True)
    (home / "plugins").mkdir(exist_ok=True)
    make_readable(home.parent)
    (home / ".complete").write_text(f"{s['version']}\n")
    jars = len(list(home.rglob("*.jar")))
    log(f"{s['product']} {s['version']}: {jars} jars in {time.monotonic() - started:.0f} s")


# ---------------------------------------------------------------- plugins


def plugin_sources(plugin: str) -> dict[str, bytes]:
    d = ROOT / plugin
    if plugin in PORTS:
        origin, replacements = PORTS[plugin]
        sources = {}
        for f in sorted((ROOT / origin).glob("*.java")):
            text = f.read_text()
            for old, new in replacements:
                text = text.replace(old, new)
            sources[f.name] = text.encode()
        sources["plugin-descriptor.properties"] = (d / "plugin-descriptor.properties").read_bytes()
        return sources
    files = sorted(d.glob("*.java")) + [d / "plugin-descriptor.properties"]
    return {f.name: f.read_bytes() for f in files}


def javac_binary() -> str:
    """The `javac` of the Java 17 the servers run on (or any on PATH)."""
    beside = Path(java_binary()).resolve().parent / "javac"
    found = str(beside) if beside.exists() else shutil.which("javac")
    if not found:
        raise Failure(f"no `javac` beside {java_binary()} nor on PATH: install openjdk-{JAVA_MAJOR}-jdk-headless")
    return found


def check_descriptor(name: str, plugin: str, text: str) -> None:
    s = JAVA_SINKS[name]
    props = dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))
    if props.get("name") != plugin or props.get(s["descriptor_version_key"]) != s["version"]:
        raise Failure(f"{ROOT / plugin / 'plugin-descriptor.properties'}: want name={plugin} and "
                      f"{s['descriptor_version_key']}={s['version']}")


def build_plugin_home(name: str, plugins: list[str]) -> Path:
    """A home with the server's jars and `plugins` installed; the server's own
    home when there are none."""
    base = build_java(name)
    if not plugins:
        return base
    parts = {f"{p}/{f}": data for p in plugins for f, data in plugin_sources(p).items()}
    home = cache_root() / f"{base.parent.name}+{'+'.join(plugins)}_{digest(parts)}" / "home"
    if not (home / ".complete").exists():
        with lock_builds():
            if not (home / ".complete").exists():
                make_plugin_home(name, base, home, plugins)
    make_readable(home.parent)
    return home


def make_plugin_home(name: str, base: Path, home: Path, plugins: list[str]) -> None:
    log(f"building {', '.join(plugins)} for {JAVA_SINKS[name]['product']} into {home}")
    javac = javac_binary()
    work = home.parent / "build"
    for d in (home, work):
        if d.exists():
            shutil.rmtree(d)

    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    for sub in ("lib", "modules"):
        shutil.copytree(base / sub, home / sub, copy_function=link)
    (home / "bin").mkdir()
    for p in plugins:
        sources = plugin_sources(p)
        check_descriptor(name, p, sources["plugin-descriptor.properties"].decode())
        src = work / p / "src"
        classes = work / p / "classes"
        src.mkdir(parents=True)
        classes.mkdir()
        for f, data in sources.items():
            (src / f).write_bytes(data)
        cmd = [javac, "--release", str(JAVA_MAJOR), "-encoding", "UTF-8", "-proc:none", "-nowarn",
               "-cp", f"{base}/lib/*", "-d", str(classes), *sorted(str(x) for x in src.glob("*.java"))]
        res = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True)
        if res.returncode != 0:
            raise Failure(f"compiling {p} failed (`javac` exit {res.returncode}):\n{(res.stdout + res.stderr)[-3000:]}")
        dest = home / "plugins" / p
        dest.mkdir(parents=True)
        # A jar is a zip; fixed dates keep it the same from build to build.
        with zipfile.ZipFile(dest / f"{p}.jar", "w", zipfile.ZIP_DEFLATED) as jar:
            jar.writestr(zipfile.ZipInfo("META-INF/MANIFEST.MF", (1980, 1, 1, 0, 0, 0)), "Manifest-Version: 1.0\r\n\r\n")
            for c in sorted(x for x in classes.rglob("*.class")):
                jar.writestr(zipfile.ZipInfo(c.relative_to(classes).as_posix(), (1980, 1, 1, 0, 0, 0)), c.read_bytes())
        (dest / "plugin-descriptor.properties").write_bytes(sources["plugin-descriptor.properties"])
    shutil.rmtree(work)
    make_readable(home.parent)
    (home / ".complete").write_text(" ".join(plugins) + "\n")


# ---------------------------------------------------------------- the Collector


def otelcol_binary() -> Path:
    d = ROOT / "otelcol"
    parts = {f: (d / f).read_bytes() for f in OTELCOL_FILES}
    return cache_root() / f"otelcol-{OTELCOL_VERSION}_{digest(parts)}" / "otelcol"


def check_go() -> None:
    if shutil.which("go") is None:
        raise Failure("the `go` command is not on PATH; install Go 1.26 or newer")
    out = subprocess.run(["go", "env", "GOVERSION"], capture_output=True, text=True)
    ver = out.stdout.strip().removeprefix("go")
    parts = [int(p) for p in ver.split(".")[:2] if p.isdigit()]
    if len(parts) < 2 or tuple(parts) < GO_MIN:
        raise Failure(f"Go {ver or '?'} is too old: the collector {OTELCOL_VERSION} needs Go 1.26 or newer")


def build_otelcol() -> Path:
    dest = otelcol_binary()
    if dest.exists():
        return dest
    check_go()
    with lock_builds():
        if dest.exists():
            return dest
        dest.parent.mkdir(parents=True, exist_ok=True)
        log(f"building the OpenTelemetry Collector {OTELCOL_VERSION} into {dest.parent} "
            "(go build; the first build takes minutes)")
        started = time.monotonic()
        tmp = dest.with_name(dest.name + ".tmp")
        cmd = ["go", "build", "-trimpath", "-buildvcs=false", "-ldflags", "-s -w", "-o", str(tmp), "."]
        # -mod=readonly: the committed go.sum is complete; `go mod tidy`
        # would fail on a test-only dependency the proxy refuses.
        env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=readonly"}
        res = subprocess.run(cmd, cwd=ROOT / "otelcol", env=env, stdin=subprocess.DEVNULL, stdout=sys.stderr)
        if res.returncode != 0:
            tmp.unlink(missing_ok=True)
            raise Failure(f"building the collector failed: `{' '.join(cmd)}` in {ROOT / 'otelcol'} exited {res.returncode}")
        tmp.rename(dest)
        log(f"built the collector ({dest.stat().st_size // 2**20} MB) in {time.monotonic() - started:.0f} s")
    return dest


def build(which: str) -> None:
    for n in NAMES if which == "all" else (which,):
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
    try:
        return json.loads(p.read_text()) if p.exists() else {}
    except ValueError as e:
        raise Failure(f"{p} is not JSON ({e}); remove it to start afresh") from e


def write_info(d: Path, name: str, info: dict) -> None:
    tmp = info_path(d, name).with_suffix(".json.tmp")
    tmp.write_text(json.dumps(info, indent=1) + "\n")
    tmp.rename(info_path(d, name))


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def alive(pid: int | None, markers: list[str]) -> bool:
    """Whether `pid` still is the sink: its command line names both the
    server's files in the cache and this sink's directory."""
    if not pid:
        return False
    line = cmdline(pid)
    return bool(line) and all(m in line for m in markers)


def gone(pid: int) -> bool:
    """Whether `pid` has exited (a zombie counts: it holds no port)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return text[text.rindex(")") + 2] in "ZX"


def wait_exit(pid: int, m: list[str], timeout: float) -> bool:
    """Waits until `pid` has exited; False if it still is the sink after
    `timeout` s. (Its command line empties before its last thread ends.)"""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if gone(pid):
            return True
        time.sleep(0.05)
    return not alive(pid, m)


def markers(info: dict, inst: Path) -> list[str]:
    return [info.get("home") or info.get("binary") or "\0", str(inst)]


def tail(path: Path, n: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


def start_logged(cmd: list[str], logf: Path, cwd: Path, env: dict | None = None) -> subprocess.Popen:
    with open(logf, "ab") as out:
        out.write(f"---- sinks/up at {time.strftime('%Y-%m-%dT%H:%M:%S%z')}\n".encode())
        out.flush()
        return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                env=env, cwd=cwd, start_new_session=True)


def give_up(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def own_for_nobody(d: Path, inst: Path) -> None:
    """Root only: uid 65534 owns DIR/NAME and may enter DIR."""
    if not is_root():
        return
    for p in [inst, *inst.rglob("*")]:
        os.chown(p, NOBODY, NOBODY, follow_symlinks=False)
    os.chmod(d, stat.S_IMODE(d.stat().st_mode) | 0o001)
    blocked = searchable_by_others(d)
    if blocked is not None:
        raise Failure(f"uid {NOBODY} cannot enter {blocked} on the way to {inst}: `chmod o+x {blocked}` or use another --dir")


def up_java(name: str, d: Path, port: int | None, plugins: list[str], heap: str,
            settings: list[str]) -> dict:
    s = JAVA_SINKS[name]
    home = build_plugin_home(name, plugins)
    java = java_binary()
    inst = d / name
    for sub in ("config", "data", "logs", "tmp"):
        (inst / sub).mkdir(parents=True, exist_ok=True)
    ports_file = inst / "logs" / "http.ports"
    ports_file.unlink(missing_ok=True)
    (inst / "config" / s["config"]).write_text(
        f"cluster.name: leasehold-{name}\n"
        "node.name: node-1\n"
        "discovery.type: single-node\n"
        "network.host: 127.0.0.1\n"
        f"path.data: {inst / 'data'}\n"
        f"path.logs: {inst / 'logs'}\n"
        # 0: any free port, written to logs/http.ports.
        f"http.port: {port or 0}\n"
        "transport.port: 0\n"
        "node.portsfile: true\n"
        "action.auto_create_index: true\n"
        + "".join(f"{k}: {json.dumps(v)}\n" for k, v in (node_setting(s) for s in settings))
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
    logf = inst / f"{name}.log"
    logf.touch()
    own_for_nobody(d, inst)
    p = s["prop"]
    cmd = [
        java, f"-Xms{heap}", f"-Xmx{heap}", "-XX:+UseSerialGC", "-Djava.awt.headless=true",
        "-Dfile.encoding=UTF-8", "-Djna.nosys=true", "-Dio.netty.noUnsafe=true",
        "-Dio.netty.noKeySetOptimization=true", "-Dio.netty.recycler.maxCapacityPerThread=0",
        "-Dlog4j.shutdownHookEnabled=false", "-Dlog4j2.disable.jmx=true",
        f"-Djava.io.tmpdir={inst / 'tmp'}", "-Djava.locale.providers=SPI,COMPAT",
        f"-D{p}.path.home={home}", f"-D{p}.path.conf={inst / 'config'}",
        f"-D{p}.distribution.type=tar", f"-D{p}.bundled_jdk=false",
    ]
    if name == "es7":
        cmd.append("-Des.distribution.flavor=oss")
    cmd += ["-cp", f"{home}/lib/*", s["main"]]
    env = {**os.environ, "LIBFFI_TMPDIR": str(inst / "tmp"), "ES_TMPDIR": str(inst / "tmp")}
    if is_root():
        # setpriv execs: the recorded pid is the JVM's.
        cmd = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *cmd]
    started = time.monotonic()
    proc = start_logged(cmd, logf, inst, env)
    deadline = started + READY_TIMEOUT_S
    http_port = port
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise Failure(f"{s['product']} exited ({proc.returncode}) while starting; {logf}:\n{tail(logf)}")
        if http_port is None and ports_file.exists():
            text = ports_file.read_text().strip()
            if text:
                http_port = int(text.splitlines()[0].rsplit(":", 1)[1])
        if http_port:
            url = f"http://127.0.0.1:{http_port}"
            try:
                with urllib.request.urlopen(f"{url}/_cluster/health?wait_for_status=yellow&timeout=1s", timeout=5) as r:
                    if r.status == 200:
                        log(f"{name} ready on {url} in {time.monotonic() - started:.1f} s (pid {proc.pid})"
                            + (f" with {', '.join(plugins)}" if plugins else ""))
                        info = {
                            "pid": proc.pid, "stopped": False, "http_port": http_port, "url": url,
                            "product": s["product"], "version": s["version"], "home": str(home),
                            "dir": str(inst), "log": str(logf),
                        }
                        if plugins:
                            info["plugins"] = plugins
                        return info
            except (urllib.error.URLError, OSError, ValueError):
                pass
        time.sleep(0.2)
    give_up(proc)
    raise Failure(f"{s['product']} not ready within {READY_TIMEOUT_S:.0f} s; {logf}:\n{tail(logf)}")


def up_otelcol(d: Path, grpc_port: int | None, http_port: int | None) -> dict:
    """Starts the collector on the given ports, else on free ones. A free
    port is only free until the collector binds it: another process may
    take it in between, and the collector then exits with "address already
    in use"; it is started again on other free ports (ports given are
    kept, and the failure reported)."""
    binary = build_otelcol()
    inst = d / "otelcol"
    inst.mkdir(parents=True, exist_ok=True)
    given = {str(p) for p in (grpc_port, http_port) if p}
    for attempt in range(1, OTELCOL_PORT_ATTEMPTS + 1):
        try:
            return start_otelcol(binary, inst, grpc_port or free_port(), http_port or free_port())
        except PortTaken as e:
            if e.port.rsplit(":", 1)[-1] in given or attempt == OTELCOL_PORT_ATTEMPTS:
                raise Failure(str(e)) from None
            log(f"otelcol: {e.port} was taken before the collector bound it; starting it on other ports")
    raise Failure("unreachable")


class PortTaken(Exception):
    """The collector could not bind a port (another process took it)."""

    def __init__(self, message: str, port: str):
        super().__init__(message)
        self.port = port


def start_otelcol(binary: Path, inst: Path, grpc_port: int, http_port: int) -> dict:
    out = inst / "out.jsonl"
    config = inst / "config.yaml"
    # The file exporter's rotating writer (its default) writes each batch
    # straight to the file and appends to it after a restart; its plain
    # writer buffers (flush_interval) and truncates unless `append`.
    config.write_text(
        "receivers:\n"
        "  otlp:\n"
        "    protocols:\n"
        f"      grpc: {{endpoint: '127.0.0.1:{grpc_port}'}}\n"
        f"      http: {{endpoint: '127.0.0.1:{http_port}'}}\n"
        "exporters:\n"
        f"  file: {{path: '{out}', format: json, rotation: {{max_megabytes: 1024, max_backups: 1}}}}\n"
        "  debug: {verbosity: basic}\n"
        "service:\n"
        "  telemetry:\n"
        "    metrics: {level: none}\n"
        "  pipelines:\n"
        "    logs: {receivers: [otlp], exporters: [file, debug]}\n"
        "    metrics: {receivers: [otlp], exporters: [file, debug]}\n"
        "    traces: {receivers: [otlp], exporters: [file, debug]}\n"
    )
    logf = inst / "otelcol.log"
    started = time.monotonic()
    proc = start_logged([str(binary), "--config", f"file:{config}"], logf, inst)
    deadline = started + OTELCOL_READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            text = tail(logf)
            why = f"the collector exited ({proc.returncode}) while starting; {logf}:\n{text}"
            # This start's lines only: the log keeps earlier starts'.
            this_start = text.rsplit("---- sinks/up at ", 1)[-1]
            taken = re.search(r"listen tcp (\S+): bind: address already in use", this_start)
            if taken:
                raise PortTaken(why, taken.group(1))
            raise Failure(why)
        ready = True
        for port in (grpc_port, http_port):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
            except OSError:
                ready = False
        if ready:
            log(f"otelcol ready on 127.0.0.1:{grpc_port} (gRPC) and :{http_port} (HTTP) "
                f"in {time.monotonic() - started:.1f} s (pid {proc.pid})")
            return {
                "pid": proc.pid, "stopped": False, "grpc_port": grpc_port, "http_port": http_port,
                "grpc_endpoint": f"127.0.0.1:{grpc_port}", "http_endpoint": f"http://127.0.0.1:{http_port}",
                "output": str(out), "binary": str(binary), "dir": str(inst), "log": str(logf),
            }
        time.sleep(0.05)
    give_up(proc)
    raise Failure(f"the collector did not listen within {OTELCOL_READY_TIMEOUT_S:.0f} s; {logf}:\n{tail(logf)}")


def node_setting(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not re.fullmatch(r"[a-z][a-z0-9_.]*", key):
        raise Failure(f"--setting {text!r}: expected KEY=VALUE with a setting name such as http.max_content_length")
    return key, value


def up(name: str, d: Path, port: int | None, plugins: list[str], heap: str = "256m",
       settings: list[str] | None = None) -> None:
    for p in plugins:
        if PLUGINS[p] != name:
            raise Failure(f"plugin {p} is for {PLUGINS[p]}, not {name}")
    d.mkdir(parents=True, exist_ok=True)
    d = d.resolve()
    old = read_info(d, name)
    if alive(old.get("pid"), markers(old, d / name)):
        raise Failure(f"{name} already runs for {d} (pid {old['pid']}); `sinks/down {name} --dir {d}` first")
    if name == "otelcol":
        if settings:
            raise Failure("--setting is for opensearch and es7")
        info = up_otelcol(d, port or old.get("grpc_port"), old.get("http_port"))
    else:
        if not re.fullmatch(r"[1-9][0-9]*[mg]", heap):
            raise Failure(f"--heap {heap!r}: a size like 256m or 1g")
        info = up_java(name, d, port or old.get("http_port"), plugins, heap, settings or [])
    write_info(d, name, info)
    print(json.dumps(info))


def down(name: str, d: Path) -> None:
    d = d.resolve()
    info = read_info(d, name)
    pid = info.get("pid")
    m = markers(info, d / name)
    if alive(pid, m):
        started = time.monotonic()
        os.kill(pid, signal.SIGTERM)
        if not wait_exit(pid, m, STOP_TIMEOUT_S):
            log(f"{name} (pid {pid}) still runs {STOP_TIMEOUT_S:.0f} s after SIGTERM: SIGKILL")
            os.kill(pid, signal.SIGKILL)
            if not wait_exit(pid, m, KILL_TIMEOUT_S):
                raise Failure(f"{name} (pid {pid}) survived SIGKILL for {KILL_TIMEOUT_S:.0f} s")
        log(f"{name} (pid {pid}) stopped in {time.monotonic() - started:.1f} s")
    if info:
        info["pid"] = None
        info["stopped"] = True
        write_info(d, name, info)


def main() -> int:
    ap = argparse.ArgumentParser(prog="sinks", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="fetch/build what the cache lacks")
    b.add_argument("name", nargs="?", default="all", choices=[*NAMES, "all"])
    u = sub.add_parser("up", help="start a sink and wait until it is ready")
    u.add_argument("name", choices=NAMES)
    u.add_argument("--dir", required=True, type=Path)
    u.add_argument("--port", type=int, help="HTTP port (opensearch, es7) or OTLP/gRPC port (otelcol)")
    u.add_argument("--plugin", action="append", default=[], choices=sorted(PLUGINS),
                   help="also load this plugin (built from sinks/PLUGIN/ on first use); repeatable")
    u.add_argument("--heap", default="256m", help="Java heap of opensearch/es7, e.g. 1g (default 256m)")
    u.add_argument("--setting", action="append", default=[], metavar="KEY=VALUE",
                   help="a node setting of opensearch/es7, e.g. http.max_content_length=16kb; repeatable")
    dn = sub.add_parser("down", help="stop a sink started by `up`")
    dn.add_argument("name", choices=NAMES)
    dn.add_argument("--dir", required=True, type=Path)
    args = ap.parse_args()
    try:
        if args.cmd == "build":
            build(args.name)
        elif args.cmd == "up":
            up(args.name, args.dir, args.port, sorted(set(args.plugin)), args.heap, args.setting)
        else:
            down(args.name, args.dir)
    except Failure as e:
        log(str(e))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
