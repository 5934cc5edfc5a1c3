"""Elastic shapes (spec.distribution.elastic): a trainer group that stays unschedulable or
queued for waitSeconds is recreated in the next shape, status.shape and an Event say so,
no counter moves, the pods are rendered in the new shape; the last shape waits; a job
without the field behaves as before; bad shapes are named."""

from __future__ import annotations

from typing import Any

from tuneop.api import names, queue
from tuneop.api import status as st
from tuneop.api.spec import job_spec, validate
from tuneop.decide.elastic import SHAPE_CHANGED
from tuneop.decide.patch import Decision
from tuneop.run import metrics
from tuneop_contract.spec import JobSpec

from tests.unit.operator_world import QUEUE, UNSCHEDULABLE, World, admit, gate, unschedulable

GPU = "nvidia.com/gpu"


def elastic_world(workers: int = 1, gpus: int = 4, **spec: Any) -> World:
    shapes = spec.pop("shapes", [{"gpusPerWorker": 2}, {"gpusPerWorker": 1}])
    w = World(workers=workers, pendingTimeoutSeconds=600, **spec)
    w.job["spec"]["distribution"].update(
        gpusPerWorker=gpus, elastic={"shapes": shapes, "waitSeconds": 30}
    )
    return w


def gpus_of(pod: dict[str, Any]) -> str:
    return str(pod["spec"]["containers"][0]["resources"]["limits"][GPU])


def shrink(w: World) -> None:
    """The group waits past waitSeconds; the next passes recreate it."""
    unschedulable(w)
    w.step(31)
    w.gc_deleted()
    w.step()


def test_an_unschedulable_group_is_recreated_in_the_next_shape() -> None:
    w = elastic_world()
    w.step()
    assert w.status[st.SHAPE] == {
        "index": 0, "name": "1x4", "workers": 1, "gpusPerWorker": 4, "gpus": 4,
    }  # fmt: skip
    assert [gpus_of(p) for p in w.pods.values()] == ["4"]
    unschedulable(w)
    d = w.step(20)
    assert w.status[st.SHAPE]["index"] == 0 and d.requeue_after is not None
    assert d.requeue_after <= 10 + 1e-6  # woken when the wait is over
    w.step(11)
    assert w.status[st.SHAPE]["name"] == "1x2" and w.status[st.SHAPE]["index"] == 1
    assert w.reasons().count(SHAPE_CHANGED) == 1
    message = next(m for _, r, m in w.events if r == SHAPE_CHANGED)
    assert "(1x4) Unschedulable for 31s (elastic.waitSeconds=30)" in message
    assert "as 1x2, elastic shape 1 of 2" in message and "Insufficient nvidia.com/gpu" in message
    assert all(p["metadata"].get("deletionTimestamp") for p in w.pods.values())
    for counter in ("restarts", "failures", "preemptions"):
        assert w.status[counter] == 0
    assert w.status["attempt"] == 1
    w.gc_deleted()
    d = w.step()
    assert d.create_pods == [0] and d.create_attempt == 1
    assert [gpus_of(p) for p in w.pods.values()] == ["2"]
    assert job_spec(w.job).distribution.gpus_per_worker == 2
    w.run_pods()
    w.step()
    assert w.status["phase"] == st.PHASE_RUNNING and w.status[st.SHAPE]["gpus"] == 2


def test_the_last_shape_waits_and_stalls_as_any_group() -> None:
    w = elastic_world(shapes=[{"gpusPerWorker": 2}])
    w.step()
    shrink(w)
    assert w.status[st.SHAPE]["index"] == 1
    unschedulable(w)
    w.step(100)
    assert w.status[st.SHAPE]["index"] == 1 and w.reasons().count(SHAPE_CHANGED) == 1
    w.step(600)
    assert w.condition(st.COND_STALLED)["status"] == "True"


def test_a_two_worker_group_shrinks_to_one_pod() -> None:
    w = elastic_world(workers=2, gpus=1, shapes=[{"workers": 1, "gpusPerWorker": 2}])
    w.step()
    assert sorted(w.pods) == ["j-worker-0", "j-worker-1"]
    shrink(w)
    assert sorted(w.pods) == ["j-worker-0"] and gpus_of(w.pods["j-worker-0"]) == "2"
    assert w.status[st.SHAPE]["name"] == "1x2"


def test_a_group_kueue_keeps_queued_moves_to_the_next_shape() -> None:
    w = elastic_world()
    w.job["metadata"]["labels"] = dict(QUEUE)
    w.step()
    gate(w)
    w.step(31)
    assert w.status[st.SHAPE]["index"] == 1
    w.gc_deleted()
    w.step()
    (pod,) = w.pods.values()
    assert gpus_of(pod) == "2" and pod["metadata"]["labels"]["tuneop.io/attempt"] == "1"


def test_without_elastic_shapes_a_group_waits_for_its_own() -> None:
    w = World(pendingTimeoutSeconds=600)
    w.step()
    unschedulable(w)
    w.step(500)
    assert st.SHAPE not in w.status and w.status["attempt"] == 0
    assert SHAPE_CHANGED not in w.reasons()


def test_bad_shapes_are_named() -> None:
    def errors(**spec: Any) -> list[str]:
        base: dict[str, Any] = {"image": "i", "hypermodel": "m:H"}
        dist = {"gpusPerWorker": 4, "elastic": {"shapes": spec.pop("shapes")}}
        return [str(e) for e in validate(JobSpec.from_dict({**base, "distribution": dist, **spec}))]

    assert errors(shapes=[{"gpusPerWorker": 2}]) == []
    assert errors(shapes=[{"gpusPerWorker": 4}]) == [
        "spec.distribution.elastic.shapes[0]: 1x4 is already a shape of the job"
    ]
    assert errors(shapes=[{"gpusPerWorker": 3}], tuner={"batchSize": 32}) == [
        "spec.distribution.elastic.shapes[0]: 1x3 is 3 replicas, which do not divide "
        "spec.tuner.batchSize 32 (the global batch is kept on every shape)"
    ]
    assert errors(shapes=[{"gpusPerWorker": 0}])[0].endswith("as distribution.gpusPerWorker")
    assert errors(shapes=[{"gpusPerWorker": 2}], pendingTimeoutSeconds=121) == []
    assert errors(shapes=[{"gpusPerWorker": 2}], pendingTimeoutSeconds=120) == [
        "spec.distribution.elastic.waitSeconds: 120 must be below pendingTimeoutSeconds "
        "(120): a group stalls before it can bend"
    ]
    rwop = {"accessModes": ["ReadWriteOncePod"]}
    assert errors(shapes=[{"workers": 2, "gpusPerWorker": 1}], checkpoint=rwop) == [
        "spec.distribution.elastic.shapes[0]: ReadWriteOncePod allows one pod: workers must be 1"
    ]
    assert errors(shapes=[{"gpusPerWorker": 2}], parallelTrials=2)[0].startswith(
        "spec.distribution.elastic: not with parallelTrials > 1"
    )


def test_the_shape_in_use_is_exported() -> None:
    w = elastic_world()
    w.step()
    assert metrics.snapshot(w.job["spec"], w.status)["tuneop_tuningjob_shape_gpus"] == 4.0
    shrink(w)
    assert metrics.snapshot(w.job["spec"], w.status)["tuneop_tuningjob_shape_gpus"] == 2.0
    assert metrics.snapshot({}, {})["tuneop_tuningjob_shape_gpus"] is None


def probes(w: World) -> dict[str, dict[str, Any]]:
    return {n: p for n, p in w.pods.items() if "-probe-" in n}


def trainers(w: World) -> dict[str, dict[str, Any]]:
    return {n: p for n, p in w.pods.items() if "-probe-" not in n}


def shrunk_and_running(w: World) -> None:
    w.step()
    shrink(w)
    w.run_pods()
    w.step()
    assert w.status[st.SHAPE]["index"] == 1 and w.status["phase"] == st.PHASE_RUNNING


def test_back_in_the_own_shape_once_its_probe_is_scheduled() -> None:
    w = elastic_world()
    shrunk_and_running(w)
    assert probes(w) == {}  # not before the smaller shape ran waitSeconds
    d = w.step(31)
    assert d.create_probes == [(0, "")]  # the pod has no node: no probe beside it
    (probe,) = probes(w).values()
    container = probe["spec"]["containers"][0]
    assert container["command"] == ["sleep", "infinity"] and gpus_of(probe) == "4"
    assert probe["spec"]["volumes"] == [] and container["volumeMounts"] == []
    assert probe["metadata"]["labels"]["app.kubernetes.io/component"] == "probe"
    probe["status"] = {"phase": "Pending", "conditions": [UNSCHEDULABLE]}
    for _ in range(3):  # the probe waits; the trainer trains on
        d = w.step(30)
        assert not d.delete_pods and not d.create_probes
    assert w.status[st.SHAPE]["index"] == 1
    probe["spec"]["nodeName"] = "gpu-node-1"
    probe["status"] = {"phase": "Running"}
    w.step()
    assert w.status[st.SHAPE]["name"] == "1x4" and w.status[st.SHAPE]["index"] == 0
    message = [m for _, r, m in w.events if r == SHAPE_CHANGED][-1]
    assert "own shape 1x4 fits again (its probe was scheduled on gpu-node-1)" in message
    assert all(p["metadata"].get("deletionTimestamp") for p in trainers(w).values())
    for counter in ("restarts", "failures", "preemptions"):
        assert w.status[counter] == 0
    # The probe holds the GPUs while the trainer checkpoints and goes ...
    d = w.step()
    assert not d.create_pods and not probe["metadata"].get("deletionTimestamp")
    w.gc_deleted()
    # ... and goes in the pass that creates the own shape's pods.
    d = w.step()
    assert d.create_pods == [0] and d.create_attempt == 2
    assert [gpus_of(p) for p in trainers(w).values()] == ["4"]
    assert probe["metadata"].get("deletionTimestamp")


def test_the_probe_waits_for_the_smaller_shape_to_have_run_not_to_exist() -> None:
    w = elastic_world()
    w.step()
    shrink(w)
    for pod in w.pods.values():  # bound, its image still being pulled
        pod["spec"]["nodeName"] = "gpu-node-0"
        pod["status"] = {"phase": "Pending"}
    w.step(40)
    assert probes(w) == {} and w.status[st.SHAPE]["index"] == 1
    w.run_pods()
    d = w.step(20)
    assert probes(w) == {} and d.requeue_after is not None and d.requeue_after <= 10 + 1e-6
    d = w.step(11)
    assert d.create_probes == [(0, ""), (-1, "gpu-node-0")]


def test_a_probe_goes_when_the_job_ends() -> None:
    w = elastic_world()
    shrunk_and_running(w)
    w.step(31)
    assert len(probes(w)) == 1
    w.terminate("j-worker-0", 0)
    w.step()
    assert w.status["phase"] == st.PHASE_SUCCEEDED
    assert all(p["metadata"].get("deletionTimestamp") for p in probes(w).values())


def queued_shrunk_and_probing(w: World) -> Decision:
    """A queued job, Queued for waitSeconds, recreated in its next shape, admitted and
    running on gpu-node-0 for waitSeconds: the decision that makes its probes."""
    w.job["metadata"]["labels"] = dict(QUEUE)
    w.step()
    gate(w)
    w.step(31)
    w.gc_deleted()
    w.step()
    admit(w)
    for pod in w.pods.values():
        pod["spec"]["nodeName"] = "gpu-node-0"
    w.run_pods()
    w.step()
    return w.step(31)


def queued_and_probing(w: World) -> dict[str, Any]:
    """A queued job shrunk to 1x2 and running there long enough: its probe, as Kueue's
    webhook leaves it (gated, held)."""
    d = queued_shrunk_and_probing(w)
    assert d.create_probes == [(names.beside(0), "gpu-node-0")]  # only the in-place one
    (probe,) = probes(w).values()
    probe["spec"]["schedulingGates"] = [{"name": queue.ADMISSION_GATE}]
    probe["metadata"]["finalizers"] = [queue.FINALIZER]
    probe["status"] = {"phase": "Pending"}
    return probe


def test_a_queued_job_moves_up_through_a_kueue_probe_beside_its_pod() -> None:
    w = elastic_world(template={"metadata": {"annotations": {"team": "vision"}}})
    probe = queued_and_probing(w)
    (trainer,) = trainers(w).values()
    labels, annotations = probe["metadata"]["labels"], probe["metadata"]["annotations"]
    assert labels[queue.QUEUE_LABEL] == "team-a" and gpus_of(probe) == "2"
    assert labels[queue.POD_GROUP_LABEL] != trainer["metadata"]["labels"][queue.POD_GROUP_LABEL]
    assert annotations[queue.POD_GROUP_TOTAL] == "1"  # a Kueue pod group of its own
    assert annotations["team"] == "vision"  # spec.template's, as on every pod of the job
    for _ in range(3):  # Kueue has no quota for it yet: the trainer trains on
        d = w.step(30)
        assert not d.delete_pods and not d.create_probes and not d.release_pods
    probe["spec"].pop("schedulingGates")  # admitted, then bound beside the pod
    probe["spec"]["nodeName"] = "gpu-node-0"
    probe["status"] = {"phase": "Running"}
    w.step()
    assert w.status[st.SHAPE]["index"] == 0
    assert not probe["metadata"].get("deletionTimestamp")  # held while the pod goes
    w.gc_deleted()
    d = w.step()
    assert d.create_pods == [0] and probe["metadata"].get("deletionTimestamp")
    assert [r.name for r in d.release_pods] == [probe["metadata"]["name"]]  # quota handed on


def test_a_queued_probe_deleted_by_someone_else_is_released_and_made_again() -> None:
    w = elastic_world()
    probe = queued_and_probing(w)
    probe["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"  # kept by the finalizer
    d = w.step()
    assert [r.name for r in d.release_pods] == [probe["metadata"]["name"]]
    w.gc_deleted()  # released: Kueue lets it go
    d = w.step()
    assert d.create_probes == [(names.beside(0), "gpu-node-0")]


def test_back_in_place_once_the_rest_of_the_own_shape_fits_beside_the_pod() -> None:
    """One pod in both shapes: a probe of the GPUs the own shape needs beyond the running
    pod's, pinned to its node, says the own shape fits there (a node of 4 GPUs)."""
    w = elastic_world()
    pool = {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["gpu"]}]}
    required = {"nodeSelectorTerms": [pool]}
    w.job["spec"]["affinity"] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}
    }
    shrunk_and_running(w)
    trainers(w)["j-worker-0"]["spec"]["nodeName"] = "gpu-node-0"
    d = w.step(31)
    assert sorted(d.create_probes) == [(-1, "gpu-node-0"), (0, "")]
    here = probes(w)["j-probe-here"]
    assert gpus_of(here) == "2" and gpus_of(probes(w)["j-probe-0"]) == "4"
    # only the GPUs: the running pod's CPU and memory are freed with it
    assert here["spec"]["containers"][0]["resources"] == {
        "limits": {GPU: "2"}, "requests": {GPU: "2"},
    }  # fmt: skip
    assert here["spec"]["automountServiceAccountToken"] is False
    (term,) = here["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]  # fmt: skip
    assert term["matchFields"] == [
        {"key": "metadata.name", "operator": "In", "values": ["gpu-node-0"]}
    ]
    assert term["matchExpressions"][0]["key"] == "pool"  # the job's own terms kept
    assert "matchFields" not in str(w.job["spec"]["affinity"])  # the spec is not changed
    here["spec"]["nodeName"] = "gpu-node-0"
    w.step()
    assert w.status[st.SHAPE]["index"] == 0
    message = [m for _, r, m in w.events if r == SHAPE_CHANGED][-1]
    assert "its probe was scheduled on gpu-node-0" in message
    assert all(p["metadata"].get("deletionTimestamp") for p in trainers(w).values())


def test_an_ended_probe_is_no_fit_and_is_made_again() -> None:
    w = elastic_world()
    shrunk_and_running(w)
    w.step(31)
    (probe,) = probes(w).values()
    probe["spec"]["nodeName"] = "gpu-node-1"
    probe["status"] = {"phase": "Failed", "reason": "UnexpectedAdmissionError"}
    w.step()
    assert w.status[st.SHAPE]["index"] == 1  # not moved up
    assert probe["metadata"].get("deletionTimestamp")
    w.gc_deleted()
    d = w.step()
    assert d.create_probes == [(0, "")]


def test_two_workers_move_back_up_once_the_second_fits_beside_the_first() -> None:
    """2x2 shrunk to one pod of 2 GPUs on a node of 4: the own shape fits once a second
    2-GPU pod does - the running pod hands its node to the first worker. Probing only
    the whole 2x2 shape would need 4 more GPUs and never fit there."""
    w = elastic_world(workers=2, gpus=2, shapes=[{"workers": 1, "gpusPerWorker": 2}])
    shrunk_and_running(w)
    for pod in trainers(w).values():
        pod["spec"]["nodeName"] = "gpu-node-0"
    d = w.step(31)
    assert d.create_probes == [(1, "")]  # not all of 2x2 too: its pod 0 would take the slot
    second = probes(w)["j-probe-1"]
    assert gpus_of(second) == "2" and "nodeName" not in second["spec"]
    second["spec"]["nodeName"] = "gpu-node-0"
    second["status"] = {"phase": "Running"}
    w.step()
    assert w.status[st.SHAPE]["name"] == "2x2"
    message = [m for _, r, m in w.events if r == SHAPE_CHANGED][-1]
    assert "own shape 2x2 fits again (its probe was scheduled on gpu-node-0)" in message


def test_a_queued_two_worker_job_probes_its_second_worker_through_kueue() -> None:
    w = elastic_world(workers=2, gpus=2, shapes=[{"workers": 1, "gpusPerWorker": 2}])
    d = queued_shrunk_and_probing(w)
    assert d.create_probes == [(1, "")]  # one pod: the GPUs beyond the running group's
    (probe,) = probes(w).values()
    assert probe["metadata"]["labels"][queue.QUEUE_LABEL] == "team-a"
    assert probe["metadata"]["annotations"][queue.POD_GROUP_TOTAL] == "1"
