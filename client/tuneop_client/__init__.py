"""The tuneop client: submit a keras-tuner script as a TuningJob and follow it, from a
laptop or a notebook.

    from tuneop_client import Cluster, RunRequest, follow, run
    cluster = Cluster.connect(namespace="ml")
    job = run(RunRequest(script=Path("search.py"), gpus=2), cluster)
    follow(cluster, job["metadata"]["name"])

The same operations behind the `tuneop` command (`tuneop --help`).
"""

from .jobs import delete, follow, logs, results, run, tensorboard
from .kube import ClientError, Cluster
from .submit import RunRequest, SubmitError

__all__ = [
    "ClientError",
    "Cluster",
    "RunRequest",
    "SubmitError",
    "delete",
    "follow",
    "logs",
    "results",
    "run",
    "tensorboard",
]
