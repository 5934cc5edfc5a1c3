#!/usr/bin/env python3
"""Build the images from their Dockerfiles with buildah: no daemon, no registry (`make images`).

    python3 hack/images.py [--variants trainer-cpu,operator] [--registry R] [--tag T] [--push]

Published names: `<registry>/trainer:<tag>` (GPU), `<registry>/trainer:<tag>-cpu`,
`<registry>/operator:<tag>` (default registry docker.io/tuneop, tag the chart's
appVersion); `--push` pushes them with buildah (log in first: `buildah login <registry>`).

The Dockerfiles name a public base (``ARG BASE=python:3.11-slim``). No registry answers
here, so the base is made from Debian packages: a ``debootstrap --variant=minbase``
bookworm root file system with python3 and its venv module (Python 3.11, the images'
interpreter), committed as ``localhost/tuneop/base:bookworm-<key>``, and passed as BASE.
It carries this machine's trust store (``/usr/local/share/ca-certificates``), since the
package index is reached through it, and sets PIP_CERT to the system bundle.

Caching, keyed by what goes into an image: the base's key is its package list and the
trust store; an image's key is its base's key, its Dockerfile, its build arguments and
every file of its build context that it copies. An image whose ``io.tuneop.build-key``
label equals its key is not rebuilt; ``buildah bud --layers`` reuses unchanged layers
(the lock's, with TensorFlow) when only the code changed. Images and layers live in a
storage of their own under ``$TUNEOP_CACHE/containers``; each built image is also
written as a docker archive, ``$TUNEOP_CACHE/images/<name>-<key>.tar``, which the local
cluster's containerd imports. The last lines on stdout are ``<reference> <archive>``.

Stdlib only. Needs root (buildah's storage, debootstrap's chroot) and apt for the tools.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("TUNEOP_CACHE", Path.home() / ".cache" / "tuneop"))
STORAGE = CACHE / "containers"
ARCHIVES = CACHE / "images"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
DEBIAN_SUITE = "bookworm"
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates")
HOST_CAS = Path("/usr/local/share/ca-certificates")
SYSTEM_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
TOOLS = {"buildah": "buildah", "debootstrap": "debootstrap"}
KEY_LABEL = "io.tuneop.build-key"
# What never enters an image (the same as .dockerignore).
SKIPPED = re.compile(r"(^|/)(__pycache__|[^/]*\.egg-info|build)(/|$)|\.pyc$")


class BuildError(RuntimeError):
    """A step failed; the message says which and how to see why."""


@dataclass(frozen=True)
class Image:
    """One image of the product: its reference, Dockerfile, build arguments and the
    paths of the build context it copies."""

    name: str
    reference: str
    dockerfile: str
    inputs: tuple[str, ...]
    args: dict[str, str] = field(default_factory=dict)


def image_tag() -> str:
    """The chart's appVersion, the tag every image carries."""
    text = (ROOT / "charts" / "tuneop" / "Chart.yaml").read_text()
    match = re.search(r'^appVersion:\s*"?([^"\s]+)"?\s*$', text, re.MULTILINE)
    if match is None:
        raise BuildError("charts/tuneop/Chart.yaml has no appVersion")
    return match.group(1)


def images(tag: str) -> dict[str, Image]:
    trainer = ("trainer_image/Dockerfile", "contract", "trainer_image", ".dockerignore")
    return {
        "trainer-cpu": Image(
            "trainer-cpu",
            f"docker.io/tuneop/trainer:{tag}-cpu",
            "trainer_image/Dockerfile",
            (*trainer, "requirements/trainer-cpu.lock"),
            {"VARIANT": "cpu"},
        ),
        "trainer-gpu": Image(
            "trainer-gpu",
            f"docker.io/tuneop/trainer:{tag}",
            "trainer_image/Dockerfile",
            (*trainer, "requirements/trainer-gpu.lock"),
            {"VARIANT": "gpu"},
        ),
        "operator": Image(
            "operator",
            f"docker.io/tuneop/operator:{tag}",
            "operator/Dockerfile",
            ("operator/Dockerfile", "contract", "operator", "requirements/operator.lock",
             ".dockerignore"),
        ),
        # The local cluster's pod sandbox (test infrastructure, never shipped).
        "pause": Image(
            "pause",
            f"docker.io/tuneop/pause:{tag}",
            "tests/localcluster/kubelet/pause.Dockerfile",
            ("tests/localcluster/kubelet/pause.Dockerfile",),
        ),
    }  # fmt: skip


def run(cmd: list[str], what: str, log: Path | None = None) -> str:
    """Run a step; its output goes to `log` when given (it can be long), else is returned."""
    env = {**os.environ, "CONTAINERS_STORAGE_CONF": str(storage_conf())}
    if log is None:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            raise BuildError(f"{what} failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
        return proc.stdout
    with log.open("w") as out:
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, text=True, env=env)
    if proc.returncode != 0:
        tail = "".join(log.read_text().splitlines(keepends=True)[-25:])
        raise BuildError(f"{what} failed ({proc.returncode}); the end of {log}:\n{tail}")
    return ""


def storage_conf() -> Path:
    """A containers-storage configuration of our own, so the images and their layer cache
    live in the tuneop cache and never mix with the machine's podman or buildah."""
    conf = STORAGE / "storage.conf"
    if not conf.exists():
        STORAGE.mkdir(parents=True, exist_ok=True)
        conf.write_text(
            '[storage]\ndriver = "overlay"\n'
            f'graphroot = "{STORAGE / "storage"}"\n'
            f'runroot = "/run/tuneop-containers-{digest(str(STORAGE).encode())[:8]}"\n'
        )  # one runroot per storage: its lock and mount state belong to that graphroot
    return conf


def ensure_tools() -> None:
    """Debian's buildah and debootstrap, installed when missing (as hack/prometheus.sh)."""
    missing = [pkg for cmd, pkg in TOOLS.items() if shutil.which(cmd) is None]
    if not missing:
        return
    if os.geteuid() != 0:
        raise BuildError(f"images: {', '.join(missing)} missing and not root; install them")
    print(f"images: installing Debian's {' '.join(missing)}", file=sys.stderr)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *missing]):
        if subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL).returncode != 0:
            raise BuildError(f"images: {' '.join(cmd)} failed")


def digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()[:16]


def base_key() -> str:
    cas = sorted(HOST_CAS.glob("*.crt")) if HOST_CAS.is_dir() else []
    parts = [DEBIAN_SUITE.encode(), " ".join(BASE_PACKAGES).encode()]
    return digest(*parts, *(p.name.encode() + p.read_bytes() for p in cas))


def context_files(inputs: tuple[str, ...]) -> list[Path]:
    files: list[Path] = []
    for item in inputs:
        path = ROOT / item
        found = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        files += [p for p in found if not SKIPPED.search(str(p.relative_to(ROOT)))]
    return files


def image_key(image: Image, base: str) -> str:
    args = " ".join(f"{k}={v}" for k, v in sorted(image.args.items()))
    files = context_files(image.inputs)
    contents = (str(p.relative_to(ROOT)).encode() + b"\0" + p.read_bytes() for p in files)
    return digest(base.encode(), args.encode(), *contents)


def label_of(reference: str) -> str | None:
    """The build key an image in our storage carries, or None when it is not there."""
    try:
        out = run(
            ["buildah", "inspect", "--type", "image", "--format",
             f'{{{{index .OCIv1.Config.Labels "{KEY_LABEL}"}}}}',
             reference],
            "inspect",
        )  # fmt: skip
    except BuildError:
        return None
    return out.strip() or None


def make_base(key: str) -> str:
    """The Debian base image (debootstrap), built once per key."""
    reference = f"localhost/tuneop/base:{DEBIAN_SUITE}-{key}"
    if label_of(reference) == key:
        return reference
    ARCHIVES.mkdir(parents=True, exist_ok=True)
    log = ARCHIVES / "base.log"
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="rootfs-", dir=ARCHIVES) as tmp:
        rootfs = Path(tmp) / "rootfs"
        run(
            ["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}",
             DEBIAN_SUITE, str(rootfs), DEBIAN_MIRROR],
            "debootstrap", log,
        )  # fmt: skip
        trust_host_cas(rootfs)
        commit_rootfs(rootfs, reference, key)
    print(f"images: base {reference} in {time.monotonic() - started:.0f} s", file=sys.stderr)
    return reference


def trust_host_cas(rootfs: Path) -> None:
    if HOST_CAS.is_dir():
        for ca in HOST_CAS.glob("*.crt"):
            shutil.copy2(ca, rootfs / "usr/local/share/ca-certificates" / ca.name)
    run(["chroot", str(rootfs), "update-ca-certificates"], "update-ca-certificates")
    for junk in ("var/lib/apt/lists", "var/cache/apt/archives"):
        for item in (rootfs / junk).glob("*"):
            if item.is_file():
                item.unlink()


def commit_rootfs(rootfs: Path, reference: str, key: str) -> None:
    container = run(["buildah", "from", "scratch"], "buildah from scratch").strip()
    try:
        mount = Path(run(["buildah", "mount", container], "buildah mount").strip())
        run(["cp", "-a", f"{rootfs}/.", str(mount)], "copy the root file system")
        run(
            ["buildah", "config", "--env", f"PIP_CERT={SYSTEM_BUNDLE}",
             "--env", "LANG=C.UTF-8", "--cmd", "/bin/bash", "--label", f"{KEY_LABEL}={key}",
             container],
            "buildah config",
        )  # fmt: skip
        run(["buildah", "commit", "--rm", container, reference], "buildah commit")
    except BaseException:
        subprocess.run(["buildah", "rm", container], capture_output=True)
        raise


def build(image: Image, base: str, key: str) -> Path:
    """Build `image` unless the storage holds it at `key`; its docker archive."""
    archive = ARCHIVES / f"{image.name}-{key}.tar"
    if label_of(image.reference) != key:
        started = time.monotonic()
        args = [
            a for k, v in {**image.args, "BASE": base}.items() for a in ("--build-arg", f"{k}={v}")
        ]
        run(
            ["buildah", "bud", "--layers", "--isolation", "chroot", "--network", "host",
             "-f", image.dockerfile, *args, "--label", f"{KEY_LABEL}={key}",
             "-t", image.reference, "."],
            f"building {image.reference}", ARCHIVES / f"{image.name}.log",
        )  # fmt: skip
        print(f"images: {image.reference} built in {time.monotonic() - started:.0f} s",
              file=sys.stderr)  # fmt: skip
        archive.unlink(missing_ok=True)
    if not archive.exists():
        for old in ARCHIVES.glob(f"{image.name}-*.tar"):
            old.unlink()
        partial = archive.with_suffix(".partial")
        partial.unlink(missing_ok=True)
        run(["buildah", "push", image.reference, f"docker-archive:{partial}:{image.reference}"],
            f"exporting {image.reference}")  # fmt: skip
        partial.rename(archive)
    return archive


def built_archive(name: str) -> tuple[str, Path]:
    """The reference and docker archive of image `name` as the work tree builds it now;
    BuildError (naming `make images-cpu`) when that build has not been made."""
    image = images(image_tag())[name]
    archive = ARCHIVES / f"{name}-{image_key(image, base_key())}.tar"
    if not archive.is_file():
        raise BuildError(
            f"{image.reference} is not built for this work tree ({archive.name} missing): "
            "run `make images-cpu`"
        )
    return image.reference, archive


SHIPPED = ("trainer-gpu", "trainer-cpu", "operator")
DEFAULT_REGISTRY = "docker.io/tuneop"


def published(image: Image, registry: str, tag: str) -> str:
    """`image`'s name in `registry` (a repository prefix: `<registry>/trainer:<tag>[-cpu]`,
    `<registry>/operator:<tag>`); the local cluster's pause keeps its own."""
    if image.name not in SHIPPED:
        return image.reference
    repository, _, canonical_tag = image.reference.rpartition(":")
    suffix = "-cpu" if canonical_tag.endswith("-cpu") else ""
    return f"{registry.rstrip('/')}/{repository.rsplit('/', 1)[1]}:{tag}{suffix}"


def publish(image: Image, reference: str, push: bool) -> None:
    """Tag the built image as `reference` and, with `push`, push it there (buildah
    push: credentials from `buildah login` or REGISTRY_AUTH_FILE)."""
    if reference != image.reference:
        run(["buildah", "tag", image.reference, reference], f"tagging {reference}")
    if push:
        print(f"images: pushing {reference}", file=sys.stderr)
        run(["buildah", "push", reference, f"docker://{reference}"], f"pushing {reference}")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default="trainer-cpu,trainer-gpu,operator")
    parser.add_argument(
        "--registry", default=DEFAULT_REGISTRY, help="prefix of the published names (%(default)s)"
    )
    parser.add_argument("--tag", default="", help="their tag (default: the chart's appVersion)")
    parser.add_argument("--push", action="store_true", help="push them to the registry")
    return parser


def main(argv: list[str]) -> int:
    opts = _parser().parse_args(argv)
    catalog = images(image_tag())
    wanted = [v for v in opts.variants.split(",") if v]
    unknown = [v for v in wanted if v not in catalog]
    if unknown:
        print(f"images: unknown {unknown}; one of {sorted(catalog)}", file=sys.stderr)
        return 2
    if opts.push and not set(wanted) <= set(SHIPPED):
        print(f"images: only {', '.join(SHIPPED)} are pushed", file=sys.stderr)
        return 2
    os.chdir(ROOT)
    try:
        ensure_tools()
        key = base_key()
        base = make_base(key)
        built = [(catalog[n], build(catalog[n], base, image_key(catalog[n], key))) for n in wanted]
        names = [published(image, opts.registry, opts.tag or image_tag()) for image, _ in built]
        for (image, _), reference in zip(built, names, strict=True):
            publish(image, reference, opts.push)
    except BuildError as exc:
        print(f"images: {exc}", file=sys.stderr)
        return 1
    for (_, archive), reference in zip(built, names, strict=True):
        print(f"{reference} {archive}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
