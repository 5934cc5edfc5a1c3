"""The README's quickstart, as written, on the local cluster: its two marked blocks
(`<!-- quickstart: install -->`, `<!-- quickstart: run -->`) run command by command in
bash, from `helm install` to a script's results on the host, with the operator and the
trainer as containers of the built images on a real node (containerd, the kubelet).

What differs from a user's terminal is listed here, each with its reason: SUBSTITUTED
(the registry is the real node's image store; no GPU here, so the README's CPU-node
variant of the trainer image) and SKIPPED (builds and pushes that need a registry).
`search.py` is tests/e2e/scripts/quickstart/search.py, a script as keras.io's guide has
users write one. A step given a mistake in between says so in one line and leaves
nothing behind; the cleanup follows docs/operator-guide.md's uninstall.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import tuneop_contract as contract

from hack.images import image_tag
from tests.e2e.harness import PYTHONPATH, wait_for
from tests.localcluster.cluster import LocalCluster
from tests.localcluster.kubelet.node import TAINT, KubeletNode

pytestmark = [pytest.mark.e2e, pytest.mark.cluster, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
SCRIPT_DIR = Path(__file__).parent / "scripts" / "quickstart"
BLOCK = re.compile(r"<!-- quickstart: (\w+) -->\n```sh\n(.*?)\n```", re.DOTALL)
TAG = image_tag()
SUBSTITUTED = {
    # the images as the real node imported them (no registry is reachable here)
    "REGISTRY=registry.example.com/ml": "REGISTRY=docker.io/tuneop",
    # the README's variant for nodes without GPUs: the nodes here have none
    f"trainer.image=$REGISTRY/trainer:{TAG}": f"trainer.image=$REGISTRY/trainer:{TAG}-cpu",
}
SKIPPED = {
    "make images": "make test built the CPU images (images-cpu); the GPU trainer is "
    "`make image-gpu`, too slow for every run (tests/images covers it)",
    "make push": "no registry is reachable here; the real node imported the images",
    "pip install": "the client runs from this checkout (tests/unit/test_client_package.py "
    "installs it with pip)",
}
RELEASE, RELEASE_NAMESPACE, JOB = "tuneop", "tuneop-system", "search"


def quickstart_blocks() -> dict[str, list[str]]:
    """The README's marked blocks, as bash would read their commands (continuation
    lines joined), with SUBSTITUTED applied and SKIPPED left out."""
    text = (ROOT / "README.md").read_text()
    for old in SUBSTITUTED:
        assert old in text, f"the README no longer has {old!r}: update SUBSTITUTED"
        text = text.replace(old, SUBSTITUTED[old])
    blocks: dict[str, list[str]] = {}
    for name, body in BLOCK.findall(text):
        lines = body.replace("\\\n", " ").splitlines()
        blocks[name] = [c for c in lines if not c.strip().startswith(tuple(SKIPPED))]
    return blocks


class Terminal:
    """bash in the user's script directory (unless told another) with helm, kubectl and
    `tuneop` on PATH, the cluster's kubeconfig, and the shell variables the commands
    assigned."""

    def __init__(self, cluster: LocalCluster, cwd: Path) -> None:
        bin_dir = cwd.parent / "bin"
        bin_dir.mkdir()
        tuneop = bin_dir / "tuneop"
        tuneop.write_text(f'#!/bin/sh\nexec {sys.executable} -m tuneop_client "$@"\n')
        tuneop.chmod(0o755)
        cp = cluster.control_plane
        self.cwd = cwd
        self.env = {**os.environ, "KUBECONFIG": str(cp.kubeconfig), "PYTHONPATH": PYTHONPATH,
                    "PATH": f"{bin_dir}:{cp.bin_dir}:{os.environ['PATH']}"}  # fmt: skip
        self.env.pop("KUBECTL", None)
        self.variables = ""

    def run(
        self, command: str, timeout: float = 600, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            ["bash", "-c", f"set -o pipefail\n{self.variables}{command}"], cwd=cwd or self.cwd,
            env=self.env, capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip
        if re.fullmatch(r"\w+=\S+(\s+#.*)?", command.strip()):
            self.variables += command.split("#")[0].strip() + "\n"
        return done


@pytest.fixture
def only_the_real_node(cluster: LocalCluster, real_node: KubeletNode) -> Iterator[KubeletNode]:
    """The real node untainted and the node agents cordoned: every pod the README's
    commands make is a container on it, as on a cluster of real nodes."""
    cp, name = cluster.control_plane, real_node.config.name
    for agent in cluster.agents:
        cp.kubectl("cordon", agent)
    cp.kubectl("taint", "nodes", name, f"{TAINT['key']}-")
    try:
        yield real_node
    finally:
        cp.kubectl("taint", "nodes", name, f"{TAINT['key']}={TAINT['value']}:NoSchedule",
                   "--overwrite", check=False)  # fmt: skip
        for agent in cluster.agents:
            cp.kubectl("uncordon", agent, check=False)


def _said(done: subprocess.CompletedProcess[str]) -> str:
    return f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


def test_the_readme_quickstart_runs_as_written(
    cluster: LocalCluster, only_the_real_node: KubeletNode, tmp_path: Path
) -> None:
    blocks = quickstart_blocks()
    assert sorted(blocks) == ["install", "run"], blocks
    work = tmp_path / "work"
    shutil.copytree(SCRIPT_DIR, work)
    term = Terminal(cluster, work)
    peers = _peers(cluster)
    try:
        for command in blocks["install"]:  # in the checkout, as the README's paths say
            done = term.run(command, cwd=ROOT)
            assert done.returncode == 0, f"{command}\n{_said(done)}"
        assert "STATUS: deployed" in done.stdout, done.stdout
        _operator_pods_run_the_image(cluster, only_the_real_node)
        _a_mistake_says_so_in_one_line_and_leaves_nothing(term, cluster)
        _run_block(term, blocks["run"], cluster)
    finally:
        _uninstall(term, cluster)
        _forget_peers_but(peers, cluster)


def _operator_pods_run_the_image(cluster: LocalCluster, node: KubeletNode) -> None:
    cp = cluster.control_plane

    def running() -> list[dict[str, str]] | None:
        out = cp.kubectl("-n", RELEASE_NAMESPACE, "get", "pods", "-o", "json").stdout
        pods = json.loads(out)["items"]
        ready = [p for p in pods if p["status"].get("phase") == "Running"]
        return ready if len(ready) == len(pods) == 2 else None

    pods = wait_for(running, 180, "the chart's two operator pods Running", every=1.0)
    for pod in pods:
        assert pod["spec"]["nodeName"] == node.config.name, pod["spec"]
        image = pod["status"]["containerStatuses"][0]["image"]
        assert image == f"docker.io/tuneop/operator:{TAG}", image


def _a_mistake_says_so_in_one_line_and_leaves_nothing(
    term: Terminal, cluster: LocalCluster
) -> None:
    typo = term.run("tuneop run serach.py --gpus 1")
    assert typo.returncode == 2, _said(typo)
    assert typo.stderr.splitlines() == [
        "tuneop run: SCRIPT: 'serach.py' is not a Python file (*.py)"
    ], _said(typo)
    left = cluster.control_plane.kubectl("get", "configmaps,tuningjobs", "-o", "name").stdout
    assert "serach" not in left, left


def _run_block(term: Terminal, commands: list[str], cluster: LocalCluster) -> None:
    cp = cluster.control_plane
    outputs = []
    for command in commands:
        done = term.run(command)
        assert done.returncode == 0, f"{command}\n{_said(done)}"
        outputs.append(done.stdout)
        if command.startswith("tuneop run"):
            _ran_as_a_container(cp.kubectl("get", "tj", JOB, "-o", "json").stdout, done.stdout)
    results = term.cwd / "results"
    assert json.loads((results / contract.RESULTS_FILE).read_text())["trials"], results
    saved = results / contract.OUTPUTS_DIR / "best_model.keras"
    assert saved.stat().st_size > 1000, saved  # what the script saved where it runs
    assert outputs[1].startswith("fetch-results: wrote ") and " sha256 " in outputs[1], outputs[1]
    gone = ("get", "tj,configmap", "-l", f"{contract.LABEL_JOB}={JOB}", "-o", "name")
    wait_for(lambda: not cp.kubectl(*gone).stdout.strip(), 120, "the job and its ConfigMap gone")


def _ran_as_a_container(job_json: str, followed: str) -> None:
    status = json.loads(job_json)["status"]
    assert status["phase"] == "Succeeded", status
    lines = followed.splitlines()
    assert lines[0] == f"tuningjob default/{JOB} created (script in ConfigMap {JOB}-script)"
    assert any(line.startswith("Succeeded  trials 2/2") for line in lines), followed


def _uninstall(term: Terminal, cluster: LocalCluster) -> None:
    """docs/operator-guide.md's order: the jobs first (the operator releases their
    finalizer), then the release; then what a retained claim keeps."""
    failed: list[str] = []
    for command in (
        "kubectl delete tuningjobs --all --namespace default --wait --timeout=120s",
        f"helm uninstall {RELEASE} --namespace {RELEASE_NAMESPACE} --wait --timeout 2m",
        f"kubectl delete namespace {RELEASE_NAMESPACE} --wait --timeout=120s",
        f"kubectl delete pvc -l {contract.LABEL_JOB}={JOB} --namespace default --wait=false",
    ):
        done = term.run(command, timeout=200)
        failed.extend([f"{command}\n{_said(done)}"] if done.returncode else [])
    assert not failed, failed
    left = cluster.control_plane.kubectl(
        "get", "pods", "--namespace", "default", "-l", f"{contract.LABEL_JOB}={JOB}", "-o", "name"
    ).stdout
    assert not left.strip(), left


def _peers(cluster: LocalCluster) -> set[str]:
    """Who is in the default kopf peering (the session's own operator, when it runs)."""
    found = cluster.control_plane.kubectl(
        "get", "clusterkopfpeering", "tuneop", "-o", "json", check=False
    )
    return set(json.loads(found.stdout).get("status") or {}) if found.returncode == 0 else set()


def _forget_peers_but(keep: set[str], cluster: LocalCluster) -> None:
    """The release's replicas out of the peering: one stopping after its RBAC is gone
    cannot take itself out, and the session's operator would stay paused for the
    peering lifetime (60 s)."""
    gone = {peer: None for peer in _peers(cluster) - keep}
    if gone:
        patch = json.dumps({"status": gone})
        cluster.control_plane.kubectl(
            "patch", "clusterkopfpeering", "tuneop", "--type=merge", "-p", patch, check=False
        )
