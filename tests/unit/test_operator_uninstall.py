"""tuneop.run.uninstall without a cluster: FakeCustomObjects stands for the API server's
TuningJobs (resourceVersion preconditions, a job changed meanwhile, one deleted). The
hook itself runs for real in tests/e2e/test_install.py."""

from __future__ import annotations

from typing import Any

from kubernetes.client.exceptions import ApiException
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

    def list_namespaced_custom_object(self, *args: str) -> dict[str, Any]:
        listed = {"items": [self._job(n) for n in self.jobs]}
        if self.bump:
            self.jobs[self.bump]["resourceVersion"] = "2"
        if self.gone:
            del self.jobs[self.gone]
        return listed

    def get_namespaced_custom_object(self, *args: str) -> dict[str, Any]:
        return self._job(args[-1])

    def patch_namespaced_custom_object(self, *args: Any) -> None:
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
