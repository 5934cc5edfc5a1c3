"""containerd for one real node: configuration, start, image import, and a stop that
leaves no container, shim or mount behind (test infrastructure).

Debian's containerd 1.6 and runc, installed by :func:`ensure_packages` when missing. The
CRI plugin runs pods with runc and the cgroupfs driver (this machine has cgroup v1
controllers; crun refuses its hybrid layout), the pause image of `make images` as the
sandbox, and CNI from Debian's containernetworking-plugins. Its root (images, snapshots)
lives in the tuneop cache, one per node name, so imported images survive a restart; its
state (sockets, shims) under /run, short enough for a unix socket path.

``restrict_oom_score_adj``: the kubelet asks for scores below containerd's own (-998 for
a sandbox, -997 for a Guaranteed pod), and lowering a score needs CAP_SYS_RESOURCE,
which root lacks here: runc's init would fail with "can't get final child's PID from
pipe". Restricted, a score never goes below containerd's (0), so under memory pressure
the kernel may pick a pod that a real node would protect: pods are the only big
processes here, so it picks among them as it would.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

PACKAGES = {
    "containerd": "containerd",
    "runc": "runc",
    "/usr/lib/cni/bridge": "containernetworking-plugins",
}
CNI_BIN = Path("/usr/lib/cni")
NAMESPACE = "k8s.io"  # the CRI plugin's containerd namespace
START_TIMEOUT_SECONDS = 60.0


class RuntimeError_(RuntimeError):
    """containerd did not start, or an image could not be imported."""


def ensure_packages() -> None:
    """Debian's containerd, runc, CNI plugins, iptables and iproute2, installed when
    missing (needs root)."""
    missing = [pkg for path, pkg in PACKAGES.items() if shutil.which(path) is None
               and not Path(path).exists()]  # fmt: skip
    if not missing:
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *missing]):
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)


def config_toml(root: Path, state: Path, cni_conf: Path, sandbox_image: str) -> str:
    """containerd's configuration (version 2, containerd 1.6)."""
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""version = 2
root = "{root}"
state = "{state}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "{state}/containerd.sock"
[ttrpc]
  address = "{state}/containerd.sock.ttrpc"
[debug]
  level = "warn"
[plugins."io.containerd.internal.v1.opt"]
  path = "{root}/opt"
[{cri}]
  sandbox_image = "{sandbox_image}"
  disable_apparmor = true
  enable_selinux = false
  restrict_oom_score_adj = true
  max_container_log_line_size = 65536
[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"
  discard_unpacked_layers = false
[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false
  BinaryName = "{shutil.which("runc") or "/usr/sbin/runc"}"
[{cri}.cni]
  bin_dir = "{CNI_BIN}"
  conf_dir = "{cni_conf}"
  max_conf_num = 1
"""


class Containerd:
    """One containerd process; `root` persists (images), `state` is per run."""

    def __init__(self, name: str, cache: Path, workdir: Path, sandbox_image: str) -> None:
        tag = hashlib.sha256(str(workdir).encode()).hexdigest()[:8]
        self.root = cache / "containerd" / name
        self.state = Path("/run") / f"tuneop-ctr-{tag}"
        self.socket = self.state / "containerd.sock"
        self.cni_conf = workdir / "cni"
        self.log = workdir / "containerd.log"
        self.config = workdir / "containerd.toml"
        self.sandbox_image = sandbox_image
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        ensure_packages()
        for path in (self.root, self.state, self.cni_conf):
            path.mkdir(parents=True, exist_ok=True)
        self.config.write_text(
            config_toml(self.root, self.state, self.cni_conf, self.sandbox_image)
        )
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                ["containerd", "--config", str(self.config)],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while self.ctr("version", check=False).returncode != 0:
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError_(f"containerd did not start; see {self.log}")
            time.sleep(0.2)

    def ctr(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ctr", "--address", str(self.socket), "--namespace", NAMESPACE, *args],
            capture_output=True, text=True, check=check, timeout=600,
        )  # fmt: skip

    def images(self) -> set[str]:
        out = self.ctr("images", "list", "--quiet").stdout
        return {line.strip() for line in out.splitlines() if line.strip()}

    def running_tasks(self) -> list[str]:
        """Tasks (containers and sandboxes) not yet stopped."""
        out = self.ctr("tasks", "list", check=False).stdout.splitlines()[1:]
        return [line.split()[0] for line in out if line.split() and "STOPPED" not in line]

    def import_image(self, reference: str, archive: Path) -> None:
        """Import `archive` unless `reference` is there from this very archive (its
        name carries the build key), and pin it: the kubelet's image GC must never
        remove what no registry can give back."""
        marker = self.root / "imported" / reference.replace("/", "_")
        if reference in self.images() and marker.exists() and marker.read_text() == archive.name:
            return
        self.ctr("images", "import", "--no-unpack", str(archive))
        self.ctr("images", "label", reference, "io.cri-containerd.pinned=pinned")
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(archive.name)

    def stop(self) -> None:
        """Kill every task of the node, then containerd; shims exit with their tasks."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self._kill_tasks()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self._kill_shims()
        self.process = None
        for path in (self.state, self.root):
            unmount_under(path)
        shutil.rmtree(self.state, ignore_errors=True)

    def _kill_tasks(self) -> None:
        listing = self.ctr("tasks", "list", "--quiet", check=False).stdout.split()
        for task in listing:
            self.ctr("tasks", "kill", "--signal", "SIGKILL", task, check=False)
        for task in listing:
            self.ctr("tasks", "delete", "--force", task, check=False)
        for container in self.ctr("containers", "list", "--quiet", check=False).stdout.split():
            self.ctr("containers", "delete", container, check=False)

    def _shims(self) -> list[int]:
        """Shims of this containerd, by its socket on their command line (a shim whose
        containerd is gone keeps its container)."""
        pids = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ")
                if b"containerd-shim" in cmdline and str(self.socket).encode() in cmdline:
                    pids.append(int(proc.name))
        return pids

    def _kill_shims(self) -> None:
        for pid in self._shims():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def leftovers(self) -> list[str]:
        out = [f"containerd {self.process.pid}"] if self.process is not None else []
        out += [f"shim {pid}" for pid in self._shims()]
        out += [f"mount {point}" for point in mounts_under(self.state)]
        return out


def mounts_under(path: Path) -> list[str]:
    """Mount points at or below `path` (deepest first), from /proc/self/mountinfo."""
    prefix = str(path).rstrip("/")
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == prefix or point.startswith(prefix + "/"):
            points.append(point)
    return sorted(points, key=len, reverse=True)


def unmount_under(path: Path) -> None:
    for point in mounts_under(path):
        subprocess.run(["umount", "--lazy", point], capture_output=True)
