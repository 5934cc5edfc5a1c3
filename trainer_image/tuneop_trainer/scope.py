"""The scope guard: build user models inside `strategy.scope()` and prove it worked.

Under Keras 3 a model or optimizer whose variables were created outside the strategy
scope and then trained inside it fails late and obscurely ("Mixing different
tf.distribute.Strategy objects", "colocate_vars_with must only be passed a variable
created in this tf.distribute.Strategy.scope()"). A user HyperModel should not have to
know about the strategy, so the trainer runs `build` in the scope itself and then checks
every model and optimizer variable, failing early with a message that says what to
change (usually: do not create the model or optimizer outside `build`).
"""

from __future__ import annotations

from typing import Any


class ScopeError(Exception):
    """The built model/optimizer does not belong to the strategy; message says why."""


def foreign_variables(variables: list[Any], strategy: Any) -> list[str]:
    """Names of variables not created in `strategy`'s scope."""
    out = []
    for var in variables:
        tf_var = getattr(var, "value", var)  # Keras 3 Variable wraps a tf.Variable
        if not strategy.extended.variable_created_in_scope(tf_var):
            out.append(getattr(var, "path", None) or getattr(var, "name", "?"))
    return out


def check_model(model: Any, strategy: Any) -> None:
    """Raise ScopeError if any model or optimizer variable lies outside the strategy."""
    bad_model = foreign_variables(list(model.variables), strategy)
    opt = model.optimizer
    bad_opt = foreign_variables([opt.iterations, *opt.variables], strategy)
    if bad_model or bad_opt:
        what = ", ".join((bad_model + bad_opt)[:3])
        raise ScopeError(
            "spec.hypermodel: build(hp) returned a model or optimizer created outside the "
            f"trainer's strategy scope ({what}); create every layer, model and optimizer "
            "inside build(hp) (not in __init__, at import time or in another "
            "strategy.scope())"
        )
