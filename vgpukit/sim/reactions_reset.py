"""The simulated kernel's function reset: ``/sys/bus/pci/devices/<bdf>/reset`` and ``reset_method``.

The simulator's own facts, after the kernel's ``reset_store()`` / ``pci_reset_function()``
(drivers/pci/pci-sysfs.c, pci.c): the ``reset`` file exists only where the function has a reset
method, and is write-only; writing ``1`` resets the function (any other number: EINVAL), trying the
methods ``reset_method`` lists, in that order. The bound driver is told and keeps the device; the
configuration space is saved and restored; on a PF the SR-IOV state is restored too, so its VFs stay
(``sriov_restore_state``). What is left to see is that it happened: each reset is counted in the
simulator's bookkeeping (``.vgpukit-sim/resets/<bdf>``, :func:`count`). ``reset_method``: reading
lists the methods; writing a list of known ones (or ``default``) chooses them, an unknown one is EINVAL.

At ``sim init`` a profile's model names its functions' methods (``reset_method: flr bus``; default
``flr`` for an endpoint, none for a bridge or a display controller): :func:`add_files`.
"""

from __future__ import annotations

import errno
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .files import read_attr
from .kernel import Reaction, Write, fail

if TYPE_CHECKING:
    from .tree import SimTree

METHODS = ("device_specific", "acpi", "flr", "af_flr", "pm", "bus", "cxl_bus")  # the kernel's table


def _reset_dir(path: Path, w: Write) -> bool:
    from .reactions_pci import _is_pci_dir

    return _is_pci_dir(path.parent, w)


def default_methods(model: dict[str, Any]) -> str:
    """What a profile model's functions list in ``reset_method`` (empty: they have no ``reset`` file)."""
    given = model.get("reset_method")
    if isinstance(given, str):
        return given
    cls = str(model.get("class", ""))
    return "" if cls.startswith(("0x06", "0x0300")) else "flr"


def add_files(tree: SimTree, d: Path, methods: str) -> None:
    if methods:
        tree.write_attr(d / "reset_method", methods, 0o644)
        tree.write_attr(d / "reset", "", 0o200)


def _meta(root: Path) -> Path:
    return root / ".vgpukit-sim" / "resets"


def count(root: Path, bdf: str) -> int:
    """How many times the simulated kernel reset ``bdf`` (for tests and ``sim info``)."""
    path = _meta(Path(root)) / bdf
    try:
        return int(read_attr(path) or 0)
    except (OSError, ValueError):
        return 0


def reset(w: Write) -> None:
    if w.data.strip() != "1":
        raise fail(errno.EINVAL)
    methods = read_attr(w.path.parent / "reset_method") if (w.path.parent / "reset_method").exists() else ""
    if not methods.split():
        raise fail(errno.ENOTTY)  # no method left to try (all disabled with an empty reset_method)
    bdf = w.path.parent.name
    w.tree.mkdir(_meta(w.tree.root))
    w.tree.write_attr(_meta(w.tree.root) / bdf, count(w.tree.root, bdf) + 1, 0o644)


def reset_method(w: Write) -> None:
    words = w.data.split()
    if words == ["default"]:
        return  # the kernel's probe order again: the simulator keeps what init gave
    if any(m not in METHODS for m in words):
        raise fail(errno.EINVAL)
    w.tree.store(w.path, " ".join(words))


REACTIONS = [
    Reaction("reset", lambda w: w.path.name == "reset" and _reset_dir(w.path, w), reset),
    Reaction("reset_method", lambda w: w.path.name == "reset_method" and _reset_dir(w.path, w), reset_method),
]
