"""Does a tuner train through `Model.fit`, or with a training loop of the script's own?

The trainer puts every `Model.fit` on the pod's devices (its strategy), because Keras
distributes a fit by itself. A loop the script writes (a `HyperModel.fit` or a
`Tuner.run_trial` that makes its own optimizer and `tf.function` step) works on one
device only unless it was written for a strategy (`strategy.run`, reductions): built
under a MirroredStrategy it fails (its variables are MirroredVariables). So a tuner
whose `run_trial` or hypermodel `fit` is overridden by code that never calls a `fit`
(nor keras-tuner's own `run_trial`) trains as written, without the trainer's strategy,
unless the script passed one (`distribution_strategy=`), as without tuneop.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from typing import Any

DELEGATES = frozenset({"fit", "run_trial"})


def own_loop(tuner: Any) -> str | None:
    """`file:line Class.method` of the override that trains without `Model.fit`, or
    None when every trial reaches `Model.fit` (keras-tuner's default path)."""
    from keras_tuner.src.engine import hypermodel as hypermodel_module
    from keras_tuner.src.engine import tuner as tuner_module

    overrides = (
        (type(tuner), tuner_module.Tuner, "run_trial"),
        (type(tuner.hypermodel), hypermodel_module.HyperModel, "fit"),
    )
    for owner, base, name in overrides:
        method = getattr(owner, name, None)
        if method is None or method is getattr(base, name):
            continue
        where = _trains_itself(method)
        if where is not None:
            return f"{where} {owner.__name__}.{name}"
    return None


def _trains_itself(method: Any) -> str | None:
    """`file:line` of `method` if its body calls no `fit`/`run_trial`; None if it does
    or its source cannot be read (then it is taken to use `Model.fit`)."""
    try:
        lines, first = inspect.getsourcelines(method)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name in DELEGATES:
                return None
    return f"{inspect.getsourcefile(method) or '?'}:{first}"
