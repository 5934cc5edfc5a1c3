"""Keras model state <-> numpy arrays keyed by group and variable path: model,
optimizer and metric-accumulator variables (per-replica shares of SUM accumulators)."""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from typing import Any

import numpy as np

from ..strategy import is_multiworker

log = logging.getLogger(__name__)


REPLICA_SEP = "@replica"


class CheckpointMismatch(ValueError):
    """A checkpoint does not fit the model it is restored into (the model changed)."""


def model_state(model: Any) -> dict[str, np.ndarray]:
    """Every variable that affects training from here on, as numpy arrays keyed
    `<group>/<variable path>` (see `_keys`)."""
    arrays: dict[str, np.ndarray] = {}
    local = _multiworker(model)
    for group, variables in _groups(model).items():
        for key, var in zip(_keys(group, variables), variables, strict=True):
            components = _local_components(var)
            value = components[0].numpy() if local else var.numpy()
            arrays[key] = np.asarray(value)
            if group == "metrics" and not local and len(components) > 1:
                # Each replica's share of a SUM accumulator: restoring the shares (not
                # the total split evenly) keeps the epoch's train metrics bit-exact.
                for i, component in enumerate(components):
                    arrays[f"{key}{REPLICA_SEP}{i}"] = np.asarray(component.numpy())
    return arrays


@dataclasses.dataclass(frozen=True)
class Layout:
    """How many replicas wrote a checkpoint and what its metric arrays hold: the total
    (one process: MirroredStrategy or none) or one replica's share (MultiWorkerMirrored,
    read from the chief's local copy, see `_multiworker`)."""

    replicas: int
    metric_share: bool

    @classmethod
    def of(cls, model: Any) -> Layout:
        return cls(int(model.distribute_strategy.num_replicas_in_sync), _multiworker(model))

    def meta(self) -> dict[str, Any]:
        return {"replicas": self.replicas, "metricShare": self.metric_share}

    @classmethod
    def from_meta(cls, meta: dict[str, Any]) -> Layout | None:
        if "replicas" not in meta:
            return None  # written before layouts were recorded: the same layout
        return cls(int(meta["replicas"]), bool(meta.get("metricShare")))


def restore_state(
    model: Any,
    arrays: dict[str, np.ndarray],
    groups: tuple[str, ...],
    written_by: Layout | None = None,
) -> None:
    """Assign saved arrays to the model's variables (call inside strategy.scope()).

    Variables are matched by path and their shapes checked. When the paths differ but
    the count and every shape agree in order (Keras numbers auto-named layers per
    session: `dense_3` in one process is `dense` in another), they are matched in
    order. Anything else raises `CheckpointMismatch` naming the variable.
    `written_by`: the checkpoint's layout; when it is not the model's, metric
    accumulators are merged into their total and split over the model's replicas."""
    if written_by is not None and written_by != Layout.of(model):
        arrays = _as_totals(arrays, written_by)
    current = _groups(model)
    for group in groups:
        variables = current[group]
        keys = _matched_keys(group, variables, arrays)
        local = group == "metrics" and _multiworker(model)
        for var, key in zip(variables, keys, strict=True):
            value = arrays[key]
            if tuple(value.shape) != tuple(var.shape):
                raise CheckpointMismatch(
                    f"variable {key} has shape {tuple(var.shape)} in the model and "
                    f"{tuple(value.shape)} in the checkpoint"
                )
            components = _local_components(var)
            shares = [arrays.get(f"{key}{REPLICA_SEP}{i}") for i in range(len(components))]
            if local and written_by is not None and written_by != Layout.of(model):
                share = value / model.distribute_strategy.num_replicas_in_sync
                for component in components:
                    component.assign(share.astype(value.dtype))
            elif local:
                for component in components:
                    component.assign(value)
            elif (
                group == "metrics"
                and len(components) > 1
                and all(share is not None for share in shares)
            ):
                for component, share in zip(components, shares, strict=True):
                    component.assign(share)
            else:
                var.assign(value)


def _matched_keys(group: str, variables: list[Any], arrays: dict[str, np.ndarray]) -> list[str]:
    """The saved key of each of `group`'s variables: by path, or in order when the paths
    differ but the count and every shape agree; else `CheckpointMismatch`."""
    keys = _keys(group, variables)
    saved = [k for k in arrays if k.startswith(group + "/") and REPLICA_SEP not in k]
    if set(keys) == set(saved):
        return keys
    by_order = sorted(saved, key=_saved_order(saved))
    shapes_agree = len(by_order) == len(variables) and all(
        tuple(arrays[k].shape) == tuple(v.shape) for k, v in zip(by_order, variables, strict=True)
    )
    if not shapes_agree:
        missing = sorted(set(keys) - set(saved)) or sorted(set(saved) - set(keys))
        raise CheckpointMismatch(
            f"checkpoint has {len(saved)} {group} variables, the model has "
            f"{len(variables)}; first difference: {missing[0]}"
        )
    log.info("restoring %s variables in order (their paths differ)", group)
    return by_order


def _as_totals(arrays: dict[str, np.ndarray], written_by: Layout) -> dict[str, np.ndarray]:
    """Metric accumulators as the totals over the writer's replicas (a share times
    their number: every replica of a group holds an equal share after a restore, and
    SUM accumulators of one epoch grow alike on each), without per-replica shares; the
    assignment below splits a total evenly over the new replicas."""
    out = {}
    for key, value in arrays.items():
        if not key.startswith("metrics/"):
            out[key] = value
        elif REPLICA_SEP not in key:
            out[key] = value * written_by.replicas if written_by.metric_share else value
    return out


def _keys(group: str, variables: list[Any]) -> list[str]:
    """`<group>/<path>`, with `#n` appended to the n-th repeat of a path."""
    seen: dict[str, int] = {}
    keys = []
    for i, var in enumerate(variables):
        path = str(getattr(var, "path", None) or getattr(var, "name", None) or i)
        n = seen.get(path, 0)
        seen[path] = n + 1
        keys.append(f"{group}/{path}" + (f"#{n}" if n else ""))
    return keys


def _saved_order(saved: list[str]) -> Any:
    """Saved keys in the order they were written (np.savez keeps insertion order;
    older checkpoints used `<group>/<index>`)."""
    position = {k: i for i, k in enumerate(saved)}

    def order(key: str) -> tuple[int, int]:
        tail = key.split("/", 1)[1]
        return (int(tail), 0) if tail.isdigit() else (position[key], 1)

    return order


def restore_metrics(
    model: Any, arrays: dict[str, np.ndarray], written_by: Layout | None = None
) -> None:
    restore_state(model, arrays, ("metrics",), written_by)


def _multiworker(model: Any) -> bool:
    """Under MultiWorkerMirroredStrategy, reading a metric accumulator (a SUM
    SyncOnReadVariable) in cross-replica context is a cross-worker all-reduce, which
    would block a chief that checkpoints alone. There the state is read from (and
    metric accumulators restored into) this worker's local copies: model and optimizer
    variables are mirrored (the local copy is the value); metric accumulators are the
    chief's own share of the epoch so far (see docs/design/trainer.md, "Multi-worker")."""
    return is_multiworker(model.distribute_strategy)


def _local_components(var: Any) -> list[Any]:
    tf_var = getattr(var, "value", var)  # Keras 3 Variable wraps a tf.Variable
    values = getattr(tf_var, "values", None)
    return list(values) if values is not None else [tf_var]


def _groups(model: Any) -> dict[str, list[Any]]:
    opt = model.optimizer
    return {
        "model": list(model.variables),
        "optimizer": list(opt.variables),
        "metrics": list(model.metrics_variables),
    }


def weights_digest(model: Any) -> str:
    """sha256 over the model's weights: how tests compare results bit for bit."""
    digest = hashlib.sha256()
    for var in model.weights:
        digest.update(np.ascontiguousarray(var.numpy()).tobytes())
    return digest.hexdigest()
