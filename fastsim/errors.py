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


class FastsimWarning(UserWarning):
    """Base category of fastsim's warnings."""


class TraceWarning(FastsimWarning):
    """A trace was accepted but altered on load (clamped lengths, skipped rows)."""
