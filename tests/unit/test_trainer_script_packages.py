"""spec.script.requirements as the trainer installs it, with the real pip against a
`--find-links` directory of hand-made wheels standing for the index (tests/wheels.py):
only what the image lacks, once per claim, by version and hash; refusals name the field."""

from __future__ import annotations

import importlib.metadata
import json
import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from tuneop_contract import PACKAGES_DIR
from tuneop_contract.spec import SpecError
from tuneop_trainer.modes import script_packages

from tests.wheels import write_wheel

FIELD = "spec.script.requirements"


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A local index: pip finds packages only in this directory."""
    links = tmp_path / "index"
    links.mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    return links


def _requirements(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "requirements.txt"
    path.write_text(text)
    return path


def test_what_the_image_lacks_is_installed_once_per_claim(
    index: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_wheel(index, "tuneop_extra", "1.2.0", "ANSWER = 42\n")
    numpy = importlib.metadata.version("numpy")  # in the image: satisfied, not installed
    req = _requirements(tmp_path, f"tuneop_extra==1.2.0\nnumpy>={numpy}\n")
    claim = tmp_path / "claim"
    target = script_packages.install(req, claim, FIELD)
    assert target.parent == claim / PACKAGES_DIR
    assert (target / "tuneop_extra" / "__init__.py").read_text() == "ANSWER = 42\n"
    record = json.loads((target / script_packages.REPORT_FILE).read_text())
    assert record == {"tuneop_extra": "1.2.0"}
    assert [p.name for p in target.parent.iterdir()] == [target.name]  # no staging left

    def no_pip(*args: object, **kwargs: object) -> None:
        raise AssertionError("pip ran again")

    monkeypatch.setattr(subprocess, "run", no_pip)
    assert script_packages.install(req, claim, FIELD) == target  # the next pod: as is


def test_a_requirement_that_would_change_the_image_is_refused(index: Path, tmp_path: Path) -> None:
    write_wheel(index, "numpy", "0.0.1", "")
    req = _requirements(tmp_path, "numpy==0.0.1\n")
    with pytest.raises(SpecError) as err:
        script_packages.install(req, tmp_path / "claim", FIELD)
    have = importlib.metadata.version("numpy")
    assert str(err.value).startswith(f"{FIELD}: would change the image's own numpy {have}")
    assert not (tmp_path / "claim" / PACKAGES_DIR).exists() or not any(
        (tmp_path / "claim" / PACKAGES_DIR).iterdir()
    )


def test_a_package_the_index_has_not_is_the_files_fault(index: Path, tmp_path: Path) -> None:
    req = _requirements(tmp_path, "no-such-package-here==1.0\n")
    with pytest.raises(SpecError, match=f"^{FIELD}: pip cannot install it: .*no-such-package"):
        script_packages.install(req, tmp_path / "claim", FIELD)


def test_an_index_that_does_not_answer_is_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Retried by the operator (exit 1), not a spec error: nothing listens on port 9."""
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_RETRIES", "1")  # pip says why only when it retries
    monkeypatch.setenv("PIP_TIMEOUT", "2")
    req = _requirements(tmp_path, "tuneop_extra==1.2.0\n")
    with pytest.raises(script_packages.PackagesError, match="the package index did not answer"):
        script_packages.install(req, tmp_path / "claim", FIELD)


def _target(req: Path, claim: Path) -> Path:
    image = script_packages._image_packages()
    return claim / PACKAGES_DIR / script_packages._key(req.read_text(), image)


def test_another_cpu_architecture_installs_its_own(
    index: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Wheels are built per architecture: arm64 and x86-64 pods sharing a claim must
    not import each other's."""
    req = _requirements(tmp_path, "tuneop_extra==1.2.0\n")
    here = _target(req, tmp_path / "claim")
    monkeypatch.setattr(script_packages.platform, "machine", lambda: "aarch64")
    assert _target(req, tmp_path / "claim") != here


def test_a_killed_install_is_cleared_by_the_pods_next_start(index: Path, tmp_path: Path) -> None:
    """A SIGKILL during pip leaves a staging directory: the same pod's next start removes
    its own, any pod one a day old; another pod's install under way is left alone."""
    write_wheel(index, "tuneop_extra", "1.2.0", "ANSWER = 42\n")
    req = _requirements(tmp_path, "tuneop_extra==1.2.0\n")
    claim = tmp_path / "claim"
    key = _target(req, claim).name
    packages = claim / PACKAGES_DIR
    own = packages / f".{key}.{socket.gethostname()}.dead0000"
    other = packages / f".{key}.another-pod.busy0000"
    old = packages / ".0123456789abcdef.gone-pod.old00000"
    for staging in (own, other, old):
        (staging / "half").mkdir(parents=True)
    day_ago = time.time() - script_packages.STALE_STAGING_SECONDS - 60
    os.utime(old, (day_ago, day_ago))
    target = script_packages.install(req, claim, FIELD)
    assert sorted(p.name for p in packages.iterdir()) == sorted([target.name, other.name])


def test_what_is_installed_is_what_was_resolved_by_hash(
    index: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wheel changing on the index between the resolve and the install (a
    republished version, a tampered mirror) fails the install: each pinned line carries
    the hash the resolver saw (pip's hash-checking mode), and nothing is left on the
    claim."""
    wheel = write_wheel(index, "tuneop_extra", "1.2.0", "ANSWER = 42\n")
    req = _requirements(tmp_path, "tuneop_extra==1.2.0\n")
    resolve = script_packages._resolve

    def then_republished(requirements: Path, field: str) -> dict[str, Any]:
        planned = resolve(requirements, field)
        wheel.unlink()
        write_wheel(index, "tuneop_extra", "1.2.0", "ANSWER = 666\n")
        return planned

    monkeypatch.setattr(script_packages, "_resolve", then_republished)
    with pytest.raises(script_packages.PackagesError, match="HASHES"):
        script_packages.install(req, tmp_path / "claim", FIELD)
    assert not any((tmp_path / "claim" / PACKAGES_DIR).iterdir())
