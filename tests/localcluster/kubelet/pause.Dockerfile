# The pod sandbox image of the local cluster's real nodes (containerd's sandbox_image): no
# registry answers here for registry.k8s.io/pause. It only holds the pod's namespaces;
# containerd stops it with SIGKILL.
ARG BASE=debian:bookworm-slim
FROM ${BASE}
USER 65535
ENTRYPOINT ["sleep", "infinity"]
