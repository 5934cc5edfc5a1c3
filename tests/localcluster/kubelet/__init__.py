"""Real nodes for the local cluster: the kubelet built from the Go module proxy, over
Debian's containerd and runc, with pods on a CNI bridge (test infrastructure).

:class:`~.node.KubeletNode` starts one node: containerd (:mod:`.runtime`) with the images
of `make images` imported, a kubelet registered with the control plane, and GPUs
advertised as an extended resource of the Node. See docs/design/local-cluster.md,
"Real nodes".
"""
