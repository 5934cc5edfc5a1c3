"""What the watches delivered, so that a steady pass reads nothing from the API server.

kopf's watches (run.handlers) feed one `Watched` per operator: each TuningJob, its
trainer pods, its progress ConfigMap, and the Nodes (trimmed to what classification
reads). A pass reads a job's objects live instead when the cache cannot be trusted:

- never read live since the operator started, unless the watches' first listing is
  known to be complete: the trainer pods and progress maps are kopf indexed resources
  (run.handlers), and kopf starts no daemon before every indexed resource is listed,
  so the first pass of every job after a start or a take-over trusts the listing
  instead of reading three objects of each job (`listing_complete`). A replica that
  lost its lead and leads again is not waited for by kopf (its relist also reports no
  deletions): its cache is never trusted without a live read again (`paused`);
- after a pass that wrote pods or children (created, deleted, released, replaced): what
  it wrote reaches the cache only when the watch delivers it, and a decision made on
  the older state would count a pod it just created as vanished;
- after a pass that failed (a 409, an API error, a freeze): its writes may be half done;
- every `resync_seconds` (a level-based safety net, as an informer's resync): a watch
  event lost (a relist after `410 Gone` reports no deletions) is corrected then. Not
  for a resting job (finished, or suspended with no pod left: `settle`): nothing of it
  changes by itself, and what would change it (a new spec, a pod, its progress map) is
  a watch event, which ends its rest. Thousands of idle jobs then cost no reads.

A status patch's answer is the job as the API server now holds it, so a pass that only
patched status leaves the cache fresh. Objects are compared by resourceVersion where it
is numeric (etcd's revision, the only store Kubernetes ships), so an older copy (a watch
event behind a live read) never replaces a newer one; a deleted pod leaves a tombstone
so a live list taken just before its deletion does not bring it back."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Any

Obj = dict[str, Any]
Key = tuple[str, str]

RESYNC_SECONDS = 300.0
"""The default of run.config's resync_seconds."""
TOMBSTONE_SECONDS = 600.0


def version(obj: Obj | None) -> int | None:
    """The object's resourceVersion as a number (None: absent or not numeric)."""
    return _number(((obj or {}).get("metadata") or {}).get("resourceVersion"))


def _number(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def not_older(candidate: Obj, held: Obj | None) -> bool:
    """Whether `candidate` may replace `held`: not known to be older."""
    new, old = version(candidate), version(held)
    return new is None or old is None or new >= old


def newer(candidate: Obj, held: Obj | None) -> bool:
    """Whether `candidate` (a copy the operator read or was answered) may replace `held`:
    not known to be the same version or older. At the same version the watch's copy is
    kept: its nested objects are the ones kopf holds for the job anyway, where the
    answer's are a second copy (about 25 KiB of Python objects a job)."""
    new, old = version(candidate), version(held)
    return new is None or old is None or new > old


def trim_node(node: Obj) -> Obj:
    """What decide.classify reads of a Node (existence, deletion, the Ready condition):
    a real Node carries its images and addresses, tens of KiB each."""
    meta = node.get("metadata") or {}
    conditions = [
        c for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"
    ]
    kept = ("name", "uid", "resourceVersion", "deletionTimestamp")
    return {
        "metadata": {k: meta[k] for k in kept if k in meta},
        "status": {"conditions": conditions},
    }


@dataclasses.dataclass
class JobObjects:
    """One job's objects as the watches (and the last live read) left them."""

    job: Obj | None = None
    pods: dict[str, Obj] = dataclasses.field(default_factory=dict)
    progress: Obj | None = None
    read_at: float | None = None
    """When the pass last read them live (monotonic); None: never, or invalidated."""
    resting: bool = False
    """Its last pass found it finished or suspended with no pod (`Watched.settle`)."""
    events: int = 0
    """Events that ended a rest, counted: a pass rests the job only if none came while
    it ran (its decision was made without them)."""


@dataclasses.dataclass(frozen=True)
class Snapshot:
    job: Obj | None
    pods: list[Obj]
    progress: Obj | None
    events: int = 0
    """JobObjects.events when it was taken."""


class Watched:
    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        resync_seconds: float = RESYNC_SECONDS,
    ) -> None:
        self.clock = clock
        self.resync_seconds = resync_seconds
        self._lock = threading.Lock()
        self._jobs: dict[Key, JobObjects] = {}
        self._tombstones: dict[str, tuple[int | None, float]] = {}  # pod uid -> (rv, when)
        self._gone: dict[Key, float] = {}  # deleted jobs -> when: their stragglers are dropped
        self._nodes: dict[str, tuple[Obj | None, float]] = {}  # -> (node, None: gone; when)
        self._listed = False  # the watches' first listing is complete, and still streaming
        self._paused = False  # the operator paused once: no listing is trusted again

    # --- fed by the watches --------------------------------------------------------
    def job_event(self, key: Key, job: Obj, deleted: bool) -> None:
        with self._lock:
            if deleted:  # its pass, if one runs still, reads live and finds it gone
                self._drop(key)
                return
            self._gone.pop(key, None)  # a job of that name (again)
            held = self._objects(key)
            if not_older(job, held.job):
                if _generation(job) != _generation(held.job) or _uid(job) != _uid(held.job):
                    self._unrest(held)  # a new spec (resumed, edited), or a new job
                held.job = job

    def pod_event(self, key: Key, pod: Obj, deleted: bool) -> None:
        meta = pod.get("metadata") or {}
        with self._lock:
            if key in self._jobs:
                self._unrest(self._jobs[key])
            if deleted:
                self._tombstones[str(meta.get("uid"))] = (version(pod), self.clock())
                pods = self._jobs[key].pods if key in self._jobs else {}
                if _uid(pods.get(meta["name"])) == meta.get("uid"):
                    del pods[meta["name"]]
                return
            if key in self._gone:  # a deleted job's pod, still terminating
                return
            pods = self._objects(key).pods
            if not self._buried(pod) and not_older(pod, pods.get(meta["name"])):
                pods[meta["name"]] = pod

    def progress_event(self, key: Key, configmap: Obj, deleted: bool) -> None:
        with self._lock:
            if key in self._jobs:
                self._unrest(self._jobs[key])
            if deleted:
                # the map is replaced before each pod group: only that very one goes
                held = self._jobs.get(key)
                if held is not None and _uid(held.progress) == _uid(configmap):
                    held.progress = None
                return
            if key in self._gone:
                return
            held = self._objects(key)
            if not_older(configmap, held.progress):
                held.progress = configmap

    def node_event(self, node: Obj, deleted: bool) -> list[Key]:
        """Hold the node; the jobs with a pod on it when its readiness changed (it went,
        is going, or its Ready condition turned): their passes judge its pods again."""
        name = (node.get("metadata") or {}).get("name")
        if not name:
            return []
        trimmed = None if deleted else trim_node(node)
        with self._lock:
            held = self._nodes.get(name)
            self._nodes[name] = (trimmed, self.clock())
            if held is not None and _readiness(held[0]) == _readiness(trimmed):
                return []
            return [
                key
                for key, objects in self._jobs.items()
                if any((p.get("spec") or {}).get("nodeName") == name for p in objects.pods.values())
            ]

    def gone(self, key: Key) -> bool:
        """Whether the job was deleted (and no job of that name has appeared since)."""
        with self._lock:
            return key in self._gone

    def listing_complete(self) -> None:
        """The watches have delivered their first listing of every trainer pod and
        progress map (kopf starts a job's daemon only then, the first time it leads):
        what they hold is as good as a live read now, and every job created later is
        seen whole by the watches. Nothing once the operator has paused (`paused`)."""
        with self._lock:
            if self._listed or self._paused:
                return
            self._listed = True
            now = self.clock()
            for held in self._jobs.values():
                if held.read_at is None:
                    held.read_at = now

    def paused(self) -> None:
        """The operator lost its lead: its watches stop, and when it leads again they
        list anew without reporting what was deleted meanwhile, and kopf does not wait
        for that listing. Every job's next pass reads live, for the rest of the
        process's life."""
        with self._lock:
            self._listed, self._paused = False, True
            for held in self._jobs.values():
                held.read_at = None

    # --- read by the passes --------------------------------------------------------
    def snapshot(self, key: Key) -> Snapshot | None:
        """The job's objects, or None when the pass must read them live."""
        with self._lock:
            held = self._jobs.get(key)
            now = self.clock()
            if held is None or held.job is None or held.read_at is None:
                return None
            if now - held.read_at >= self.resync_seconds and not held.resting:
                return None
            return Snapshot(held.job, list(held.pods.values()), held.progress, held.events)

    def read_live(
        self,
        key: Key,
        job: Obj | None,
        pods: list[Obj],
        listed_at: Obj | None,
        progress: Obj | None,
    ) -> Snapshot:
        """Take what the pass read live (`listed_at`: the pod list's metadata, whose
        resourceVersion says which watched pods are newer than the list) and return the
        merged view."""
        with self._lock:
            if job is None:  # deleted: nothing to keep
                self._drop(key)
                return Snapshot(None, [], None)
            held = self._objects(key)
            if newer(job, held.job):
                held.job = job
            held.pods = self._merge_pods(
                held.pods, pods, _number((listed_at or {}).get("resourceVersion"))
            )
            if progress is None or newer(progress, held.progress):
                held.progress = progress
            held.read_at = self.clock()
            self._expire_tombstones()
            return Snapshot(held.job, list(held.pods.values()), held.progress, held.events)

    def applied(self, key: Key, job: Obj | None, wrote_children: bool) -> None:
        """After a pass: `job`, the status patch's answer (None: no patch);
        `wrote_children`: it created, deleted or released pods or children."""
        with self._lock:
            held = self._jobs.get(key)
            if held is None:  # deleted meanwhile
                return
            if job is not None and newer(job, held.job):
                held.job = job
            if wrote_children:
                held.read_at = None

    def settle(self, key: Key, resting: bool, events: int) -> None:
        """After a pass on the snapshot taken at `events`: `resting`, it found the job
        finished or suspended with no pod left, and until an event of its objects what
        the cache holds of it is trusted past the resync. Not if an event came while
        the pass ran: its decision did not see it."""
        with self._lock:
            held = self._jobs.get(key)
            if held is not None:
                held.resting = resting and held.events == events

    def invalidate(self, key: Key) -> None:
        """The next pass reads live (this one failed or was refused)."""
        with self._lock:
            if key in self._jobs:
                self._jobs[key].read_at = None
                self._unrest(self._jobs[key])

    def forget(self, key: Key) -> None:
        with self._lock:
            self._drop(key)

    def node(self, name: str) -> tuple[bool, Obj | None]:
        """(fresh, node): fresh False when no watch event or live read named the node
        within `resync_seconds` (a relist reports no deleted node: the pass reads it)."""
        with self._lock:
            held = self._nodes.get(name)
            if held is None or self.clock() - held[1] >= self.resync_seconds:
                return False, None
            return True, held[0]

    def node_read(self, name: str, node: Obj | None) -> None:
        """A Node read live (None: 404), unless the watch delivered a newer copy."""
        with self._lock:
            now = self.clock()
            held = self._nodes.get(name)
            if node is None or held is None or not_older(node, held[0]):
                self._nodes[name] = (None if node is None else trim_node(node), now)
            stale = now - 2 * self.resync_seconds
            if any(when < stale for _, when in self._nodes.values()):
                self._nodes = {n: v for n, v in self._nodes.items() if v[1] >= stale}

    # --- internals -----------------------------------------------------------------
    def _objects(self, key: Key) -> JobObjects:
        held = self._jobs.get(key)
        if held is None:  # a job first seen while the watches stream whole: trusted
            held = self._jobs[key] = JobObjects(read_at=self.clock() if self._listed else None)
        return held

    @staticmethod
    def _unrest(held: JobObjects) -> None:
        held.resting = False
        held.events += 1

    def _drop(self, key: Key) -> None:
        self._jobs.pop(key, None)
        self._gone[key] = self.clock()

    def _buried(self, pod: Obj) -> bool:
        """A copy of a pod the watch reported deleted, no newer than its deletion."""
        meta = pod.get("metadata") or {}
        tomb = self._tombstones.get(str(meta.get("uid")))
        if tomb is None:
            return False
        rv = version(pod)
        return tomb[0] is None or rv is None or rv <= tomb[0]

    def _merge_pods(
        self, held: dict[str, Obj], listed: list[Obj], at: int | None
    ) -> dict[str, Obj]:
        merged: dict[str, Obj] = {}
        for pod in listed:
            name = pod["metadata"]["name"]
            if self._buried(pod):
                continue
            watched = held.get(name)
            merged[name] = watched if watched is not None and not newer(pod, watched) else pod
        for name, pod in held.items():
            # created after the list was served: the list cannot know it
            rv = version(pod)
            if name not in merged and at is not None and rv is not None and rv > at:
                merged[name] = pod
        return merged

    def _expire_tombstones(self) -> None:
        cutoff = self.clock() - TOMBSTONE_SECONDS
        if any(when < cutoff for _, when in self._tombstones.values()):
            self._tombstones = {u: t for u, t in self._tombstones.items() if t[1] >= cutoff}
        if any(when < cutoff for when in self._gone.values()):
            self._gone = {k: when for k, when in self._gone.items() if when >= cutoff}


def _readiness(node: Obj | None) -> tuple[bool, bool, str | None]:
    """What of a trimmed node decides its pods' fate: there, going, Ready's status."""
    if node is None:
        return (False, False, None)
    conditions: list[Obj] = node["status"]["conditions"]
    ready = conditions[0].get("status") if conditions else None
    return (True, bool(node["metadata"].get("deletionTimestamp")), ready)


def _generation(job: Obj | None) -> Any:
    return ((job or {}).get("metadata") or {}).get("generation")


def _uid(obj: Obj | None) -> Any:
    return ((obj or {}).get("metadata") or {}).get("uid")
