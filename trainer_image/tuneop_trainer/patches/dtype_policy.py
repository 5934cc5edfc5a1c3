"""The dtype policy survives keras-tuner's `clear_session`.

`keras.backend.clear_session()` resets Keras's global state, the dtype policy included,
and keras-tuner calls it before building every model: a script's
`keras.mixed_precision.set_global_policy("mixed_float16")` (or a spec's
`tuner.dtypePolicy`) would silently train every trial in float32. The policy set before
the call is set again after it.
"""

from __future__ import annotations

from typing import Any

_installed = [False]


def install() -> None:
    """Idempotent."""
    if _installed[0]:
        return
    _installed[0] = True
    import keras
    from keras.src.backend.common import global_state

    original = global_state.clear_session

    def clear_session(*args: Any, **kwargs: Any) -> Any:
        policy = global_state.get_global_attribute("dtype_policy", None)
        result = original(*args, **kwargs)
        if policy is not None:
            global_state.set_global_attribute("dtype_policy", policy)
        return result

    global_state.clear_session = clear_session
    keras.backend.clear_session = clear_session
    keras.utils.clear_session = clear_session
