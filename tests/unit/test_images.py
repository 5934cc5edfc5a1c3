"""The Dockerfiles (never built here; `make lint` runs hadolint on them).

The local node agent runs a container without ``command`` as its image's ENTRYPOINT and
CMD, from ``IMAGE_ENTRYPOINTS``: the two must say the same thing.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

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
