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
from ..inputs import MAX_DOC_BYTES, load_json, load_yaml
from .model import Gpu, QosConfig, Tenant

MAX_CONFIG_BYTES = 1024 * 1024


def default_config_path(host: Host) -> Path:
    return host.config_dir("qos.yaml")


def load_base(host: Host, path: Path, rules: Callable[[Gpu], object] | None = None) -> QosConfig:
    """The admin's config; any problem is one InvalidInput naming the file and the line. ``rules``:
    what each GPU's tenants must satisfy together (the QoS planner's, :func:`vgpukit.qos.planner.load`)."""
    user_file = path != default_config_path(host)  # --config PATH: the user's own file, not contained
    text = host.read_doc(path, "QoS config", MAX_CONFIG_BYTES, missing_ok=True, user_file=user_file)
    if text is None:
        return QosConfig()
    text = text.strip()  # as attribute reads are: an error at the end of the file names its last line
    where = str(path) if user_file else host.display(path)
    doc = load_yaml(text, str(where))  # size, syntax and nesting: the message names the line
    try:
        cfg = QosConfig.from_dict(doc)
        for gpu in cfg.gpus.values() if rules else ():
            rules(gpu)  # type: ignore[misc]
        return cfg
    except VgpukitError as err:
        raise InvalidInput(f"{where}: {_line(text, doc, rules)}{err}") from None


def _line(text: str, doc: Any, rules: Callable[[Gpu], object] | None) -> str:
    """``line N: `` of the GPU or tenant entry a value error is in (validated again one by one)."""
    import yaml

    path: list[str] = []
    for top in ("watchdog_s", "sample_ms") if isinstance(doc, dict) else ():
        try:
            QosConfig(**{top: doc.get(top, 10)}).validate()
        except VgpukitError:
            path = path or [top]
    gpus = doc.get("gpus") if isinstance(doc, dict) and not path else None
    for key, gdoc in gpus.items() if isinstance(gpus, dict) else ():
        tenants = gdoc.get("tenants") if isinstance(gdoc, dict) else None
        for name, tdoc in tenants.items() if isinstance(tenants, dict) else ():
            try:
                Tenant.from_dict(str(name), tdoc)
            except VgpukitError:
                path = ["gpus", key, "tenants", name]
                break
        if path:
            break
        try:
            gpu = Gpu.from_dict(str(key), gdoc)
            if rules:
                rules(gpu)
        except VgpukitError:
            path = ["gpus", key]
            break
    node = mark = yaml.compose(text, Loader=yaml.SafeLoader)
    for part in path:
        if not isinstance(node, yaml.MappingNode):
            break
        found = [(k, v) for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == str(part)]
        if not found:
            break
        mark, node = found[0]
    at = mark if path else node
    return f"line {at.start_mark.line + 1}: " if at is not None and at.start_mark else ""


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
