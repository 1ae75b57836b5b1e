"""Planner policies of this folder's cases, named in cases.tsv by ``--planner-policy``: each maps
a tick's (time in ms, active, starting, draining workers) to a target worker count or None (no
change). The recorder runs them inside Dynamo 1.6.1's scaling-policy hook, the tests as fastsim
planner callables; they read only what both show."""


def up_then_down(now, active, starting, draining):
    return 3 if now < 1000 else 1


def step_up(now, active, starting, draining):
    """One more worker at every tick while fewer than four are active or starting."""
    return active + starting + 1 if active + starting < 4 else None


def sawtooth(now, active, starting, draining):
    return 1 + int(now // 300) % 3


def hold_while_draining(now, active, starting, draining):
    """Down to one, but not while a worker is still draining; then back to three after 2 s."""
    if draining:
        return None
    return 1 if now < 2000 else 3


POLICIES = {f.__name__: f for f in (up_then_down, step_up, sawtooth, hold_while_draining)}
