"""Local node agent: TEST INFRASTRUCTURE, not product.

A small stand-in for the kubelet, so pods scheduled by the real kube-scheduler run as
local processes on this machine. One :class:`~tests.localcluster.nodeagent.agent.NodeAgent`
per Node object; :mod:`tests.localcluster.cluster` runs them next to the control plane.

What it does, per node:
- registers the Node (capacity/allocatable ``cpu``, ``memory``, ``pods`` and
  ``nvidia.com/gpu``), keeps the Ready condition and the ``kube-node-lease`` Lease fresh;
- watches pods with ``spec.nodeName=<node>`` and runs every container's command as a
  local process in private mount and UTS namespaces through :mod:`.launch`, which
  bind-mounts the pod's volumes at their mountPath (PVC, emptyDir, configMap, secret,
  downwardAPI, projected service-account token, hostPath), a per-pod
  ``/etc/hosts`` and a per-container termination-message file, then execs the command
  (with ``fork_python``, a Python container is instead forked from the agent's fork
  server, tests/forkserver.py, which makes the same container in the child);
- gives each pod its own loopback address (``127.<network>.<node>.<n>``, the network
  from :data:`.agent.POD_NETWORK_ENV`, reported as ``status.podIP``) and reports
  truthful pod status; honours restartPolicy and the deletion grace period (SIGTERM,
  wait, SIGKILL, then delete with grace 0);
- serves container logs over HTTPS on the kubelet port, so ``kubectl logs [-f]`` works.

Image mapping rule (images are never pulled): see :func:`.podspec.container_argv`.
A command starting with ``python``/``python3`` runs with the agent's own interpreter
(the repository virtualenv) and the repository on PYTHONPATH; any other command runs as
found on the host PATH; a container without a command runs the entry point registered
for its image in :data:`.podspec.IMAGE_ENTRYPOINTS` (``tuneop/trainer`` →
``python -m tuneop_trainer``), else ``sleep infinity`` (like a pause container). A
container without ``workingDir`` starts in its image's writable WORKDIR
(:data:`.podspec.IMAGE_WORKDIRS`, a fresh directory each run), else in ``/``.

Ignored (documented, not faked): images, probes (containers count as ready once
started), cpu and memory requests and limits (no cgroups: a memory limit and its
OOMKilled are tested on real nodes, tests/e2e/test_real_containers.py), runAsUser/runAsGroup
(the repository virtualenv lives under /root), network isolation (pods share the host
network namespace; distinct pod IPs only), Services' cluster IPs (no kube-proxy).
"""
