"""The release binary of an earlier commit, for benchmarks that print the
change beside the current build: built once per commit into
`${XDG_CACHE_HOME:-~/.cache}/leasehold/bench/agent-<sha>/` from a
detached worktree (the repository's own checkout is not touched)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, check=True, capture_output=True, text=True).stdout.strip()


def baseline_binary(rev: str) -> Path:
    """The release binary of REV, built once into a cache keyed by its sha."""
    sha = git("rev-parse", "--verify", f"{rev}^{{commit}}")
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "leasehold" / "bench"
    binary = base / f"agent-{sha}" / "leasehold"
    if binary.exists():
        return binary
    tree = Path(tempfile.mkdtemp(prefix="leasehold-bench-baseline-"))
    print(f"bench: building the baseline {sha[:12]} (once; cached at {binary.parent})", file=sys.stderr, flush=True)
    try:
        git("worktree", "add", "--detach", str(tree / "src"), sha)
        subprocess.run(["cargo", "build", "--release", "--locked", "-p", "leasehold",
                        "--target-dir", str(base / "target")], cwd=tree / "src", check=True)
        binary.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(base / "target" / "release" / "leasehold", binary)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree / "src")], cwd=REPO,
                       capture_output=True)
        shutil.rmtree(tree, ignore_errors=True)
    return binary
