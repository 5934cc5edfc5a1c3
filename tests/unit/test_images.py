"""The Dockerfiles (`make lint` runs hadolint on them; tests/images checks what they
build) and the names the images are published under.

The local node agent runs a container without ``command`` as its image's ENTRYPOINT and
CMD, from ``IMAGE_ENTRYPOINTS``: the two must say the same thing.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from hack.images import images, published
from tests.localcluster.nodeagent.podspec import IMAGE_ENTRYPOINTS

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILES = {
    "tuneop/trainer": "trainer_image/Dockerfile",
    "tuneop/operator": "operator/Dockerfile",
}


def _exec_form(dockerfile: str, instruction: str) -> list[str]:
    lines = re.findall(rf"^{instruction} (\[.*\])$", dockerfile, re.MULTILINE)
    return json.loads(lines[-1]) if lines else []


@pytest.mark.parametrize("image", sorted(DOCKERFILES))
def test_entrypoints_match_the_node_agent(image: str) -> None:
    dockerfile = (ROOT / DOCKERFILES[image]).read_text()
    entrypoint, cmd = IMAGE_ENTRYPOINTS[image]
    assert _exec_form(dockerfile, "ENTRYPOINT") == entrypoint
    assert _exec_form(dockerfile, "CMD") == cmd


def test_trainer_image_installs_its_lock() -> None:
    dockerfile = (ROOT / "trainer_image" / "Dockerfile").read_text()
    assert re.search(r"^ARG VARIANT=gpu$", dockerfile, re.MULTILINE)
    assert "pip install --no-deps -r requirements/trainer-${VARIANT}.lock" in dockerfile
    assert "pip install --no-deps ./contract ./trainer_image" in dockerfile
    for variant in ("gpu", "cpu"):
        assert (ROOT / "requirements" / f"trainer-{variant}.lock").is_file()


def test_published_names_follow_the_registry_and_tag() -> None:
    catalog = images("0.1.0")
    names = {n: published(catalog[n], "registry.example.com/ml/", "1.2") for n in catalog}
    assert names == {
        "trainer-gpu": "registry.example.com/ml/trainer:1.2",
        "trainer-cpu": "registry.example.com/ml/trainer:1.2-cpu",
        "operator": "registry.example.com/ml/operator:1.2",
        "pause": "docker.io/tuneop/pause:0.1.0",  # test infrastructure, never published
    }
    assert published(catalog["operator"], "docker.io/tuneop", "0.1.0") == (
        catalog["operator"].reference
    )
