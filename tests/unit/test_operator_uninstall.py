"""tuneop.run.uninstall without a cluster: FakeCustomObjects stands for the API server's
TuningJobs (resourceVersion preconditions, a job changed meanwhile, one deleted). The
hook itself runs for real in tests/e2e/test_install.py."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException
from kubernetes.config import kube_config
from tuneop.api import names
from tuneop.run import uninstall


class FakeCustomObjects:
    """TuningJobs by name; a patch must carry the current resourceVersion (else 409),
    and `bump` changes a job once right after it was listed (another writer)."""

    def __init__(self, jobs: dict[str, list[str]], bump: str = "", gone: str = "") -> None:
        self.jobs = {n: {"finalizers": f, "resourceVersion": "1"} for n, f in jobs.items()}
        self.bump, self.gone, self.patches = bump, gone, 0

    def _job(self, name: str) -> dict[str, Any]:
        meta = {"name": name, "namespace": "ml", **self.jobs[name]}
        return {"metadata": {**meta, "finalizers": list(meta["finalizers"])}}

    def list_namespaced_custom_object(self, *args: str, **_: Any) -> dict[str, Any]:
        listed = {"items": [self._job(n) for n in self.jobs]}
        if self.bump:
            self.jobs[self.bump]["resourceVersion"] = "2"
        if self.gone:
            del self.jobs[self.gone]
        return listed

    def get_namespaced_custom_object(self, *args: str, **_: Any) -> dict[str, Any]:
        return self._job(args[-1])

    def patch_namespaced_custom_object(self, *args: Any, **_: Any) -> None:
        name, body = args[-2], args[-1]
        if name not in self.jobs:
            raise ApiException(status=404)
        if body["metadata"]["resourceVersion"] != self.jobs[name]["resourceVersion"]:
            raise ApiException(status=409)
        self.patches += 1
        self.jobs[name]["finalizers"] = body["metadata"]["finalizers"]


def test_the_operators_finalizer_is_released_and_no_other() -> None:
    other = "example.com/keep"
    api = FakeCustomObjects(
        {"a": [names.FINALIZER, other], "b": [names.FINALIZER], "c": [], "d": [names.FINALIZER]},
        bump="b",
        gone="d",
    )
    assert uninstall.release_jobs(api, "ml") == 2
    assert api.jobs["a"]["finalizers"] == [other]
    assert api.jobs["b"]["finalizers"] == []  # read again after its conflict
    assert api.jobs["c"]["finalizers"] == [] and api.patches == 2


@pytest.mark.timeout(30)  # a call without its limit would hang here
def test_an_api_server_that_never_answers_ends_the_hook_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A socket that accepts connections (the kernel's backlog) and never answers: each
    call gives up after its limit, and the hook exits 1 saying so, no traceback."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    kubeconfig = tmp_path / "kubeconfig"
    server = f"http://127.0.0.1:{silent.getsockname()[1]}"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
    }))  # fmt: skip
    # the client reads $KUBECONFIG when it is imported
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setitem(uninstall.CALL, "_request_timeout", 0.3)
    try:
        code = uninstall.main(["--namespace", "tuneop", "--deployment", "tuneop"])
    finally:
        silent.close()
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1, err
    assert err[0].startswith("tuneop uninstall: the API server did not answer"), err
