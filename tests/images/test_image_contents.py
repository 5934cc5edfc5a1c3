"""What the built images hold (`make images`; `make test` builds the CPU trainer and the
operator first): each runs as uid 1000 with a home, holds exactly its lock's packages plus
the local ones, passes `pip check`, and its entry point answers `--help`; a trainer image
imports TensorFlow and fits one step on the CPU. `TUNEOP_TEST_IMAGES` names the images
checked (default: the two `make test` builds); `make image-gpu` checks the GPU trainer.

Commands run inside the image with `buildah run` (chroot isolation), from the
image's own configuration: its user, working directory and environment.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from hack import image_locks, images

ROOT = Path(__file__).resolve().parents[2]
# name in hack/images.py → (the lock it installs, the local distributions it adds,
# the module its ENTRYPOINT runs).
IMAGES = {
    "trainer-cpu": ("cpu", {"tuneop-contract", "tuneop-trainer"}, "tuneop_trainer"),
    "trainer-gpu": ("gpu", {"tuneop-contract", "tuneop-trainer"}, "tuneop_trainer"),
    "operator": ("operator", {"tuneop-contract", "tuneop"}, "tuneop"),
}
CHECKED = os.environ.get("TUNEOP_TEST_IMAGES", "trainer-cpu,operator").split(",")
ONE_STEP_FIT = """
import numpy as np, tensorflow as tf, keras
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
model.compile("sgd", "mse")
h = model.fit(np.ones((8, 4)), np.ones((8, 1)), batch_size=8, epochs=1, verbose=0)
print("fit", tf.__version__, len(h.history["loss"]))
"""
# What the venv's own tools add beside the lock (python3 -m venv installs them).
VENV_TOOLS = {"pip", "setuptools"}


class ImageShell:
    """A working container of one image in tuneop's image storage."""

    def __init__(self, reference: str) -> None:
        self.reference = reference
        self.env = {"CONTAINERS_STORAGE_CONF": str(images.storage_conf()), "PATH": "/usr/bin:/bin"}
        proc = self._buildah("from", "--pull-never", reference)
        if proc.returncode != 0:
            pytest.fail(f"{reference} is not built ({proc.stderr.strip()}): run `make images`")
        self.container = proc.stdout.strip()

    def _buildah(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["buildah", *args], capture_output=True, text=True, env=self.env, timeout=300
        )

    def run(self, *cmd: str) -> subprocess.CompletedProcess[str]:
        return self._buildah("run", "--isolation", "chroot", "--network", "host",
                             self.container, "--", *cmd)  # fmt: skip

    def config(self) -> dict[str, object]:
        proc = self._buildah("inspect", "--type", "image", self.reference)
        assert proc.returncode == 0, proc.stderr
        config: dict[str, object] = json.loads(proc.stdout)["OCIv1"]["config"]
        return config

    def close(self) -> None:
        self._buildah("rm", self.container)


@pytest.fixture(scope="module", params=CHECKED)
def image(request: pytest.FixtureRequest) -> Iterator[tuple[str, ImageShell]]:
    reference = images.images(images.image_tag())[request.param].reference
    shell = ImageShell(reference)
    yield request.param, shell
    shell.close()


def test_runs_as_uid_1000(image: tuple[str, ImageShell]) -> None:
    name, shell = image
    assert shell.config().get("User") == "1000"
    proc = shell.run("sh", "-c", 'id -u; echo "$HOME"; touch "$HOME/.w" 2>&1 && echo writable')
    assert proc.returncode == 0 or not name.startswith("trainer"), proc.stdout + proc.stderr
    uid, home, *_ = proc.stdout.split()
    assert uid == "1000"
    if name.startswith("trainer"):
        # Keras and keras-tuner write under HOME (~/.keras); the trainer's WORKDIR is HOME.
        assert (home, proc.stdout.split()[-1]) == ("/home/tuneop", "writable")
        assert shell.config().get("WorkingDir") == "/home/tuneop"


def test_holds_exactly_its_lock_and_pip_check_is_clean(image: tuple[str, ImageShell]) -> None:
    name, shell = image
    lock, local, _ = IMAGES[name]
    proc = shell.run("python", "-m", "pip", "list", "--format=json")
    assert proc.returncode == 0, proc.stderr
    installed = {image_locks.canonical(p["name"]): p["version"] for p in json.loads(proc.stdout)}
    pins = image_locks.read_pins(image_locks.lock_path(lock))
    extra = set(installed) - set(pins) - local - VENV_TOOLS
    assert extra == set(), f"not in {lock}'s lock"
    differ = {n: (installed.get(n), v) for n, v in pins.items() if installed.get(n) != v}
    assert differ == {}
    assert local <= set(installed)
    check = shell.run("python", "-m", "pip", "check")
    assert check.returncode == 0 and "No broken requirements" in check.stdout, check.stdout


def test_the_entry_point_answers_help(image: tuple[str, ImageShell]) -> None:
    name, shell = image
    module = IMAGES[name][2]
    config = shell.config()
    assert config.get("Entrypoint") == ["python", "-m", module]
    proc = shell.run("python", "-m", module, "--help")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "usage:" in proc.stdout.lower()


def test_a_trainer_fits_one_step_on_the_cpu_and_the_operator_has_no_tensorflow(
    image: tuple[str, ImageShell],
) -> None:
    name, shell = image
    proc = shell.run("python", "-c", ONE_STEP_FIT)
    if not name.startswith("trainer"):
        assert proc.returncode != 0 and "No module named 'numpy'" in proc.stderr, proc.stderr
        return
    assert proc.returncode == 0, proc.stderr[-2000:]
    pins = image_locks.read_pins(image_locks.lock_path(IMAGES[name][0]))
    tensorflow = pins.get("tensorflow") or pins["tensorflow-cpu"]
    assert proc.stdout.split()[-3:] == ["fit", tensorflow, "1"]


DERIVED = ROOT / "manifests" / "samples" / "trainer-derived.Dockerfile"


def test_the_derived_trainer_recipe_adds_a_package_and_keeps_the_lock(tmp_path: Path) -> None:
    """manifests/samples/trainer-derived.Dockerfile built FROM the CPU trainer with the
    builder of `make images`: the added package imports beside TensorFlow, as uid 1000,
    and every package of the trainer's lock keeps its version."""
    base = images.images(images.image_tag())["trainer-cpu"].reference
    derived = "localhost/tuneop/trainer-derived:test"
    env = {"CONTAINERS_STORAGE_CONF": str(images.storage_conf()), "PATH": "/usr/bin:/bin"}
    built = subprocess.run(
        ["buildah", "bud", "--isolation", "chroot", "--network", "host", "--pull-never",
         "-f", str(DERIVED), "--build-arg", f"TRAINER={base}", "-t", derived, str(tmp_path)],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    shell = ImageShell(derived)
    try:
        probe = "import os, tabulate, tensorflow; print(os.getuid(), tabulate.__version__)"
        ran = shell.run("python", "-c", probe)
        assert ran.returncode == 0 and ran.stdout.split()[-2:] == ["1000", "0.9.0"], ran
        listed = shell.run("pip", "list", "--format", "json")
        assert listed.returncode == 0, listed.stderr
        installed = {image_locks.canonical(p["name"]): p["version"]
                     for p in json.loads(listed.stdout)}  # fmt: skip
        pins = image_locks.read_pins(image_locks.lock_path("cpu"))
        assert {n: installed.get(n) for n in pins} == pins
    finally:
        shell.close()
        subprocess.run(["buildah", "rmi", derived], capture_output=True, env=env)
