"""The one change engine: plans as typed steps, one executor, the host lock and the crash journal.

* :class:`Step` - one typed change, as data: describe / to_dict / inverse / apply / verify.
* :func:`execute` - apply steps under the host lock, journaling each inverse durably first; roll
  back newest-first on failure.
* :func:`session` - hold the host lock for a whole command and repair an interrupted one first.
* :func:`recover` - replay an interrupted command's journal.

See docs/engine.md for the rules (lock, journal, recovery) and how to write a step.
"""

from .env import Env
from .executor import execute, recover, refresh, session
from .step import Refresher, Step, from_dict, step_kind, to_entry

__all__ = ["Env", "Refresher", "Step", "execute", "from_dict", "recover", "refresh", "session", "step_kind", "to_entry"]
