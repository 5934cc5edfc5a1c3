#!/usr/bin/env bash
# Copy the results of a succeeded TuningJob off its checkpoint claim: results.json, the
# trainer's best_model.keras (spec mode) and the script's outputs/ (script mode: what the
# script wrote to relative paths, e.g. its own best_model.keras):
#
#   tuneop results JOB [-n NAMESPACE] [DEST_DIR]   (or, from a checkout, hack/fetch-results.sh JOB [NAMESPACE] [DEST_DIR])
#
# A short-lived pod of the job's trainer image mounts the claim read-only and packs those
# files into one archive with its SHA-256; this script copies it, checks the digest,
# unpacks into DEST_DIR (default: the current directory) and deletes the pod. The pod
# meets the restricted Pod Security level, like the trainer's. How the archive travels:
# up to MAX_BYTES (default 7000000) base64 on the pod's log, which needs only the rights
# to create, read the logs of and delete a pod (many clusters forbid `kubectl exec`);
# above it (a kubelet rotates a container log at containerLogMaxSize, 10Mi by default,
# and would cut it) through `kubectl exec ... cat`, which needs pods/exec: any size.
#
# KUBECTL: the kubectl command (default: kubectl; may carry flags, e.g. --kubeconfig F).
# IMAGE: the helper pod's image (default: the job's spec.image, else its trainer pod's;
# it needs sh, tar, base64 and sha256sum, which the trainer image has). TIMEOUT: seconds to wait for the pod (300).
# RUN_AS_USER: the helper's uid (default: the job template's runAsUser, else 1000, the
# operator's default TUNEOP_OPERATOR_TRAINER_UID; the trainer's files are world-readable
# under the default umask, so any non-root uid reads them).
set -euo pipefail

usage() { echo "usage: $0 JOB [NAMESPACE] [DEST_DIR]" >&2; exit 2; }
[[ $# -ge 1 && $# -le 3 && -n $1 ]] || usage
TOOL=fetch-results
# shellcheck source=client/tuneop_client/scripts/lib/claim-pod.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/claim-pod.sh"
dest=${3:-.}
max_bytes=${MAX_BYTES:-7000000}

phase=$(k get tuningjob "$job" -o jsonpath='{.status.phase}')
[[ $phase == Succeeded ]] ||
  fail "TuningJob $namespace/$job is ${phase:-new}; best_model.keras and results.json are written when the search succeeds"
mkdir -p "$dest"
pod=$job-results-$RANDOM  # at most 45 + 14 characters, under the 63 of a pod name

manifest=$(helper_pod_head results "$prefer_node_yaml"; cat <<EOF
  containers:
  - name: results
    image: "$image"
    env: [{name: MAX_BYTES, value: "$max_bytes"}, {name: HOLD_SECONDS, value: "$timeout"}]
    resources: {requests: {cpu: 10m, memory: 32Mi}}
    $container_security_yaml
    volumeMounts:
    - {name: claim, mountPath: /results, readOnly: true}
    - {name: out, mountPath: /out}
    command: [sh, -c]
    args:
    - |
      set -eu
      cd /results
      # results.json, the trainer's best_model.keras (spec mode) and what a script saved
      # in its working directory on the claim (script mode: outputs/)
      files=""
      for f in results.json best_model.keras outputs; do [ -e "\$f" ] && files="\$files \$f"; done
      tar -czf /out/results.tgz \$files
      size=\$(wc -c </out/results.tgz)
      echo "archive \$size \$(sha256sum /out/results.tgz | cut -d' ' -f1)"
      if [ "\$size" -gt "\$MAX_BYTES" ]; then
        echo "copy with exec"   # too large for the log: wait to be copied, then deleted
        exec sleep "\$HOLD_SECONDS"
      fi
      base64 /out/results.tgz
  volumes:
  - {name: claim, persistentVolumeClaim: {claimName: $claim, readOnly: true}}
  - {name: out, emptyDir: {}}
EOF
)
log=$(mktemp)
err=$(mktemp)
archive=$(mktemp)
trap 'rm -f "$log" "$err" "$archive"; k delete pod "$pod" --ignore-not-found --wait=false >/dev/null 2>&1 || true' EXIT
k create -f - >/dev/null <<<"$manifest"
deadline=$((SECONDS + timeout))
while :; do  # done (the archive on the log) or holding it for exec
  state=$(k get pod "$pod" -o jsonpath='{.status.phase}')
  [[ $state == Succeeded ]] && break
  [[ $state == Failed ]] && fail "pod $namespace/$pod failed: $(k logs "$pod" --tail=5 2>&1)"
  [[ $state == Running ]] && k logs "$pod" 2>/dev/null | grep -q '^copy with exec$' && break
  ((SECONDS < deadline)) || fail "pod $namespace/$pod still ${state:-Pending} after ${timeout}s"
  sleep 1
done

k logs "$pod" >"$log"
read -r _ size want < <(grep '^archive ' "$log")
if grep -q '^copy with exec$' "$log"; then
  k exec "$pod" -- cat /out/results.tgz >"$archive" 2>"$err" ||
    fail "the archive is $size bytes, above MAX_BYTES=$max_bytes, so it is copied with kubectl exec, which failed: $(tail -n1 "$err")"
else
  grep -v -e '^archive ' "$log" | base64 -d >"$archive"
fi
got=$(sha256sum "$archive" | cut -d' ' -f1)
[[ -n ${want:-} && $got == "$want" ]] || fail "the archive copied is damaged (sha256 $got, pod said ${want:-nothing})"
tar -xzf "$archive" -C "$dest"
echo "fetch-results: wrote $(tar -tzf "$archive" | cut -d/ -f1 | sort -u | tr '\n' ' ')to $dest ($size bytes, sha256 $got, from claim $claim)"
