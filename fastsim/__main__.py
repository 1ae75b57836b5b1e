"""``python -m fastsim``: the same command line as the ``fastsim`` console script."""

from fastsim.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
