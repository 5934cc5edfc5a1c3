# shellcheck shell=bash
# Sourced by hack/fetch-results.sh and hack/tensorboard.sh (after their usage check,
# with their arguments JOB [NAMESPACE] ...): kubectl in the job's namespace (`k`), the
# one-line `fail`, and what a helper pod that mounts the job's checkpoint claim needs:
# `claim`, `image` (IMAGE, else the job's spec.image) and the trainer's `user` and
# `group` (RUN_AS_USER, else the job template's, else 1000, the operator's default
# TUNEOP_OPERATOR_TRAINER_UID), so the helper reads what the trainer wrote.
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
image=${IMAGE:-$(k get tuningjob "$job" -o jsonpath='{.spec.image}')}
user=$(k get tuningjob "$job" -o jsonpath='{.spec.template.spec.securityContext.runAsUser}')
group=$(k get tuningjob "$job" -o jsonpath='{.spec.template.spec.securityContext.fsGroup}')
user=${RUN_AS_USER:-${user:-1000}}
group=${group:-$user}
