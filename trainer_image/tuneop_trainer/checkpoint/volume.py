"""The checkpoint volume failing (full, over quota, read-only, an I/O error): an
infrastructure failure, not the trial's; and what the volume holds."""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator
from pathlib import Path

from tuneop_contract import VOLUME_ERROR_PREFIX

VOLUME_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS})


class VolumeError(BaseException):
    """The checkpoint volume refused a write (full, over quota, read-only, I/O error):
    an infrastructure failure, not the trial's. A BaseException so that keras-tuner,
    which catches Exception around a trial, does not record the trial FAILED; the
    trainer exits 75 and the previous checkpoint stays the one to resume from."""

    def __init__(self, path: str | os.PathLike[str], exc: OSError) -> None:
        code = errno.errorcode.get(exc.errno or 0, str(exc.errno))
        # the system's words for the errno: libraries (h5py) put pages of detail in strerror
        reason = os.strerror(exc.errno) if exc.errno else (exc.strerror or str(exc))
        self.message = (
            f"{VOLUME_ERROR_PREFIX} {reason} ({code}) writing "
            f"{exc.filename or path}{_free_space(path)}; nothing was lost, the search "
            "resumes from its previous checkpoint once the volume has room"
        )
        super().__init__(self.message)


def _free_space(path: str | os.PathLike[str]) -> str:
    probe = Path(path)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        st = os.statvfs(probe)
    except OSError:
        return ""
    free, size = st.f_bavail * st.f_frsize / MIB, st.f_blocks * st.f_frsize / MIB
    return f" ({free:.1f} MiB free of {size:.1f} MiB)"


MIB = 1024 * 1024


def volume_usage(path: Path) -> tuple[int, int, int] | None:
    """(bytes under `path`, free bytes on its file system, file system size) or None.
    Hard-linked files are counted once."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        st = os.statvfs(probe)
    except OSError:
        return None
    used, seen = 0, set()
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            try:
                info = os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue
            if (info.st_dev, info.st_ino) not in seen:
                seen.add((info.st_dev, info.st_ino))
                used += info.st_blocks * 512
    return used, st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize


@contextlib.contextmanager
def volume_errors(path: str | os.PathLike[str]) -> Iterator[None]:
    """Turn an OSError the volume raised (VOLUME_ERRNOS) into VolumeError."""
    try:
        yield
    except OSError as exc:
        if exc.errno in VOLUME_ERRNOS:
            raise VolumeError(path, exc) from exc
        raise
