# shellcheck shell=bash
# Sourced by fetch-results.sh and tensorboard.sh (after their usage check,
# with their arguments JOB [NAMESPACE] ...): kubectl in the job's namespace (`k`), the
# one-line `fail`, and what a helper pod that mounts the job's checkpoint claim needs:
# `claim`, `image` (IMAGE, else the job's spec.image, else its trainer pod's),
# `helper_spec_yaml` (the spec lines every helper pod has), `prefer_node_yaml` (the
# node its last trainer pod ran on, preferred) and the trainer's `user` and
# `group` (RUN_AS_USER, else the job template's, else 1000, the operator's default
# TUNEOP_OPERATOR_TRAINER_UID), so the helper reads what the trainer wrote; and
# `helper_pod_head`, the start of a helper pod's manifest.
# Needs TOOL (the prefix of error messages). Sets `timeout` (TIMEOUT, default 300 s).
job=$1
read -r -a kubectl <<<"${KUBECTL:-kubectl}"
namespace=${2:-$("${kubectl[@]}" config view --minify -o jsonpath='{..namespace}' 2>/dev/null || true)}
namespace=${namespace:-default}
timeout=${TIMEOUT:-300}
k() { "${kubectl[@]}" -n "$namespace" "$@"; }
fail() { echo "$TOOL: $*" >&2; exit 1; }

k get tuningjob "$job" -o name >/dev/null 2>&1 || fail "no TuningJob $namespace/$job"
claim=$(k get tuningjob "$job" -o jsonpath='{.spec.checkpoint.existingClaim}')
claim=${claim:-$job-ckpt}
# the job's trainer pods (a finished job keeps its last ones) carry the image the operator
# chose (spec.image or its default) and the pull secrets
trainer_pod() { k get pods -l "tuneop.io/tuningjob=$job" -o jsonpath="{.items[0].$1}" 2>/dev/null || true; }
image=${IMAGE:-$(k get tuningjob "$job" -o jsonpath='{.spec.image}')}
image=${image:-$(trainer_pod 'spec.containers[0].image')}
[[ -n $image ]] || fail "TuningJob $namespace/$job names no image and has no trainer pod to take it from: set IMAGE=<its trainer image>"
pull_secrets=$(trainer_pod 'spec.imagePullSecrets[*].name')
# prefer the node the job's trainer ran on: it has the image (GBs for the GPU trainer)
# and a ReadWriteOnce claim attaches there; any node that can mount the claim will do
last_node=$(k get pods -l "tuneop.io/tuningjob=$job" --sort-by=.metadata.creationTimestamp \
  -o jsonpath='{.items[-1:].spec.nodeName}' 2>/dev/null || true)
prefer_node_yaml=""
[[ -n $last_node ]] && prefer_node_yaml="affinity: {nodeAffinity: {preferredDuringSchedulingIgnoredDuringExecution: [{weight: 100, preference: {matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [$last_node]}]}}]}}"
pull_secrets_yaml=""
for secret in $pull_secrets; do pull_secrets_yaml+="{name: $secret}, "; done
pull_secrets_yaml="imagePullSecrets: [${pull_secrets_yaml%, }]"
user=$(k get tuningjob "$job" -o jsonpath='{.spec.template.spec.securityContext.runAsUser}')
group=$(k get tuningjob "$job" -o jsonpath='{.spec.template.spec.securityContext.fsGroup}')
user=${RUN_AS_USER:-${user:-1000}}
group=${group:-$user}
# The helper pod's spec lines both scripts share (one line per key, indented for a
# heredoc's `spec:`): never restarted, no API token, the trainer's pull secrets, its
# part of the restricted Pod Security level, and tolerations (it may have to reach a
# claim bound to a tainted GPU node).
helper_spec_yaml="restartPolicy: Never
  automountServiceAccountToken: false
  $pull_secrets_yaml
  securityContext: {runAsNonRoot: true, runAsUser: $user, runAsGroup: $group, fsGroup: $group, seccompProfile: {type: RuntimeDefault}}
  tolerations: [{operator: Exists, effect: NoSchedule}]"

# A container's part of the restricted Pod Security level.
container_security_yaml="securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}"

# `helper_pod_head ROLE PLACEMENT`: a helper pod's manifest up to its containers, named
# $pod, labelled tuneop-ROLE (of the job); PLACEMENT is a spec line choosing its node, or "".
helper_pod_head() {
  cat <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $pod
  labels: {app.kubernetes.io/name: tuneop-$1, tuneop.io/$1-of: $job}
spec:
  $helper_spec_yaml
  $2
EOF
}
