{{/*
tuneop's alerting rules as Prometheus rule groups. Used by prometheusrule.yaml and
rendered into the plain rules file manifests/prometheus/tuneop-rules.yaml by
hack/render-manifests.sh. One runbook section per alert: docs/runbooks.md.
The operator exports one series per TuningJob (labels namespace, tuningjob); only the
active replica exports them (a standby's leader gauge is 0 and it exports none), but
during a hand-over both may, so every per-job expression aggregates with max by
(namespace, tuningjob) first (TuneopJobStalled keeps the Stalled reason too: label
reason of tuneop_tuningjob_stalled).
*/}}
{{- define "tuneop.alertRules" -}}
{{- $r := .Values.prometheusRule -}}
groups:
  - name: tuneop.rules
    rules:
      - alert: TuneopTrialStalled
        expr: |-
          (
            time() - max by (namespace, tuningjob) (tuneop_tuningjob_last_progress_timestamp_seconds > 0)
          )
          > max by (namespace, tuningjob) (tuneop_tuningjob_stall_timeout_seconds)
          and on (namespace, tuningjob)
            max by (namespace, tuningjob) (tuneop_tuningjob_phase{phase="Running"}) == 1
        for: {{ $r.trialStalled.for }}
        labels:
          severity: {{ $r.trialStalled.severity }}
        annotations:
          summary: TuningJob {{`{{ $labels.namespace }}/{{ $labels.tuningjob }}`}} has made no progress for {{`{{ $value | humanizeDuration }}`}}.
          description: >-
            The trainer of running TuningJob {{`{{ $labels.namespace }}/{{ $labels.tuningjob }}`}}
            last reported progress {{`{{ $value | humanizeDuration }}`}} ago, longer than the
            job's spec.stallTimeoutSeconds.
          runbook_url: {{ $r.runbookBaseUrl }}#tuneoptrialstalled
      - alert: TuneopJobStalled
        expr: |-
          max by (namespace, tuningjob, reason) (tuneop_tuningjob_stalled) == 1
        for: {{ $r.jobStalled.for }}
        labels:
          severity: {{ $r.jobStalled.severity }}
        annotations:
          summary: The operator marked TuningJob {{`{{ $labels.namespace }}/{{ $labels.tuningjob }}`}} Stalled ({{`{{ $labels.reason }}`}}).
          description: >-
            TuningJob {{`{{ $labels.namespace }}/{{ $labels.tuningjob }}`}} has condition
            Stalled=True with reason {{`{{ $labels.reason }}`}}: its trainer reported no
            progress for longer than spec.stallTimeoutSeconds (NoProgress, counted from
            the trainer's start when it never reported any), or its pods have not started
            for longer than spec.pendingTimeoutSeconds (the reason says why). The
            condition's message says how long and what the cluster said.
          runbook_url: {{ $r.runbookBaseUrl }}#tuneopjobstalled
      - alert: TuneopCheckpointTooOld
        expr: |-
          (
            time() - max by (namespace, tuningjob) (tuneop_tuningjob_last_checkpoint_timestamp_seconds > 0)
          )
          > max by (namespace, tuningjob) (tuneop_tuningjob_stall_timeout_seconds)
          and on (namespace, tuningjob)
            (
              time() - max by (namespace, tuningjob) (tuneop_tuningjob_last_progress_timestamp_seconds > 0)
            )
            <= max by (namespace, tuningjob) (tuneop_tuningjob_stall_timeout_seconds)
          and on (namespace, tuningjob)
            max by (namespace, tuningjob) (tuneop_tuningjob_phase{phase="Running"}) == 1
        for: {{ $r.checkpointTooOld.for }}
        labels:
          severity: {{ $r.checkpointTooOld.severity }}
        annotations:
          summary: TuningJob {{`{{ $labels.namespace }}/{{ $labels.tuningjob }}`}} has not checkpointed for {{`{{ $value | humanizeDuration }}`}}.
          description: >-
            The trainer of running TuningJob {{`{{ $labels.namespace }}/{{ $labels.tuningjob }}`}}
            still makes progress but wrote its last checkpoint {{`{{ $value | humanizeDuration }}`}}
            ago, longer than the job's spec.stallTimeoutSeconds: a preemption now loses all
            the work since.
          runbook_url: {{ $r.runbookBaseUrl }}#tuneopcheckpointtooold
      - alert: TuneopFailureBudgetLow
        expr: |-
          max by (namespace, tuningjob) (tuneop_tuningjob_failures_total)
          / max by (namespace, tuningjob) (tuneop_tuningjob_max_failures > 0)
          >= {{ $r.failureBudget.ratio }}
          unless on (namespace, tuningjob)
            max by (namespace, tuningjob) (tuneop_tuningjob_phase{phase="Failed"}) == 1
          unless on (namespace, tuningjob)
            max by (namespace, tuningjob) (tuneop_tuningjob_phase{phase="Succeeded"}) == 1
        for: {{ $r.failureBudget.for }}
        labels:
          severity: {{ $r.failureBudget.severity }}
        annotations:
          summary: TuningJob {{`{{ $labels.namespace }}/{{ $labels.tuningjob }}`}} has used {{`{{ $value | humanizePercentage }}`}} of its failure budget.
          description: >-
            The trainer of TuningJob {{`{{ $labels.namespace }}/{{ $labels.tuningjob }}`}} failed
            {{`{{ $value | humanizePercentage }}`}} of spec.failurePolicy.maxFailures times;
            the job fails when the count exceeds maxFailures.
          runbook_url: {{ $r.runbookBaseUrl }}#tuneopfailurebudgetlow
      - alert: TuneopJobFailed
        expr: |-
          max by (namespace, tuningjob) (tuneop_tuningjob_phase{phase="Failed"}) == 1
          and on (namespace, tuningjob)
            time() - max by (namespace, tuningjob) (tuneop_tuningjob_completion_timestamp_seconds)
            < {{ $r.jobFailed.windowSeconds }}
        for: {{ $r.jobFailed.for }}
        labels:
          severity: {{ $r.jobFailed.severity }}
        annotations:
          summary: TuningJob {{`{{ $labels.namespace }}/{{ $labels.tuningjob }}`}} failed.
          description: >-
            TuningJob {{`{{ $labels.namespace }}/{{ $labels.tuningjob }}`}} is in phase Failed:
            its failure, preemption or trial OOM budget ran out (FailureBudgetExceeded,
            PreemptionBudgetExceeded, TrialOOMBudgetExceeded), its spec is invalid
            (InvalidSpec), or it stalled under stallPolicy Fail (Stalled); the reason of its
            Failed condition says which. The alert resolves {{ $r.jobFailed.windowSeconds }} s
            after the failure.
          runbook_url: {{ $r.runbookBaseUrl }}#tuneopjobfailed
      {{- /* the increase of the job's count over every series of it: each operator
      replica that exported it (another instance after a take-over or a restart) holds
      part of it, so the series are joined before the increase (a subquery); a job
      re-created under its name restarts from 0, which increase() takes as a reset */}}
      - alert: TuneopPreemptionStorm
        expr: |-
          increase((max by (namespace, tuningjob) (tuneop_tuningjob_preemptions_total))[{{ $r.preemptionStorm.window }}:])
          > {{ $r.preemptionStorm.threshold }}
        for: {{ $r.preemptionStorm.for }}
        labels:
          severity: {{ $r.preemptionStorm.severity }}
        annotations:
          summary: TuningJob {{`{{ $labels.namespace }}/{{ $labels.tuningjob }}`}} was preempted {{`{{ $value | printf "%.0f" }}`}} times in {{ $r.preemptionStorm.window }}.
          description: >-
            The trainer pods of TuningJob {{`{{ $labels.namespace }}/{{ $labels.tuningjob }}`}}
            keep being preempted or evicted (more than {{ $r.preemptionStorm.threshold }} times
            in {{ $r.preemptionStorm.window }}); each restart costs the work since the last
            checkpoint and eats the preemption budget (spec.failurePolicy.maxPreemptions).
          runbook_url: {{ $r.runbookBaseUrl }}#tuneoppreemptionstorm
      - alert: TuneopReconcileFailing
        expr: |-
          (
            time() - max by (namespace, tuningjob) (tuneop_tuningjob_last_reconcile_success_timestamp_seconds)
          )
          > {{ $r.reconcileFailing.seconds }}
          and on (namespace, tuningjob)
            max by (namespace, tuningjob) (tuneop_tuningjob_reconcile_consecutive_errors) > 0
        for: {{ $r.reconcileFailing.for }}
        labels:
          severity: {{ $r.reconcileFailing.severity }}
        annotations:
          summary: TuningJob {{`{{ $labels.namespace }}/{{ $labels.tuningjob }}`}} has not been reconciled for {{`{{ $value | humanizeDuration }}`}}.
          description: >-
            Every reconcile pass of TuningJob {{`{{ $labels.namespace }}/{{ $labels.tuningjob }}`}}
            has failed for {{`{{ $value | humanizeDuration }}`}} (more than {{ $r.reconcileFailing.seconds }} s):
            the operator retries with backoff, but its pods are not recreated and its status
            is not updated meanwhile. The operator's log names the API error of each pass.
          runbook_url: {{ $r.runbookBaseUrl }}#tuneopreconcilefailing
      - alert: TuneopOperatorDown
        expr: |-
          absent(up{job="{{ include "tuneop.operatorJob" . }}"} == 1)
          or absent(tuneop_operator_leader{job="{{ include "tuneop.operatorJob" . }}"} == 1)
          or (
            sum(increase(tuneop_reconcile_errors_total{job="{{ include "tuneop.operatorJob" . }}"}[{{ $r.operatorDown.errorWindow }}])) > 0
            unless
            sum(increase(tuneop_reconcile_passes_total{job="{{ include "tuneop.operatorJob" . }}"}[{{ $r.operatorDown.errorWindow }}])) > 0
          )
        for: {{ $r.operatorDown.for }}
        labels:
          severity: {{ $r.operatorDown.severity }}
        annotations:
          summary: No tuneop operator replica is reconciling.
          description: >-
            For {{ $r.operatorDown.for }}, Prometheus has had no healthy scrape target with
            job="{{ include "tuneop.operatorJob" . }}", or no target that is the active
            replica (tuneop_operator_leader 1), or the active replica's reconcile passes all
            failed over {{ $r.operatorDown.errorWindow }}: TuningJobs are not reconciled
            (preempted trainers are not recreated) and tuneop's metrics are stale.
          runbook_url: {{ $r.runbookBaseUrl }}#tuneopoperatordown
{{- end }}
