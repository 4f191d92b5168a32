"""The QoS daemon's config file, listened to: when its content changes the daemon reloads it, as on
SIGHUP (``qos reload``, ``systemctl reload``), so an edit, an ``apply`` or a ConfigMap update takes
effect without a signal (docs/qos.md, "Configuration").

inotify on the file's directory (the host door's, contained; a ``--config FILE`` the user named is
watched where it is, as it is read): a write closed, a file renamed into place (editors, ``apply``'s
atomic write), a file created or removed, and a Kubernetes ConfigMap volume's update (its ``..data``
link swapped). Only a change of the content counts: a write of the same text reloads nothing.

A file refused is refused once: the daemon hears an edit twice (inotify and the SIGHUP of ``systemctl
reload`` or an editor's script), and the bytes refused last are not read again by either
(:meth:`ConfigWatch.judging`); the control socket's ``reload`` op, a question that wants its answer,
judges them again.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from ..errors import VgpukitError
from ..host import Host
from ..host.notify import IN_CLOSE_WRITE, IN_CREATE, IN_DELETE, IN_MOVED_FROM, IN_MOVED_TO, IN_Q_OVERFLOW, Inotify
from ..logs import logger
from .config import MAX_CONFIG_BYTES, default_config_path

log = logger("vgpukit.qos")
MASK = IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE | IN_DELETE


class ConfigWatch:
    def __init__(self, host: Host, path: Path) -> None:
        self.host = host
        self.path = path
        self.user_file = path != default_config_path(host)
        self.notify: Inotify | None = None
        self.seen = self._digest()
        self.refused: str | None = None  # the digest of the content refused last (None: the last reload took it)
        self.judged: str | None = None  # the digest of the content the reload under way reads
        try:
            notify = Inotify(host)
            if notify.add(path.parent, MASK, user_file=self.user_file):
                self.notify = notify
            else:
                notify.close()
                log.warning("%s does not exist: the config is reloaded on SIGHUP only", path.parent)
        except VgpukitError as err:
            log.warning("the config file is not watched (reloaded on SIGHUP only): %s", err)

    def _digest(self) -> str | None:
        try:
            text = self.host.read_doc(
                self.path, "QoS config", MAX_CONFIG_BYTES, missing_ok=True, user_file=self.user_file
            )
        except VgpukitError:
            return "unreadable"  # the reload says why
        return None if text is None else hashlib.sha256(text.encode()).hexdigest()

    def judging(self, asked: bool) -> bool:
        """Whether a reload should read the file now: ``asked`` (the control socket's ``reload``), or its
        content is not the one refused last (an unreadable file is always read again: it says why)."""
        self.judged = self._digest()
        return asked or self.judged in (None, "unreadable") or self.judged != self.refused

    def verdict(self, refused: bool) -> None:
        """The reload under way refused the content it read (or took it)."""
        self.refused = self.judged if refused else None

    def fds(self) -> list[Inotify]:
        return [self.notify] if self.notify is not None else []

    def changed(self) -> bool:
        """Whether the file's content differs from when last asked (its directory's events taken)."""
        assert self.notify is not None
        events = self.notify.read()
        name = self.path.name
        if not any(e.name == name or e.name.startswith("..") or e.mask & IN_Q_OVERFLOW for e in events):
            return False
        now = self._digest()
        if now == self.seen:
            return False
        self.seen = now
        return True

    def close(self) -> None:
        if self.notify is not None:
            self.notify.close()
