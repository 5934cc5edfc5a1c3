"""tuneop: run your keras-tuner script on the cluster in one command, follow it, fetch what it made.

Also `kubectl tuneop` (a kubectl plugin). Errors are one line: exit 2 for a bad request,
1 for what the cluster refused or a job that failed."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import jobs, show
from .kube import ClientError, Cluster
from .submit import RunRequest, SubmitError

EXIT_FAILED, EXIT_USAGE = 1, 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tuneop", description=__doc__.splitlines()[0], allow_abbrev=False
    )
    parser.add_argument("-n", "--namespace", help="default: the kubeconfig context's")
    parser.add_argument("--kubeconfig", help="default: $KUBECONFIG or ~/.kube/config")
    parser.add_argument("--context", help="a kubeconfig context other than the current one")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser(
        "run", help="submit SCRIPT (and the .py files beside it) as a TuningJob", allow_abbrev=False
    )
    run.add_argument("script", type=Path, help="then its own arguments (after `--` if they "
                     "could be taken for tuneop's)")  # fmt: skip
    run.add_argument("--name", default="", help="the job's name (default: from the script's)")
    run.add_argument("--gpus", type=int, default=1, help="GPUs per worker (0: CPU; default 1)")
    run.add_argument("--workers", type=int, default=1, help="pods per trial (default 1)")
    run.add_argument("--image", default="", help="trainer image (default: the operator's)")
    run.add_argument("--data", default="", help="CLAIM[:PATH]: a claim mounted read-only")
    run.add_argument("--requirements", type=Path, help="a pip requirements file: what the "
                     "script needs beyond the image, installed once per job")  # fmt: skip
    run.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                     help="a variable for the trainer (repeat it; e.g. PIP_INDEX_URL)")  # fmt: skip
    run.add_argument("--queue", default="", help="a Kueue LocalQueue")
    run.add_argument("--elastic", action="store_true", help="go on with fewer GPUs when needed")
    run.add_argument("--parallel", type=int, default=1, help="trials run at once (default 1)")
    run.add_argument("--deterministic", action="store_true",
                     help="bit-identical resume (TensorFlow op determinism; slower)")  # fmt: skip
    run.add_argument("-f", "--follow", action="store_true", help="show progress until it ends")
    for name, text in (("status", "one job's progress"), ("delete", "delete a job"),
                       ("follow", "show a job's progress until it ends")):  # fmt: skip
        sub.add_parser(name, help=text).add_argument("name")
    sub.add_parser("list", help="the namespace's TuningJobs")
    logs = sub.add_parser("logs", help="the trainer's log (worker 0 of each trial group)")
    logs.add_argument("name")
    logs.add_argument("-f", "--follow", action="store_true",
                      help="stream it and each later pod until the job ends")  # fmt: skip
    results = sub.add_parser("results", help="copy results.json, the model and outputs/")
    results.add_argument("name")
    results.add_argument("dest", nargs="?", default=".", type=Path)
    board = sub.add_parser("tensorboard", help="serve the job's TensorBoard logs locally")
    board.add_argument("name")
    board.add_argument("--port", type=int, default=6006)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    try:
        cluster = Cluster.connect(args.namespace, args.kubeconfig, args.context)
        return _dispatch(args, cluster)
    except SubmitError as exc:
        print(f"tuneop {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ClientError as exc:
        print(f"tuneop {args.command}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return 130


def _parse(argv: list[str]) -> argparse.Namespace:
    """tuneop's options anywhere; for `run`, what it does not know after the script, and
    everything after `--`, are the script's arguments (`run search.py --epochs 3 --gpus 2`)."""
    head, dash, tail = (argv[: argv.index("--")], True, argv[argv.index("--") + 1 :]) if (
        "--" in argv) else (argv, False, [])  # fmt: skip
    parser = _parser()
    args, unknown = parser.parse_known_args(head)
    if unknown and args.command != "run":
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if dash and args.command != "run":
        parser.error("`--` passes arguments to a script: only with run")
    args.args = [*unknown, *tail] if args.command == "run" else []
    return args


def _dispatch(args: argparse.Namespace, cluster: Cluster) -> int:
    out = jobs.printer()
    if args.command == "run":
        job = jobs.run(_request(args), cluster)
        name = job["metadata"]["name"]
        out(f"tuningjob {cluster.namespace}/{name} created (script in ConfigMap {name}-script)")
        return _follow(cluster, name) if args.follow else 0
    if args.command == "follow":
        return _follow(cluster, args.name)
    if args.command == "status":
        out(show.progress_line(cluster.job(args.name)))
    elif args.command == "list":
        out(show.jobs_table(cluster.jobs()))
    elif args.command == "delete":
        jobs.delete(cluster, args.name)
        out(f"tuningjob {cluster.namespace}/{args.name} deleted")
    elif args.command == "results":
        out(jobs.results(cluster, args.name, args.dest))
    elif args.command == "logs":
        return jobs.logs(cluster, args.name, args.follow)
    elif args.command == "tensorboard":
        return jobs.tensorboard(cluster, args.name, args.port)
    return 0


def _follow(cluster: Cluster, name: str) -> int:
    job = jobs.follow(cluster, name, jobs.printer())
    print(show.summary(job), flush=True)
    return 0 if (job.get("status") or {}).get("phase") == "Succeeded" else EXIT_FAILED


def _request(args: argparse.Namespace) -> RunRequest:
    return RunRequest(
        script=args.script, args=tuple(args.args), name=args.name, gpus=args.gpus,
        workers=args.workers, image=args.image, data=args.data, queue=args.queue,
        elastic=args.elastic, parallel=args.parallel, deterministic=args.deterministic,
        requirements=args.requirements, env=tuple(args.env),
    )  # fmt: skip
