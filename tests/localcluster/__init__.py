"""Local Kubernetes cluster for tests and the demo (test infrastructure).

A real control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler)
built from the Go module proxy at the versions pinned in hack/cluster-tools/versions.env
(see :mod:`tests.localcluster.tools`), started on loopback ports with generated
certificates (:mod:`tests.localcluster.controlplane`).  ``python -m tests.localcluster
up|down`` keeps one running in the background for `make cluster-up` / `make demo`.
"""
