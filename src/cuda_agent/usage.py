"""A user's mistakes: `UsageError`, said by the command line in one line (exit status 2) and never
as a traceback, and the checks every command shares before it starts work: output paths and the
packages a command needs.

Raise UsageError (or a subclass) for what the user can fix, with a message that says what was
wrong, where, and what to do. The program's own bugs stay other exceptions, and keep their traceback.
"""

from __future__ import annotations

import importlib
import os
import tempfile
from pathlib import Path


class UsageError(ValueError):
    """A mistake the user can fix; the message is one line that says what to do."""


def output_folder(path: str | Path, what: str) -> Path:
    """`path` as a folder a command may create or write into; UsageError when it is a file or cannot
    be made there. `what` names it for the user (`--out`, `DEST`). Nothing is created."""
    path = Path(path)
    if path.exists():
        if not path.is_dir():
            raise UsageError(f"{what} {path} is a file, and a folder is needed here: give a folder "
                             "(it is created if missing)")
        _probe(path, what, path)
        return path
    _probe(_nearest_existing(path, what), what, path)
    return path


def output_file(path: str | Path, what: str) -> Path:
    """`path` as a file a command may create or append to; UsageError when it is a folder or its folder
    cannot be made. Nothing is created."""
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"{what} {path} is a folder, and a file is needed here: give a file path, "
                         f"e.g. {path / 'out.jsonl'}")
    if path.exists() and not os.access(path, os.W_OK):
        raise UsageError(f"{what} {path}: cannot write to it (permission denied); choose a file you can write")
    _probe(_nearest_existing(path.parent, what), what, path)
    return path


def _nearest_existing(path: Path, what: str) -> Path:
    """The deepest existing folder above (or at) `path`; UsageError when that is a file."""
    for folder in (path, *path.absolute().parents):
        if folder.exists():
            if not folder.is_dir():
                raise UsageError(f"{what} {path}: {folder} is a file, so nothing can be created under it; "
                                 "choose another path")
            return folder
    return Path("/")


def _probe(folder: Path, what: str, path: Path) -> None:
    """Whether a folder can be made in `folder`, by making one and removing it (permission bits do
    not say it for root, nor for /proc)."""
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".cuda-agent-probe-", dir=folder))
    except OSError as e:
        raise UsageError(f"{what} {path}: cannot write in {folder} ({e.strerror or e}); choose a folder "
                         "you can write to") from None


def require(module: str, needed_for: str, install: str) -> None:
    """UsageError unless `module` imports: `needed_for` says what needs it (`bench writes its plots`),
    `install` how to get it (`pip install matplotlib`). Call it before any work starts."""
    try:
        importlib.import_module(module)
    except ImportError:
        raise UsageError(f"{needed_for} with {module}, which is not installed: {install}") from None
