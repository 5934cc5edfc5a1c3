"""The metric names agreed between the operator, the trainer, the alerts and the
dashboard (tests/unit/test_operator_metrics.py checks that the exporters export them)."""

from __future__ import annotations

# Per job (labels namespace, tuningjob only).
AGREED = {
    "tuneop_tuningjob_last_progress_timestamp_seconds",
    "tuneop_tuningjob_last_checkpoint_timestamp_seconds",
    "tuneop_tuningjob_completion_timestamp_seconds",
    "tuneop_tuningjob_stall_timeout_seconds",
    "tuneop_tuningjob_max_failures",
    "tuneop_tuningjob_trials_completed",
    "tuneop_tuningjob_trials_planned",
    "tuneop_tuningjob_best_score",
    "tuneop_tuningjob_preemptions_total",
    "tuneop_tuningjob_failures_total",
    "tuneop_tuningjob_trial_ooms_total",
    "tuneop_tuningjob_restores_total",
    "tuneop_tuningjob_stalled",
    "tuneop_tuningjob_parallel_trials",
    "tuneop_tuningjob_running_trials",
    "tuneop_tuningjob_goodput_percent",
    "tuneop_tuningjob_checkpoint_interval_seconds",
    "tuneop_tuningjob_checkpoint_expected_waste_seconds_per_hour",
    "tuneop_tuningjob_allocated_gpu_seconds_total",
    "tuneop_tuningjob_lost_gpu_seconds_total",
    "tuneop_tuningjob_phase",
}
# Operator-wide series (no labels).
OPERATOR = {
    "tuneop_operator_leader",
    "tuneop_reconcile_passes_total",
    "tuneop_reconcile_errors_total",
    "tuneop_reconcile_live_reads_total",
}
# Per job, from the reconcile loops' health (run.health, run.metrics.LoopSeries); also
# while a job's passes fail.
LOOP = {
    "tuneop_tuningjob_last_reconcile_success_timestamp_seconds",
    "tuneop_tuningjob_reconcile_consecutive_errors",
}
# Operator-wide histograms: no samples until something is observed.
HISTOGRAMS = {"tuneop_recovery_seconds_bucket", "tuneop_recovery_seconds_count",
              "tuneop_recovery_seconds_sum"}  # fmt: skip
# What the trainer exports (trainer_image); the dashboard may read these too.
TRAINER = {
    "tuneop_trainer_steps_total",
    "tuneop_trainer_checkpoints_total",
    "tuneop_trainer_checkpoint_seconds_total",
    "tuneop_trainer_last_progress_timestamp_seconds",
    "tuneop_trainer_checkpoint_cost_seconds",
    "tuneop_trainer_checkpoint_interval_seconds",
    "tuneop_trainer_checkpoint_expected_waste_seconds_per_hour",
}
