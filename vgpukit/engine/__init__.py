"""The one change engine: plans as typed steps, one executor, the host lock and the crash journal.

* :class:`Step` - one typed change, as data: describe / to_dict / inverse / apply / verify.
* :class:`Observing` - a step that reads the state it changes once (read / undo / change / check);
  :class:`~vgpukit.engine.attr.SetAttr` is one: a one-value file (a sysfs attribute).
* :func:`execute` - apply steps under the host lock, journaling each inverse durably first; roll
  back newest-first on failure. Returns an :class:`Outcome`: what was done, and what each step
  observed before and after (:class:`Observed`), for the front end's report.
* :func:`session` - hold the host lock for a whole command and repair an interrupted one first.
* :func:`recover` - replay an interrupted command's journal.

See docs/engine.md for the rules (lock, journal, recovery) and how to write a step.
"""

from .env import Env
from .executor import execute, recover, refresh, session
from .outcome import Observed, Outcome
from .step import Observing, Refresher, Step, from_dict, step_kind, to_entry

__all__ = [
    "Env",
    "Observed",
    "Observing",
    "Outcome",
    "Refresher",
    "Step",
    "execute",
    "from_dict",
    "recover",
    "refresh",
    "session",
    "step_kind",
    "to_entry",
]
