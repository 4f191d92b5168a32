"""A document the user names on the command line (``-f FILE``), ``-`` being standard input.

The file is read where it is (no containment: it is the user's, not the host's), a regular UTF-8 file
within a size limit (``-f /dev/zero`` is refused at once); standard input is read up to the same limit.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..errors import InvalidInput
from .context import App

STDIN = "<stdin>"


def source(path: Path | str) -> str:
    """How errors name the document: ``<stdin>`` for ``-``, else the path as given."""
    return STDIN if str(path) == "-" else str(path)


def read(app: App, path: Path | str, what: str, limit: int) -> str:
    """The text of the document ``path`` names (``-``: standard input)."""
    if str(path) == "-":
        return read_stdin(limit)
    text = app.host.read_doc(path, what, limit, user_file=True)
    assert text is not None
    return text


def read_stdin(limit: int) -> str:
    data = sys.stdin.buffer.read(limit + 1)
    if len(data) > limit:
        raise InvalidInput(f"{STDIN}: larger than {limit} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput(f"{STDIN}: not UTF-8 text") from None
