"""Which Dynamo release fastsim reproduces: 1.6.1 (the default) or 1.4.2.

The two releases differ in how a pass's decode time is charged (``kernels/pass_time.py``,
``step_ms`` and ``rank_pass_nb``; the rules and the experiments that settled them are in
``docs/decisions/0025-dynamo-1.6.1-timing-rules.md``) and in the summary fields they report
(``fastsim/report.py``).
"""

from __future__ import annotations

from fastsim.errors import InputError

DYNAMO_VERSIONS = ("1.6.1", "1.4.2")
DEFAULT_DYNAMO_VERSION = "1.6.1"


def check_version(version) -> str:
    """``version`` as one of ``DYNAMO_VERSIONS``; anything else is an InputError naming them."""
    if version is None:
        return DEFAULT_DYNAMO_VERSION
    if isinstance(version, str) and version.strip() in DYNAMO_VERSIONS:
        return version.strip()
    allowed = ", ".join(f"'{v}'" for v in DYNAMO_VERSIONS)
    raise InputError(f"dynamo_version is {version!r}; allowed: {allowed}")


def timing_rules(version) -> int:
    """The kernels' ``Params.timing_rules`` flag of a release."""
    from fastsim.kernels.codes import TIMING_142, TIMING_161

    return TIMING_161 if check_version(version) == "1.6.1" else TIMING_142
