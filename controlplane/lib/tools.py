#!/usr/bin/env python3
"""Build the Kubernetes client tools the tests run: kubectl and helm.

Both are compiled from the Go module proxy at pinned versions and cached
outside the repository, one directory per tool and cache key, so only the
first build on a machine (or after a version or wrapper change) compiles
anything. Only the Python standard library and the `go` command are used.

  kubectl   the `kubectl` wrapper module next to this directory: its main
            runs k8s.io/kubectl's root command (KUBECTL_VERSION)
  helm      `go install helm.sh/helm/v4/cmd/helm@HELM_VERSION`

Subcommands (the shell wrapper `controlplane/tools` calls these; the Rust
testkit calls `build NAME`):

  build [kubectl|helm|all]   build what the cache lacks (default: all) and
                             print `NAME PATH` per tool on stdout
  path NAME                  print the cached path; exit 1 if not built
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

# The control plane's script, next to this one: the cache, the Go check,
# the failure type and the command runner are shared with it.
from controlplane import Failure, cache_base, check_go, run_command

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ("kubectl", "helm")

KUBECTL_VERSION = "v1.36.3"
KUBECTL_DIR = ROOT / "kubectl"

HELM_VERSION = "v4.3.2"
HELM_PACKAGE = "helm.sh/helm/v4/cmd/helm"


def log(msg: str) -> None:
    print(f"tools: {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- recipes


def kubectl_ldflags() -> str:
    """Version stamps `kubectl version` reads (a plain `go build` leaves the
    placeholder `v0.0.0-master`)."""
    major, minor = KUBECTL_VERSION.lstrip("v").split(".")[:2]
    flags = ["-s", "-w"]
    for pkg in ("k8s.io/client-go/pkg/version", "k8s.io/component-base/version"):
        flags += [
            f"-X {pkg}.gitVersion={KUBECTL_VERSION}",
            f"-X {pkg}.gitMajor={major}",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
            f"-X {pkg}.buildDate=1970-01-01T00:00:00Z",
        ]
    return " ".join(flags)


def helm_ldflags() -> str:
    return f"-s -w -X helm.sh/helm/v4/internal/version.version={HELM_VERSION}"


def digest(parts: list[tuple[str, bytes]]) -> str:
    h = hashlib.sha256()
    for name, data in parts:
        h.update(f"{name}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()[:12]


def wrapper_files(d: Path) -> list[tuple[str, bytes]]:
    out = []
    for f in ("go.mod", "go.sum", "main.go"):
        p = d / f
        out.append((f"{d.name}/{f}", p.read_bytes() if p.exists() else b""))
    return out


def cache_key(name: str) -> str:
    """Changes whenever the pinned version, the wrapper module or the flags
    the binary is built with change."""
    if name == "kubectl":
        parts = wrapper_files(KUBECTL_DIR) + [("ldflags", kubectl_ldflags().encode())]
        return f"kubectl-{KUBECTL_VERSION}_{digest(parts)}"
    parts = [("package", HELM_PACKAGE.encode()), ("ldflags", helm_ldflags().encode())]
    return f"helm-{HELM_VERSION}_{digest(parts)}"


def cache_root() -> Path:
    return cache_base() / "tools"


def binary(name: str) -> Path:
    return cache_root() / cache_key(name) / name


# ---------------------------------------------------------------- building


def go_env() -> dict[str, str]:
    # Static binaries, and no go.work of an enclosing directory in the way.
    return {**os.environ, "CGO_ENABLED": "0", "GOWORK": "off"}


def run_go(cmd: list[str], cwd: Path, env: dict[str, str], what: str, fix: str) -> None:
    started = time.monotonic()
    # Go's own output goes to stderr: stdout carries only `NAME PATH` lines.
    res = subprocess.run(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=sys.stderr)
    if res.returncode != 0:
        raise Failure(f"{what} failed: `{' '.join(cmd[:2])} ...` exited {res.returncode} "
                      f"(Go's errors are above). {fix}")
    log(f"{what} took {time.monotonic() - started:.0f} s")


def build_kubectl(dest: Path) -> None:
    tmp = dest.with_name(dest.name + ".tmp")
    cmd = ["go", "build", "-trimpath", "-buildvcs=false", "-mod=readonly",
           "-ldflags", kubectl_ldflags(), "-o", str(tmp), "."]
    run_go(cmd, KUBECTL_DIR, go_env(), f"building kubectl {KUBECTL_VERSION}",
           "If a module download was refused (403/404/410), pin versions the module proxy "
           "serves in controlplane/kubectl/go.mod; if go.sum lacks an entry, run `go mod tidy` "
           "in controlplane/kubectl.")
    tmp.rename(dest)


def build_helm(dest: Path) -> None:
    # `go install` writes straight into GOBIN; a scratch GOBIN keeps a
    # half-written binary from ever sitting at `dest`.
    gobin = dest.parent / ".gobin.tmp"
    shutil.rmtree(gobin, ignore_errors=True)
    gobin.mkdir()
    cmd = ["go", "install", "-trimpath", "-buildvcs=false",
           "-ldflags", helm_ldflags(), f"{HELM_PACKAGE}@{HELM_VERSION}"]
    try:
        run_go(cmd, gobin, {**go_env(), "GOBIN": str(gobin)}, f"building helm {HELM_VERSION}",
               f"Check that the Go module proxy (GOPROXY) is reachable and serves "
               f"helm.sh/helm/v4 {HELM_VERSION} and the versions its go.mod requires.")
        built = gobin / "helm"
        if not built.exists():
            raise Failure(f"`go install {HELM_PACKAGE}@{HELM_VERSION}` succeeded but left no helm "
                          "binary in GOBIN; is GOOS or GOARCH set for another platform? Unset them and retry")
        built.rename(dest)
    finally:
        shutil.rmtree(gobin, ignore_errors=True)


BUILDERS = {"kubectl": build_kubectl, "helm": build_helm}


def build(name: str) -> Path:
    """Builds `name` into its versioned cache unless it is there already.
    One build at a time per cache: a second caller waits, then finds it."""
    dest = binary(name)
    if dest.exists():
        return dest
    check_go(f"kubectl {KUBECTL_VERSION} and helm {HELM_VERSION}")
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        lock = open(cache_root() / ".build.lock", "w")
    except OSError as e:
        raise Failure(f"cannot create the tool cache {dest.parent}: {e}; "
                      "set XDG_CACHE_HOME to a writable directory")
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if dest.exists():
            return dest
        version = KUBECTL_VERSION if name == "kubectl" else HELM_VERSION
        log(f"building {name} {version} into {dest.parent}; the first build takes a few minutes")
        BUILDERS[name](dest)
    return dest


# ---------------------------------------------------------------- commands


def cmd_build(args: argparse.Namespace) -> None:
    names = TOOLS if args.name == "all" else (args.name,)
    for name in names:
        print(f"{name} {build(name)}", flush=True)


def cmd_path(args: argparse.Namespace) -> None:
    dest = binary(args.name)
    if not dest.exists():
        raise Failure(f"{args.name} is not built (no {dest}); run `controlplane/tools build {args.name}`")
    print(dest)


def main() -> int:
    p = argparse.ArgumentParser(prog="tools", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build what the cache lacks; print `NAME PATH` per tool")
    b.add_argument("name", nargs="?", default="all", choices=[*TOOLS, "all"])
    b.set_defaults(fn=cmd_build)
    pa = sub.add_parser("path", help="print the cached path of a built tool")
    pa.add_argument("name", choices=TOOLS)
    pa.set_defaults(fn=cmd_path)
    return run_command(p.parse_args(), log)


if __name__ == "__main__":
    sys.exit(main())
