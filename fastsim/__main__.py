"""``python -m fastsim``: the same command line as the ``fastsim`` console script."""

from fastsim.cli import run

if __name__ == "__main__":
    raise SystemExit(run())
