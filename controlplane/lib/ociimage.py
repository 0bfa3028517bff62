"""One-layer OCI image archives from files of this machine, for
`ctr images import`: no registry is reachable, so every image a test node
runs (the pod sandbox, busybox, the agent) is assembled here from host
files. Standard library only; the archives are reproducible (every time
stamp is 0).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_PATH = "PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"


@dataclass
class Image:
    """What goes into an image: host files copied to paths inside it,
    symlinks, empty directories and the run configuration."""

    name: str
    files: list[tuple[Path, str]] = field(default_factory=list)
    symlinks: list[tuple[str, str]] = field(default_factory=list)
    dirs: list[str] = field(default_factory=list)
    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)
    env: list[str] = field(default_factory=lambda: [DEFAULT_PATH])
    user: str = ""


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _layer(image: Image) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as t:
        made: set[str] = set()

        def parents(path: str) -> None:
            parts = path.strip("/").split("/")[:-1]
            for i in range(1, len(parts) + 1):
                d = "/".join(parts[:i])
                if d not in made:
                    info = tarfile.TarInfo(d)
                    info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
                    t.addfile(info)
                    made.add(d)

        for d in image.dirs:
            parents(d.rstrip("/") + "/x")
        for src, dest in image.files:
            parents(dest)
            data = src.read_bytes()
            info = tarfile.TarInfo(dest.lstrip("/"))
            info.size, info.mtime = len(data), 0
            info.mode = os.stat(src).st_mode & 0o7777
            t.addfile(info, io.BytesIO(data))
        for target, dest in image.symlinks:
            parents(dest)
            info = tarfile.TarInfo(dest.lstrip("/"))
            info.type, info.linkname, info.mtime = tarfile.SYMTYPE, target, 0
            t.addfile(info)
    return raw.getvalue()


def write(image: Image, out: Path) -> str:
    """Writes `image` as an OCI archive to `out`; returns its manifest digest."""
    layer_tar = _layer(image)
    gz = io.BytesIO()
    # Level 1: the archives are imported at once, on the same machine.
    with gzip.GzipFile(fileobj=gz, mode="wb", mtime=0, compresslevel=1) as g:
        g.write(layer_tar)
    layer = gz.getvalue()
    run = {"Entrypoint": image.entrypoint or None, "Cmd": image.cmd or None, "Env": image.env,
           "User": image.user or None, "WorkingDir": "/"}
    config = json.dumps({
        "architecture": "amd64", "os": "linux", "created": "1970-01-01T00:00:00Z",
        "config": {k: v for k, v in run.items() if v is not None},
        "rootfs": {"type": "layers", "diff_ids": [_digest(layer_tar)]},
        "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "controlplane/lib/ociimage.py"}],
    }, sort_keys=True).encode()
    manifest = json.dumps({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": _digest(config), "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": _digest(layer), "size": len(layer)}],
    }, sort_keys=True).encode()
    index = json.dumps({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": _digest(manifest), "size": len(manifest),
            "platform": {"architecture": "amd64", "os": "linux"},
            "annotations": {"io.containerd.image.name": image.name,
                            "org.opencontainers.image.ref.name": image.name.rsplit(":", 1)[-1]},
        }],
    }).encode()
    with tarfile.open(out, "w") as archive:
        def add(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            archive.addfile(info, io.BytesIO(data))

        add("oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        add("index.json", index)
        for data in (layer, config, manifest):
            add("blobs/sha256/" + _digest(data).split(":", 1)[1], data)
    return _digest(manifest)
