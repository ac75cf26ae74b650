"""Quiet orbax's teardown after a failed restore (its pending reads would print dozens of tracebacks)."""

from __future__ import annotations

import logging
import sys
import traceback

from framework.core.patches import Phase, register_patch


def is_closed_loop_noise(unraisable) -> bool:
    """An error of a tensorstore read that orbax left in flight: 'Event loop is closed', or any
    exception raised inside orbax's checkpoint code (reported as 'Exception ignored in ...')."""
    error = unraisable.exc_value
    if isinstance(error, RuntimeError) and str(error) == "Event loop is closed":
        return True
    frames = traceback.extract_tb(error.__traceback__) if error is not None else []
    return any("/orbax/checkpoint/" in frame.filename for frame in frames)


def is_in_flight_read_noise(record: logging.LogRecord) -> bool:
    """asyncio's report of a tensorstore read that failed after the restore had already failed."""
    message = record.getMessage()
    return message.startswith("Future exception was never retrieved") and (
        "OCDBT database" in message or "TensorStore" in message)


@register_patch("maxtext.orbax_closed_loop_noise", backend="maxtext", phase=Phase.SETUP,
                description="after a failed orbax restore, tensorstore reads still in flight report 'Event loop "
                            "is closed' or an unretrieved read error once each (dozens of tracebacks); drop "
                            "exactly those")
def orbax_closed_loop_noise(ctx) -> None:
    previous = sys.unraisablehook

    def hook(unraisable) -> None:
        if not is_closed_loop_noise(unraisable):
            previous(unraisable)

    sys.unraisablehook = hook
    logging.getLogger("asyncio").addFilter(lambda record: not is_in_flight_read_noise(record))
