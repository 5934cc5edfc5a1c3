"""tuneop: the Kubernetes operator for TuningJob (tuneop.io/v1alpha1).

Its layers are its subpackages; each imports only from those listed before it
(tests/unit/test_operator_layers.py enforces it):

- `api`: the TuningJob and its children as the operator reads them: names and labels,
  the spec (parsed by the contract, `tuneop_contract.spec`) with the checks that need
  Kubernetes, the status keys and conditions, the trainer's
  progress record, the pod groups, ownership, Kueue's vocabulary. Pure.
- `render`: the children and pods the operator creates, rendered as dicts. Pure.
- `decide`: one reconcile pass's decision from what was read, with the objects it
  creates rendered. Pure.
- `act`: the API client, the executor that carries out a Decision as it is, the fence.
- `run`: the process: configuration, kopf handlers, the reconcile loop's runtime,
  health and metrics, the entry point.

`render` imports no `decide`, `act` no `render`; the Kubernetes client is used in `act`
and `run` only, kopf and the Prometheus client in `run` only."""

__version__ = "0.1.0"
