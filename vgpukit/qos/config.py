"""Where the QoS configuration lives: the admin's YAML plus the runtime overlay.

* ``/etc/vgpukit/qos.yaml`` (``--config``): the base, written by the admin, re-read on SIGHUP.
* ``/run/vgpukit/qos/runtime.json``: every change made through the control socket (policy and
  slice per GPU, tenants added, tenants removed), applied on top of the base at every start and
  reload, so runtime changes survive daemon restarts (put them in the YAML to survive reboots).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InvalidInput, OutsideRoot, VgpukitError
from ..host import Host
from ..inputs import MAX_DOC_BYTES, load_json, load_yaml_located, where_in
from .model import QosConfig, Tenant

MAX_CONFIG_BYTES = 1024 * 1024


def default_config_path(host: Host) -> Path:
    return host.config_dir("qos.yaml")


def load_base(host: Host, path: Path, rules: Callable[[QosConfig], object] | None = None) -> QosConfig:
    """The admin's config; any problem is one InvalidInput naming the file and the place of the value
    at fault. ``rules``: what the tenants must satisfy together (the QoS planner's,
    :func:`vgpukit.qos.planner.load`)."""
    user_file = path != default_config_path(host)  # --config PATH: the user's own file, not contained
    text = host.read_doc(path, "QoS config", MAX_CONFIG_BYTES, missing_ok=True, user_file=user_file)
    if text is None:
        return QosConfig()
    text = text.strip()  # as attribute reads are: an error at the end of the file names its last line
    where = str(path) if user_file else host.display(path)
    doc, places = load_yaml_located(text, str(where), unique=True)  # size, syntax, nesting, a key twice: the line
    try:
        cfg = QosConfig.from_dict(doc)
        if rules is not None:
            rules(cfg)
        return cfg
    except VgpukitError as err:
        raise InvalidInput(f"{places.describe(str(where), where_in(err))}: {err}") from None


@dataclass
class Overlay:
    gpus: dict[str, dict[str, Any]] = field(default_factory=dict)  # key -> {policy, slice_ms}
    tenants: dict[str, dict[str, dict[str, Any] | None]] = field(default_factory=dict)  # key -> name -> doc|None

    @staticmethod
    def path(host: Host) -> Path:
        return host.state_dir("qos", "runtime.json")

    @classmethod
    def load(cls, host: Host) -> Overlay:
        """The daemon's own record; an unreadable one, or entries of the wrong shape, are ignored."""
        try:
            text = host.read_doc(cls.path(host), "QoS runtime record", MAX_DOC_BYTES, missing_ok=True)
            doc = load_json(text, str(host.display(cls.path(host)))) if text else None
        except OutsideRoot:
            raise
        except VgpukitError:
            return cls()
        gpus, tenants = (doc.get(k) if isinstance(doc, dict) else None for k in ("gpus", "tenants"))
        return cls(
            gpus={str(k): v for k, v in gpus.items() if isinstance(v, dict)} if isinstance(gpus, dict) else {},
            tenants={
                str(k): {str(n): t for n, t in v.items() if t is None or isinstance(t, dict)}
                for k, v in tenants.items()
                if isinstance(v, dict)
            }
            if isinstance(tenants, dict)
            else {},
        )

    def save(self, host: Host) -> None:
        doc = {"schema": "vgpukit.qos-runtime/v1", "gpus": self.gpus, "tenants": self.tenants}
        import json

        host.write_file(self.path(host), json.dumps(doc, indent=1, sort_keys=True) + "\n", mode=0o600)

    @contextmanager
    def saving(self, host: Host) -> Iterator[Overlay]:
        """The record's changes made in the block, saved at its end; when saving fails (a full or
        read-only /run), undone in memory too, so the daemon runs what the record says."""
        before = copy.deepcopy((self.gpus, self.tenants))
        try:
            yield self
            self.save(host)
        except BaseException:
            self.gpus, self.tenants = before
            raise

    def record_policy(self, key: str, policy: str, slice_ms: int, memory: dict[str, Any] | None = None) -> None:
        self.gpus[key] = {"policy": policy, "slice_ms": slice_ms}
        if memory is not None:
            self.gpus[key]["memory"] = memory

    def record_tenant(self, key: str, name: str, tenant: Tenant | None) -> None:
        self.tenants.setdefault(key, {})[name] = None if tenant is None else tenant.to_dict()

    def forget_tenant(self, key: str, name: str) -> None:
        self.tenants.get(key, {}).pop(name, None)
