"""The local cluster's provisioner (test infrastructure): a claim of a StorageClass with
`tuneop.io/backing: tmpfs` is a real tmpfs of the claim's size (needs root, as on the
test machines), which `fill` leaves without room and `unfill` gives back."""

from __future__ import annotations

import errno
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.localcluster.nodeagent import provisioner as p


@pytest.mark.parametrize(
    ("quantity", "expected"),
    [
        ("1Gi", 1 << 30),
        ("512Mi", 512 << 20),
        ("2G", 2 * 10**9),
        ("1048576", 1 << 20),
        ("1.5Ki", 1536),
    ],
)
def test_storage_quantities_in_bytes(quantity: str, expected: int):
    assert p.size_bytes(quantity) == expected


def test_a_sized_claim_holds_its_size_and_fills_up_until_given_room_again(tmp_path: Path):
    root = tmp_path / "volumes"
    root.mkdir()
    provisioner = p.LocalPathProvisioner.__new__(p.LocalPathProvisioner)
    provisioner.root = root
    sized = SimpleNamespace(parameters={p.BACKING: p.TMPFS})
    plain = SimpleNamespace(parameters=None)
    claim, other = root / "pvc-1", root / "pvc-2"
    provisioner._make_directory(claim, sized, {"spec": {"capacity": {"storage": "4Mi"}}})
    provisioner._make_directory(other, plain, {"spec": {"capacity": {"storage": "4Mi"}}})
    try:
        assert claim.is_mount() and not other.is_mount()
        with pytest.raises(OSError) as too_big:
            (claim / "big").write_bytes(b"\0" * (5 << 20))
        assert too_big.value.errno == errno.ENOSPC
        (claim / "big").unlink()
        (claim / "checkpoint").write_bytes(b"\1" * (1 << 20))
        p.fill(claim)
        p.fill(claim)  # a second fill overlapping the first: still full, restored the same
        with pytest.raises(OSError) as full:
            (claim / "next").write_bytes(b"\2" * 8192)
        assert full.value.errno == errno.ENOSPC
        assert (claim / "checkpoint").read_bytes() == b"\1" * (1 << 20)  # what it held stays
        p.unfill(claim, p.size_bytes("4Mi"))
        (claim / "next").write_bytes(b"\2" * 8192)
    finally:
        provisioner.root = root
        for path in root.iterdir():
            p._unmount(path)
    assert not claim.is_mount()
    subprocess.run(["rm", "-rf", str(root)], check=True)
