"""Local Kubernetes cluster for tests, the demo and the benchmarks (test infrastructure).

A real control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler)
built from the Go module proxy at the versions pinned in hack/cluster-tools/versions.env
(see :mod:`tests.localcluster.tools`), started on loopback ports with generated
certificates, plus node agents that run the pods as local processes. ``python -m
tests.localcluster up|down|status`` keeps one running in the background for
`make cluster-up` / `make demo`.

Public API (the rest is internal; only the pytest plugin and the tests import pytest):

- Start and stop: :class:`~tests.localcluster.controlplane.ControlPlane` ``(workdir)``:
  ``start()`` returns once pods can be created, ``stop()`` (idempotent, also at exit)
  leaves no process behind; ``kubectl(...)``, ``api_client()``, ``kubeconfig``,
  ``bin_dir`` (kubectl, helm), ``restart_apiserver()``. On it,
  :class:`~tests.localcluster.cluster.LocalCluster` ``(control_plane, workdir,
  nodes=None)`` with ``start()``/``stop()``: node agents (default one node
  ``gpu-node-0`` with 4 ``nvidia.com/gpu``;
  :class:`~tests.localcluster.nodeagent.agent.NodeConfig` for others, also through
  ``add_node()``/``remove_node()``) and the ``local-path`` StorageClass; its helpers
  ``api``, ``core``, ``create_namespace()``, ``pod()``, ``wait_for_pod_*()``,
  ``logs()``, ``wait_for()``. :func:`~tests.localcluster.cluster.wait_for` polls any
  predicate, :func:`~tests.localcluster.controlplane.free_port` picks a loopback port.
- Disruptions: :mod:`tests.localcluster.disruption` does what the real event does,
  through the real control plane: ``evict_pod``, ``delete_pod``, ``crash_node`` /
  ``recover_node`` / ``delete_node``, ``preempt_with_priority``.
- Kueue: :class:`~tests.localcluster.kueue.Kueue` ``(control_plane)``: its manager as a
  local process with its webhooks registered, ``start()``/``stop()``; the label and
  gate names pods carry.
- The stand-in trainer: :mod:`tests.localcluster.standin_trainer` speaks the trainer's
  side of the progress contract without TensorFlow; ``env(trials, seconds)`` is the
  TuningJob ``spec.env`` that runs it instead of the real trainer.
- Test pods: :mod:`tests.localcluster.python_pods` (a pod running a Python snippet).
- Pytest: :mod:`tests.localcluster.pytest_plugin` holds the session fixtures
  ``control_plane``, ``cluster`` and ``kueue`` (registered by tests/conftest.py).
- The background daemon's hooks: ``tests.localcluster.cluster:up_hook`` and
  ``tests.localcluster.kueue:up_hook``.
"""
