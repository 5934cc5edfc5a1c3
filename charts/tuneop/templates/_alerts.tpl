{{/*
tuneop's alerting rules as Prometheus rule groups. Used by prometheusrule.yaml and
rendered into the plain rules file manifests/prometheus/tuneop-rules.yaml by
hack/render-manifests.sh. One runbook section per alert: docs/runbooks.md.
The operator exports one series per TuningJob (labels namespace, tuningjob); with two
operator replicas both may export it, so every expression aggregates with max by
(namespace, tuningjob) first.
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
      - alert: TuneopJobFailed
        expr: |-
          max by (namespace, tuningjob) (tuneop_tuningjob_phase{phase="Failed"}) == 1
        for: {{ $r.jobFailed.for }}
        labels:
          severity: {{ $r.jobFailed.severity }}
        annotations:
          summary: TuningJob {{`{{ $labels.namespace }}/{{ $labels.tuningjob }}`}} failed.
          description: >-
            TuningJob {{`{{ $labels.namespace }}/{{ $labels.tuningjob }}`}} is in phase Failed:
            its failure or preemption budget ran out, or its spec is invalid. The reason
            of its Failed condition says which.
          runbook_url: {{ $r.runbookBaseUrl }}#tuneopjobfailed
      - alert: TuneopPreemptionStorm
        expr: |-
          max by (namespace, tuningjob) (increase(tuneop_tuningjob_preemptions_total[{{ $r.preemptionStorm.window }}]))
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
      - alert: TuneopOperatorDown
        expr: |-
          absent(up{job="{{ include "tuneop.operatorJob" . }}"} == 1)
        for: {{ $r.operatorDown.for }}
        labels:
          severity: {{ $r.operatorDown.severity }}
        annotations:
          summary: No tuneop operator replica is up.
          description: >-
            Prometheus has no healthy scrape target with job="{{ include "tuneop.operatorJob" . }}"
            for {{ $r.operatorDown.for }}: TuningJobs are not reconciled (preempted trainers
            are not recreated) and tuneop's metrics are stale.
          runbook_url: {{ $r.runbookBaseUrl }}#tuneopoperatordown
{{- end }}
