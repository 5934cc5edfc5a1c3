"""What the operator benchmarks measure, shared by bench_load.py (real node agents) and
bench_scale.py (simulated nodes): kube-apiserver's own request and etcd counters, the
operator process's CPU and RSS, watches that time a cause (a pod's end) against its
effect in a TuningJob's status, and the wait until every job has had a pass."""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from kubernetes import client, watch

from tests.e2e.harness import Kubectl, Operator, wait_for

GROUP, VERSION, PLURAL = "tuneop.io", "v1alpha1", "tuningjobs"
T = TypeVar("T")
REQUEST_LINE = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$")
LABEL = re.compile(r'(\w+)="([^"]*)"')
PASSED = re.compile(r'^tuneop_tuningjob_phase\{.*phase="Pending".*\} ', re.M)
"""One line per job the operator has passed over (each job's phase series has one
line per phase; the Pending one is always there)."""
Obj = dict[str, Any]


def create(kubectl: Kubectl, docs: list[Obj]) -> None:
    """Create `docs` in lists of 200 (one kubectl call each)."""
    for i in range(0, len(docs), 200):
        items = {"apiVersion": "v1", "kind": "List", "items": docs[i : i + 200]}
        kubectl("create", "-f", "-", input=json.dumps(items))


def counters(kubectl: Kubectl) -> tuple[Counter[tuple[str, str]], float]:
    """apiserver_request_total summed by (verb, resource[/subresource][ code]: the code
    only when not 2xx), and
    `etcd_requests_total` of the writing operations, from one scrape."""
    totals: Counter[tuple[str, str]] = Counter()
    writes = 0.0
    for line in kubectl("get", "--raw", "/metrics").stdout.splitlines():
        match = REQUEST_LINE.match(line)
        if match:
            labels = dict(LABEL.findall(match["labels"]))
            resource = labels.get("resource", "")
            if labels.get("subresource"):
                resource += "/" + labels["subresource"]
            code = labels.get("code", "")
            if code and not code.startswith("2"):  # a refusal is its own row: 409, 429, ...
                resource += f" {code}"
            totals[(labels.get("verb", ""), resource)] += float(match["value"])
        elif line.startswith("etcd_requests_total{"):
            labels = dict(LABEL.findall(line[line.index("{") + 1 : line.index("}")]))
            if labels.get("operation") in ("create", "update", "delete", "patch"):
                writes += float(line.rsplit(" ", 1)[1])
    return totals, writes


def requests(kubectl: Kubectl) -> Counter[tuple[str, str]]:
    return counters(kubectl)[0]


def etcd_writes(kubectl: Kubectl) -> float:
    return counters(kubectl)[1]


def rates(kubectl: Kubectl, seconds: float) -> tuple[dict[str, float], float]:
    """Requests/s by "verb resource" (largest first) and etcd writes/s over `seconds`."""
    before, writes_before = counters(kubectl)
    time.sleep(seconds)
    after, writes_after = counters(kubectl)
    delta = {f"{v} {r}": (after[(v, r)] - before[(v, r)]) / seconds for v, r in after}
    ordered = sorted(((k, round(x, 2)) for k, x in delta.items() if x > 0), key=lambda kv: -kv[1])
    return dict(ordered), round((writes_after - writes_before) / seconds, 2)


def rate(kubectl: Kubectl, seconds: float) -> dict[str, float]:
    return rates(kubectl, seconds)[0]


def rss(operator: Operator) -> dict[str, float]:
    """VmRSS and VmHWM (peak) of the operator process, MB."""
    assert operator.process is not None
    fields = {}
    for line in Path(f"/proc/{operator.process.pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = round(int(value.split()[0]) / 1024, 1)
    return fields


def cpu_seconds(operator: Operator) -> float:
    """The operator process's user + system CPU time so far (/proc/PID/stat)."""
    assert operator.process is not None
    fields = Path(f"/proc/{operator.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return ticks / os.sysconf("SC_CLK_TCK")


def machine_busy(measure: Callable[[], T]) -> tuple[T, float]:
    """What `measure` returns, and the cores the whole machine was busy while it ran
    (/proc/stat: all but idle and iowait), for the API server's share of the load."""

    def ticks() -> tuple[int, int]:
        values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return sum(values), values[3] + values[4]

    (total, idle), start = ticks(), time.monotonic()
    value = measure()
    (total2, idle2), took = ticks(), time.monotonic() - start
    busy = (total2 - total) - (idle2 - idle)
    return value, round(busy / os.sysconf("SC_CLK_TCK") / took, 2)


def cores(operator: Operator, measure: Callable[[], T]) -> tuple[T, float]:
    """What `measure` returns, and the operator's CPU (cores) while it ran."""
    cpu, start = cpu_seconds(operator), time.monotonic()
    value = measure()
    return value, round((cpu_seconds(operator) - cpu) / (time.monotonic() - start), 3)


PASS_COUNTERS = ("tuneop_reconcile_passes_total", "tuneop_reconcile_live_reads_total",
                 "tuneop_reconcile_errors_total")  # fmt: skip


def pass_counters(operator: Operator) -> dict[str, float]:
    """The operator's own pass counters (passes, live reads, failed passes)."""
    return operator.counters(*PASS_COUNTERS)


def pass_rates(operator: Operator, measure: Callable[[], T]) -> tuple[T, dict[str, float]]:
    """What `measure` returns, and the operator's passes, live reads and failed passes
    per second while it ran."""
    before, start = pass_counters(operator), time.monotonic()
    value = measure()
    after, took = pass_counters(operator), time.monotonic() - start
    per_second = {
        name.removeprefix("tuneop_reconcile_").removesuffix("_total") + "_per_second": round(
            (after.get(name, 0.0) - before.get(name, 0.0)) / took, 2
        )
        for name in PASS_COUNTERS
    }
    return value, per_second


def print_measures(rows: list[tuple[str, Any]], width: int, value_width: int) -> None:
    """A two-column table of a benchmark's measures, as each bench prints it."""
    for key, value in rows:
        print(f"{key:{width}} {value!s:>{value_width}}")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def passed(operator: Operator) -> int:
    """How many jobs the operator has passed over since it started (0 while its
    metrics endpoint does not answer)."""
    try:
        return len(PASSED.findall(operator.metrics()))
    except OSError:
        return 0


def wait_all_passed(operator: Operator, total: int, timeout: float, every: float) -> float:
    """Seconds until `operator` has passed over `total` jobs."""
    start = time.monotonic()
    wait_for(lambda: passed(operator) >= total, timeout, f"all {total} jobs passed", every=every)
    return time.monotonic() - start


def stream(
    list_call: Callable[..., Any], *args: Any, since: dict[str, str] | None = None, **kwargs: Any
) -> Iterator[tuple[str, Obj]]:
    """(event type, object as a dict) from a watch, without building client models (a
    pod model costs more than the event is worth at these rates). `since` holds where
    the last stream of this watch stopped: the next resumes there as an informer does,
    instead of listing every object again (at 10,000 objects a busy process can take
    longer to read the listing than the stream lasts, and a watch that always starts
    over never reaches the present); emptied on 410 Gone, so the next one lists."""
    if since and since.get("rv"):
        kwargs["resource_version"] = since["rv"]
    try:
        for event in watch.Watch().stream(list_call, *args, deserialize=False, **kwargs):
            if isinstance(event, str):  # a line the client could not decode
                continue
            version = ((event.get("object") or {}).get("metadata") or {}).get("resourceVersion")
            if since is not None and str(version).isdigit() and event.get("type") != "ERROR":
                # the newest seen: a listing's objects come in no order of version
                since["rv"] = str(max(int(version), int(since.get("rv") or 0)))
            yield event["type"], event["object"]
    except client.ApiException as err:
        if err.status == 410 and since is not None:
            since.clear()
        raise


def container_ended(pod: Obj) -> bool:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return any((c.get("state") or {}).get("terminated") for c in statuses)


class Watcher:
    """Arrival times (time.monotonic) of pod terminations and of preemption counts in
    the jobs' status, from two watches on `namespace`. Subclasses add to `on_pod` and
    `on_job`."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.namespace = namespace
        self.terminated: dict[str, float] = {}  # pod uid -> first seen terminated/gone
        self.preemptions: dict[tuple[str, int], float] = {}  # (job, count) -> first seen
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.errors: Counter[str] = Counter()
        for target in self.watches():
            threading.Thread(target=self._forever, args=(target,), daemon=True).start()

    def watches(self) -> list[Callable[[dict[str, str]], None]]:
        return [self._pod_events, self._job_events]

    def _forever(self, target: Callable[[dict[str, str]], None]) -> None:
        since: dict[str, str] = {}  # where the last stream stopped (apimeasure.stream)
        while not self.stop.is_set():
            try:
                target(since)
            except Exception as exc:  # a watch cut (or shutdown): watch again
                self.errors[f"{target.__name__}: {type(exc).__name__}"] += 1
                time.sleep(0.2)

    def _pod_events(self, since: dict[str, str]) -> None:
        for kind, pod in stream(
            self.core.list_namespaced_pod, self.namespace, since=since, timeout_seconds=60
        ):  # fmt: skip
            self.on_pod(kind, pod, time.monotonic())

    def _job_events(self, since: dict[str, str]) -> None:
        for kind, job in stream(
            self.custom.list_namespaced_custom_object,
            GROUP, VERSION, self.namespace, PLURAL, since=since, timeout_seconds=60,
        ):  # fmt: skip
            self.on_job(kind, job, time.monotonic())

    def on_pod(self, kind: str, pod: Obj, now: float) -> None:
        if container_ended(pod) or kind == "DELETED":
            with self.lock:
                self.terminated.setdefault(pod["metadata"]["uid"], now)

    def on_job(self, kind: str, job: Obj, now: float) -> None:
        count = int((job.get("status") or {}).get("preemptions") or 0)
        with self.lock:
            self.preemptions.setdefault((job["metadata"]["name"], count), now)


def jobs(custom: client.CustomObjectsApi, namespace: str) -> list[Obj]:
    return list(custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"])


def wait_phases(
    custom: client.CustomObjectsApi, namespace: str, want: dict[str, int], timeout: float
) -> None:
    """Until at least `want[phase]` jobs are in each phase."""

    def ready() -> bool:
        phases = Counter((j.get("status") or {}).get("phase") for j in jobs(custom, namespace))
        return all(phases[p] >= n for p, n in want.items())

    wait_for(ready, timeout, f"phases {want}", every=2.0)
