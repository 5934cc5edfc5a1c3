"""The images' locks, requirements/{trainer-gpu,trainer-cpu,operator}.lock (hack/image_locks.py).

Offline: every line pinned, the versions the dev venv also has agree with dev.lock, one
TensorFlow per trainer lock and none in the operator's, each lock satisfies its package's
pyproject.toml. Online (`slow`: it
asks PyPI, about 5-10 s a lock): pip's resolver, with dependencies, accepts exactly the
lock's pins and adds nothing, fetching metadata only (the CUDA wheels are never
downloaded); a conflicting pin is refused.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.requirements import Requirement

from hack import image_locks as tl

# The packages both the dev venv and the image have that the trainer names itself.
SHARED = (
    "keras",
    "keras-tuner",
    "numpy",
    "scipy",
    "scikit-learn",
    "tensorboard",
    "prometheus-client",
    "pyyaml",
)
TENSORFLOW = {"gpu": "tensorflow", "cpu": "tensorflow-cpu"}


@pytest.fixture(scope="module")
def dev_pins() -> dict[str, str]:
    return tl.read_pins(tl.DEV_LOCK)


@pytest.mark.parametrize("lock", tl.LOCKS)
def test_every_line_is_pinned(lock: str) -> None:
    pins = tl.read_pins(tl.lock_path(lock))  # raises on anything but name==version
    assert len(pins) > 20


def test_operator_lock_agrees_with_dev_lock_and_has_no_tensorflow(
    dev_pins: dict[str, str],
) -> None:
    pins = tl.read_pins(tl.lock_path("operator"))
    assert {"kopf", "kubernetes", "prometheus-client", "pyyaml"} <= set(pins)
    differ = {n: (v, dev_pins[n]) for n, v in pins.items() if n in dev_pins and dev_pins[n] != v}
    assert differ == {}
    assert not {n for n in pins if n.startswith(("tensorflow", "keras", "nvidia-"))}


def test_read_pins_refuses_unpinned_lines(tmp_path: Path) -> None:
    lock = tmp_path / "x.lock"
    for bad in ("numpy>=2\n", "numpy\n", "numpy==2.4.6\nNumPy==2.4.6\n"):
        lock.write_text("# header\n" + bad)
        with pytest.raises(ValueError):
            tl.read_pins(lock)


@pytest.mark.parametrize("variant", tl.VARIANTS)
def test_versions_agree_with_dev_lock(variant: str, dev_pins: dict[str, str]) -> None:
    pins = tl.read_pins(tl.lock_path(variant))
    for name in SHARED:
        assert name in dev_pins, f"dev.lock lacks {name}"
        assert pins.get(name) == dev_pins[name], name
    # Everything else the dev venv also has too (protobuf, h5py, grpcio, ...).
    differ = {n: (v, dev_pins[n]) for n, v in pins.items() if n in dev_pins and dev_pins[n] != v}
    assert differ == {}
    # The GPU image runs the TensorFlow release the dev venv's tensorflow-cpu is.
    assert pins[TENSORFLOW[variant]] == dev_pins["tensorflow-cpu"]


@pytest.mark.parametrize("variant", tl.VARIANTS)
def test_one_tensorflow_per_lock(variant: str) -> None:
    pins = tl.read_pins(tl.lock_path(variant))
    other = TENSORFLOW["cpu" if variant == "gpu" else "gpu"]
    assert TENSORFLOW[variant] in pins
    assert other not in pins
    cuda = sorted(n for n in pins if n.startswith("nvidia-"))
    if variant == "gpu":
        assert {"nvidia-cudnn-cu12", "nvidia-cublas-cu12", "nvidia-nccl-cu12"} <= set(cuda)
    else:
        assert cuda == []


@pytest.mark.parametrize("variant", tl.LOCKS)
def test_lock_satisfies_its_package(variant: str) -> None:
    """A requirement changed in a pyproject.toml without `make lock-images` fails here."""
    pins = tl.read_pins(tl.lock_path(variant))
    for spec in tl.image_specs(variant):
        req = Requirement(spec)
        name = tl.canonical(req.name)
        assert name in pins, f"{spec}: not in the {variant} lock"
        assert req.specifier.contains(pins[name], prereleases=True), (spec, pins[name])


def _resolvable_here() -> None:
    """The locks are for the image's platform (pip evaluates markers and wheel tags for
    the interpreter that runs it; docs/design/packaging.md, "Trainer image"): elsewhere this check
    cannot mean anything. The package index is a prerequisite of `make test`, so an
    unreachable one fails the test with pip's own error rather than skipping it."""
    problem = tl.platform_problem()
    if problem:
        pytest.skip(problem)


def _as_requirements(pins: dict[str, str]) -> list[str]:
    return [f"{name}=={version}" for name, version in sorted(pins.items())]


@pytest.mark.slow
@pytest.mark.parametrize("variant", tl.LOCKS)
def test_pip_resolves_exactly_the_lock(variant: str) -> None:
    """With dependencies and no constraints: pip must accept every pin together and
    need nothing outside the lock (a missing package would be added, so it shows)."""
    _resolvable_here()
    pins = tl.read_pins(tl.lock_path(variant))
    metadata_only = variant != "operator"
    assert tl.resolve(_as_requirements(pins), metadata_only=metadata_only) == pins


@pytest.mark.slow
def test_pip_refuses_a_conflicting_pin() -> None:
    """tensorflow 2.21 needs keras>=3.12: the same check on a lock with keras 3.11.3 fails."""
    _resolvable_here()
    pins = tl.read_pins(tl.lock_path("cpu"))
    pins["keras"] = "3.11.3"
    with pytest.raises(tl.ResolveError, match="conflict"):
        tl.resolve(_as_requirements(pins))
