"""Where the QoS configuration lives: the admin's YAML plus the runtime overlay.

* ``/etc/vgpukit/qos.yaml`` (``--config``): the base, written by the admin, re-read on SIGHUP.
* ``/run/vgpukit/qos/runtime.json``: every change made through the control socket (policy and
  slice per GPU, tenants added, tenants removed), applied on top of the base at every start and
  reload, so runtime changes survive daemon restarts (put them in the YAML to survive reboots).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..errors import InvalidInput, VgpukitError
from ..host import Host
from ..inputs import load_json, load_yaml
from .model import Gpu, QosConfig, Tenant


def default_config_path(host: Host) -> Path:
    return host.config_dir("qos.yaml")


def load_base(host: Host, path: Path) -> QosConfig:
    """The admin's config; any problem is one InvalidInput naming the file and the line."""
    text = host.read_opt(path)
    if text is None:
        return QosConfig()
    where = host.display(path)
    doc = load_yaml(text, str(where))  # size, syntax and nesting: the message names the line
    try:
        return QosConfig.from_dict(doc)
    except VgpukitError as err:
        raise InvalidInput(f"{where}: {_line(text, doc)}{err}") from None


def _line(text: str, doc: Any) -> str:
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
            Gpu.from_dict(str(key), gdoc)
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
        text = host.read_opt(cls.path(host))
        if not text:
            return cls()
        try:
            doc = load_json(text, str(host.display(cls.path(host))))
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
        host.write_file(self.path(host), json.dumps(doc, indent=1, sort_keys=True) + "\n", mode=0o600)

    def apply(self, base: QosConfig) -> tuple[QosConfig, list[str]]:
        """The effective config; entries that no longer fit are skipped and reported."""
        cfg = QosConfig(gpus=dict(base.gpus), watchdog_s=base.watchdog_s, sample_ms=base.sample_ms)
        problems: list[str] = []
        for key, settings in self.gpus.items():
            try:
                cfg.set_policy(key, settings.get("policy"), settings.get("slice_ms"))
            except VgpukitError as err:
                problems.append(f"runtime setting for {key} skipped: {err}")
        for key, tenants in self.tenants.items():
            for name, doc in tenants.items():
                try:
                    gpu = cfg.gpus.get(key)
                    if gpu is not None and any(t.name == name for t in gpu.tenants):
                        cfg.gpus[key] = replace(gpu, tenants=tuple(t for t in gpu.tenants if t.name != name))
                    if doc is not None:
                        cfg.add_tenant(key, Tenant.from_dict(name, doc))
                except VgpukitError as err:
                    problems.append(f"runtime tenant {key}/{name} skipped: {err}")
        return cfg, problems

    def record_policy(self, key: str, policy: str, slice_ms: int) -> None:
        self.gpus[key] = {"policy": policy, "slice_ms": slice_ms}

    def record_tenant(self, key: str, name: str, tenant: Tenant | None) -> None:
        self.tenants.setdefault(key, {})[name] = None if tenant is None else tenant.to_dict()

    def forget_tenant(self, key: str, name: str) -> None:
        self.tenants.get(key, {}).pop(name, None)
