#!/usr/bin/env bash
# Copy best_model.keras and results.json of a succeeded TuningJob off its checkpoint claim:
#
#   hack/fetch-results.sh JOB [NAMESPACE] [DEST_DIR]
#
# Needs only kubectl rights to create, read the logs of and delete a pod in the job's
# namespace (no `kubectl exec`, which `kubectl cp` needs and many clusters forbid). A
# short-lived pod of the job's own image mounts the claim read-only, packs the two files
# and prints them base64-encoded with their SHA-256 on its log; this script decodes the
# log, checks the digest and unpacks into DEST_DIR (default: the current directory), then
# deletes the pod. The pod meets the restricted Pod Security level, like the trainer's.
# An archive larger than MAX_BYTES is refused with a message (kubelets rotate a container
# log at containerLogMaxSize, 10Mi by default, which would cut it): copy such a model with
# `kubectl cp` from a pod that mounts the claim instead (docs/design/operator.md,
# "Results a user can reach").
#
# KUBECTL: the kubectl command (default: kubectl; may carry flags, e.g. --kubeconfig F).
# IMAGE: the helper pod's image (default: the job's spec.image; it needs sh, tar, base64
# and sha256sum, which the trainer image has). TIMEOUT: seconds to wait for the pod (300).
# RUN_AS_USER: the helper's uid (default: the job template's runAsUser, else 1000, the
# operator's default TUNEOP_OPERATOR_TRAINER_UID; the trainer's files are world-readable
# under the default umask, so any non-root uid reads them).
set -euo pipefail

usage() { echo "usage: $0 JOB [NAMESPACE] [DEST_DIR]" >&2; exit 2; }
[[ $# -ge 1 && $# -le 3 && -n $1 ]] || usage
TOOL=fetch-results
# shellcheck source=hack/lib/claim-pod.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/claim-pod.sh"
dest=${3:-.}
max_bytes=${MAX_BYTES:-7000000}

phase=$(k get tuningjob "$job" -o jsonpath='{.status.phase}')
[[ $phase == Succeeded ]] ||
  fail "TuningJob $namespace/$job is ${phase:-new}; best_model.keras and results.json are written when the search succeeds"
mkdir -p "$dest"
pod=$job-results-$RANDOM  # at most 45 + 14 characters, under the 63 of a pod name

# The pod exits 3 rather than print an archive the kubelet's log rotation would cut.
manifest=$(cat <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $pod
  labels: {app.kubernetes.io/name: tuneop-results, tuneop.io/results-of: $job}
spec:
  restartPolicy: Never
  automountServiceAccountToken: false
  securityContext:
    runAsNonRoot: true
    runAsUser: $user
    runAsGroup: $group
    fsGroup: $group
    seccompProfile: {type: RuntimeDefault}
  tolerations: [{operator: Exists, effect: NoSchedule}]
  containers:
  - name: results
    image: "$image"
    env: [{name: MAX_BYTES, value: "$max_bytes"}]
    resources: {requests: {cpu: 10m, memory: 32Mi}}
    securityContext:
      allowPrivilegeEscalation: false
      capabilities: {drop: [ALL]}
    volumeMounts:
    - {name: claim, mountPath: /results, readOnly: true}
    - {name: out, mountPath: /out}
    command: [sh, -c]
    args:
    - |
      set -eu
      cd /results
      tar -czf /out/results.tgz best_model.keras results.json
      size=\$(wc -c </out/results.tgz)
      if [ "\$size" -gt "\$MAX_BYTES" ]; then
        echo "archive of \$size bytes is above MAX_BYTES=\$MAX_BYTES; copy it with kubectl cp" >&2
        exit 3
      fi
      base64 /out/results.tgz
      echo "sha256 \$(sha256sum /out/results.tgz | cut -d' ' -f1)"
  volumes:
  - {name: claim, persistentVolumeClaim: {claimName: $claim, readOnly: true}}
  - {name: out, emptyDir: {}}
EOF
)
k create -f - >/dev/null <<<"$manifest"
trap 'k delete pod "$pod" --ignore-not-found --wait=false >/dev/null 2>&1 || true' EXIT

deadline=$((SECONDS + timeout))
while :; do
  state=$(k get pod "$pod" -o jsonpath='{.status.phase}')
  [[ $state == Succeeded ]] && break
  [[ $state == Failed ]] && fail "pod $namespace/$pod failed: $(k logs "$pod" --tail=5 2>&1)"
  ((SECONDS < deadline)) || fail "pod $namespace/$pod still ${state:-Pending} after ${timeout}s"
  sleep 1
done

log=$(mktemp)
archive=$(mktemp)
trap 'rm -f "$log" "$archive"; k delete pod "$pod" --ignore-not-found --wait=false >/dev/null 2>&1 || true' EXIT
k logs "$pod" >"$log"
want=$(sed -n 's/^sha256 //p' "$log")
grep -v '^sha256 ' "$log" | base64 -d >"$archive"
got=$(sha256sum "$archive" | cut -d' ' -f1)
[[ -n $want && $got == "$want" ]] || fail "the archive read from the log is damaged (sha256 $got, pod said ${want:-nothing})"
tar -xzf "$archive" -C "$dest"
echo "fetch-results: wrote $dest/best_model.keras and $dest/results.json (from claim $claim)"
