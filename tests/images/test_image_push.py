"""`make push` for real, to a real registry on this machine: Debian's docker-registry (the
CNCF distribution registry, `make registry`) on a loopback port, in plain HTTP and so
named insecure in a registries.conf of the test's own (CONTAINERS_REGISTRIES_CONF; a
user's registry speaks HTTPS, after `buildah login`). hack/images.py --push, as `make
push REGISTRY=… TAG=…` runs it, for the operator image: the trainers take the same path,
and pushing their gigabytes would cost the suite a minute. The registry then lists the
tag, and the manifest it serves names the built image's config.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from hack import images
from tests.localcluster.controlplane import free_port

ROOT = Path(__file__).resolve().parents[2]
MANIFEST_TYPES = ", ".join((
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
))  # fmt: skip


def _get(url: str, accept: str = "application/json") -> tuple[dict[str, str], bytes]:
    request = urllib.request.Request(url, headers={"Accept": accept})
    with urllib.request.urlopen(request, timeout=10) as response:
        return dict(response.headers), response.read()


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[str]:
    """host:port of a registry of our own, once it answers as one."""
    port = free_port()
    config = tmp_path / "registry.yml"
    config.write_text(
        "version: 0.1\n"
        f"storage: {{filesystem: {{rootdirectory: {tmp_path / 'blobs'}}}}}\n"
        f"http: {{addr: '127.0.0.1:{port}'}}\n"
    )
    with open(tmp_path / "registry.log", "wb") as log:
        proc = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=log,
                                stderr=subprocess.STDOUT)  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, (tmp_path / "registry.log").read_text()
            try:
                headers, _ = _get(f"http://127.0.0.1:{port}/v2/")
                # ours: a distribution registry, and our process still the one listening
                if headers.get("Docker-Distribution-Api-Version") == "registry/2.0":
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "registry.log").read_text()
            time.sleep(0.2)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_push_publishes_the_built_image_under_the_registry_and_tag(
    registry: str, tmp_path: Path
) -> None:
    conf = tmp_path / "registries.conf"
    conf.write_text(f'[[registry]]\nlocation = "{registry}"\ninsecure = true\n')
    env = {**os.environ, "CONTAINERS_REGISTRIES_CONF": str(conf)}
    cmd = [sys.executable, str(ROOT / "hack" / "images.py"), "--variants", "operator",
           "--registry", f"{registry}/ml", "--tag", "9.9.9", "--push"]  # fmt: skip
    reference = f"{registry}/ml/operator:9.9.9"
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.split()[0] == reference, done.stdout
        _, tags = _get(f"http://{registry}/v2/ml/operator/tags/list")
        assert json.loads(tags) == {"name": "ml/operator", "tags": ["9.9.9"]}
        _, manifest = _get(f"http://{registry}/v2/ml/operator/manifests/9.9.9", MANIFEST_TYPES)
        local = images.images(images.image_tag())["operator"].reference
        built = images.run(["buildah", "images", "--no-trunc", "--format", "{{.ID}}", local], "id")
        config = json.loads(manifest)["config"]["digest"]
        ids = {line.removeprefix("sha256:") for line in built.split()}  # one per name of it
        assert ids == {config.removeprefix("sha256:")}, (ids, manifest)
    finally:  # the local name the push tagged, out of the image store again
        with contextlib.suppress(images.BuildError):
            images.run(["buildah", "rmi", reference], "untag")
