"""Output paths checked before a simulation runs: a long run must not end in a path that cannot be
written (a directory where a file is wanted, a parent that is a file, a read-only place)."""

from __future__ import annotations

import os
from pathlib import Path

from fastsim.errors import InputError

__all__ = ["check_output_file", "write_error"]


def check_output_file(path, what: str, directory_ok: bool = False) -> None:
    """Raise InputError naming ``what`` (a flag or keyword) if ``path`` cannot be written as a
    file: it is a directory (unless ``directory_ok``: the writer puts a file inside), an existing
    file that is not writable, or its nearest existing ancestor is not a writable directory (the
    writer creates the missing parents). Nothing is created here."""
    p = Path(os.fspath(path))
    if str(p) == "":
        raise InputError(f"{what}: the path is empty")
    if p.is_dir():
        if directory_ok:
            if not os.access(p, os.W_OK | os.X_OK):
                raise InputError(f"{what}: cannot write into the directory {p} (permission denied)")
            return
        raise InputError(f"{what}: {p} is a directory; give a file path")
    if p.exists():
        if not os.access(p, os.W_OK):
            raise InputError(f"{what}: cannot write {p} (permission denied)")
        return
    parent = p.absolute().parent
    while not parent.exists():
        if parent == parent.parent:
            break
        parent = parent.parent
    if not parent.is_dir():
        raise InputError(f"{what}: cannot create {p}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"{what}: cannot create {p}: {parent} is not writable")


def write_error(what: str, path, exc: OSError) -> InputError:
    """The error for a write that failed anyway (a full disk, a path changed during the run)."""
    return InputError(f"{what}: cannot write {os.fspath(path)}: {exc.strerror or exc}")
