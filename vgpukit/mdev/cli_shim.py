"""mdevctl's read verbs without click: ``[--sim DIR | --root DIR] mdev --mdevctl list|types ...``.

:func:`fast_read` answers only the plain forms below, with the same functions and the same input
checks as ``vgpukit mdev list`` / ``types`` (:mod:`vgpukit.mdev.listing`); it returns None for
anything else (another verb, an unknown or repeated option, ``--json``, ``--debug``, ``-h``, a value
that fails its check, an error while reading), and the caller runs the click command line instead,
which parses, reads and reports as usual. Nothing is printed before the answer is complete.

* ``list``: ``-d/--defined``, ``--dumpjson``, ``-v/--verbose``, ``-u/--uuid UUID``, ``-p/--parent P``;
* ``types``: ``--dumpjson``.
"""

from __future__ import annotations

import sys

from ..errors import VgpukitError
from ..inputs import check_text, has_control

_GLOBAL = ("--sim", "--root")
_FLAGS = {
    "list": {
        "-d": "defined",
        "--defined": "defined",
        "--dumpjson": "dumpjson",
        "-v": "verbose",
        "--verbose": "verbose",
    },
    "types": {"--dumpjson": "dumpjson"},
}
_VALUES = {"list": {"-u": "uuid", "--uuid": "uuid", "-p": "parent", "--parent": "parent"}, "types": {}}


def parse(args: list[str]) -> tuple[dict[str, str], str, dict[str, str | bool]] | None:
    """(global options, verb, options) of a plain mdevctl read, else None."""
    glob: dict[str, str] = {}
    i = 0
    while i < len(args) and args[i] in _GLOBAL:
        if args[i] in glob or i + 1 >= len(args):
            return None
        glob[args[i]] = args[i + 1]
        i += 2
    if args[i : i + 2] != ["mdev", "--mdevctl"] or len(args) < i + 3 or args[i + 2] not in _FLAGS:
        return None
    verb, rest = args[i + 2], args[i + 3 :]
    opts: dict[str, str | bool] = {}
    j = 0
    while j < len(rest):
        word, value = rest[j], None
        if word.startswith("--") and "=" in word:
            word, value = word.split("=", 1)
        got: str | bool
        if word in _FLAGS[verb] and value is None:
            key, got = _FLAGS[verb][word], True
        elif word in _VALUES[verb]:
            if value is None:
                j += 1
                if j >= len(rest):
                    return None
                value = rest[j]
            key, got = _VALUES[verb][word], value
        else:
            return None
        if key in opts:
            return None
        opts[key] = got
        j += 1
    return glob, verb, opts


def fast_read(args: list[str]) -> int | None:
    """Answer a plain mdevctl read (exit 0), or None: the caller runs the full command line."""
    parsed = parse(args)
    if parsed is None or any(has_control(a) for a in args):
        return None
    glob, verb, opts = parsed
    from ..clikit.context import App
    from ..wiring import Wiring
    from . import listing

    try:
        app = App.from_env(glob.get("--root"), glob.get("--sim"), wiring=Wiring())
        host = app.host
        if verb == "types":
            from . import sysfs

            found = sysfs.parents(host)
            text = listing.types_json(found) if opts.get("dumpjson") else listing.types_text(found)
        else:
            uid = check_text(opts["uuid"], "--uuid") if "uuid" in opts else None
            parent = check_text(opts["parent"], "--parent") if "parent" in opts else None
            defined = bool(opts.get("defined"))
            entries = listing.entries(host, defined, uid, parent)
            if opts.get("dumpjson"):
                text = listing.list_json(entries, uid)
            else:
                text = listing.list_text(entries, defined, bool(opts.get("verbose")))
    except VgpukitError:
        return None
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
    return 0
