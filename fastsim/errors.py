"""Exceptions and warnings raised by fastsim.

Every error fastsim raises on purpose derives from :class:`FastsimError`; the command line prints its
message (no traceback) and exits with status 2. Input problems are :class:`InputError` and name the
file, line and field (or the argument) at fault.
"""

from __future__ import annotations

__all__ = [
    "FastsimError",
    "InputError",
    "NotSupportedError",
    "DeadEndError",
    "dead_end_error",
    "FastsimWarning",
    "TraceWarning",
]


class FastsimError(Exception):
    """Base class of every error fastsim raises deliberately (CLI: message on stderr, exit 2)."""


class InputError(FastsimError, ValueError):
    """Bad input: a trace row, an engine-args field or an argument. The message names where."""


class NotSupportedError(InputError):
    """A valid Dynamo option or input that fastsim does not model yet (never silently ignored)."""


class DeadEndError(FastsimError):
    """The simulation cannot make progress (Dynamo: ``offline replay reached a dead end ...``)."""


def dead_end_error(remaining: int, dynamo_version: str = "1.6.1", detail: str = "") -> DeadEndError:
    """The dead-end error in the release's words, then fastsim's explanation.

    Dynamo 1.4.2: ``offline replay reached a dead end with N in-flight requests remaining``;
    Dynamo 1.6.1: ``replay invariant violated: offline replay detected an effect-free
    zero-duration pass with N in-flight requests remaining`` (both observed on the releases).
    """
    fastsim_words = f"offline replay reached a dead end with {remaining} in-flight requests remaining"
    if detail:
        fastsim_words += f" ({detail})"
    if dynamo_version == "1.4.2":
        return DeadEndError(fastsim_words)
    return DeadEndError(
        "replay invariant violated: offline replay detected an effect-free zero-duration pass with "
        f"{remaining} in-flight requests remaining; fastsim: {fastsim_words}"
    )


class FastsimWarning(UserWarning):
    """Base category of fastsim's warnings."""


class TraceWarning(FastsimWarning):
    """A trace was accepted but altered on load (clamped lengths, skipped rows)."""
