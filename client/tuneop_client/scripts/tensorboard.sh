#!/usr/bin/env bash
# Serve the TensorBoard logs of a TuningJob from its checkpoint claim:
#
#   tuneop tensorboard JOB [-n NAMESPACE] [--port P]   (or hack/tensorboard.sh JOB [NAMESPACE] [LOCAL_PORT])
#
# Starts a pod of the job's own image that mounts the claim read-only and runs
# `tensorboard --logdir <claim>/tensorboard`, waits until it serves, then
# `kubectl port-forward`s LOCAL_PORT (default 6006) to it: open http://localhost:6006.
# Ctrl-C stops the forward and deletes the pod. The logs are those of the script's
# TensorBoard callbacks (script mode keeps them on the claim, one run per trial with its
# HParams; docs/user-guide.md, "TensorBoard"); it works while the search runs and after.
# While a trainer pod runs, the helper lands on its node (a ReadWriteOnce claim is
# mounted on one node only). The pod meets the restricted Pod Security level.
#
# KUBECTL: the kubectl command (default: kubectl; may carry flags, e.g. --kubeconfig F).
# IMAGE: the pod's image (default: the job's spec.image, else its trainer pod's; it has TensorBoard).
# TIMEOUT: seconds to wait for the pod (300). RUN_AS_USER: as in fetch-results.sh.
# NO_FORWARD=1: print the pod's name and IP and leave it running instead of forwarding
# (for clusters where the pod network is reachable; delete the pod when done).
set -euo pipefail

usage() { echo "usage: $0 JOB [NAMESPACE] [LOCAL_PORT]" >&2; exit 2; }
[[ $# -ge 1 && $# -le 3 && -n $1 ]] || usage
TOOL=tensorboard
port=${3:-6006}
[[ $port =~ ^[0-9]+$ ]] || { echo "tensorboard: LOCAL_PORT must be a number, got '$port'" >&2; exit 2; }
# shellcheck source=client/tuneop_client/scripts/lib/claim-pod.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/claim-pod.sh"
# the node of a running trainer pod, if any: a ReadWriteOnce claim is mounted there
node=$(k get pods -l "tuneop.io/tuningjob=$job" --field-selector=status.phase=Running \
  -o jsonpath='{.items[0].spec.nodeName}' 2>/dev/null || true)
pod=$job-tensorboard-$RANDOM
placement=""
[[ -n $node ]] && placement="nodeSelector: {kubernetes.io/hostname: $node}"

manifest=$(helper_pod_head tensorboard "$placement"; cat <<EOF
  containers:
  - name: tensorboard
    image: "$image"
    command: [python, -m, tensorboard.main]
    args: [--logdir, /claim/tensorboard, --bind_all, --port, "6006"]
    ports: [{name: http, containerPort: 6006}]
    env: [{name: HOME, value: /tmp}]
    resources: {requests: {cpu: 100m, memory: 256Mi}}
    $container_security_yaml
    volumeMounts:
    - {name: claim, mountPath: /claim, readOnly: true}
  volumes:
  - {name: claim, persistentVolumeClaim: {claimName: $claim, readOnly: true}}
EOF
)
cleanup() { k delete pod "$pod" --ignore-not-found --wait=false >/dev/null 2>&1 || true; }
trap cleanup EXIT
k create -f - >/dev/null <<<"$manifest"

deadline=$((SECONDS + timeout))
while :; do
  state=$(k get pod "$pod" -o jsonpath='{.status.phase}')
  [[ $state == Running ]] && break
  [[ $state == Failed || $state == Succeeded ]] &&
    fail "pod $namespace/$pod ended ($state): $(k logs "$pod" --tail=5 2>&1)"
  ((SECONDS < deadline)) || fail "pod $namespace/$pod still ${state:-Pending} after ${timeout}s"
  sleep 1
done

if [[ ${NO_FORWARD:-} == 1 ]]; then
  trap - EXIT
  echo "pod $pod ip $(k get pod "$pod" -o jsonpath='{.status.podIP}') port 6006"
  exit 0
fi
echo "tensorboard: serving $namespace/$claim on http://localhost:$port (Ctrl-C stops it)"
k port-forward "pod/$pod" "$port:6006"
