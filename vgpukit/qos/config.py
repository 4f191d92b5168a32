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
from .model import QosConfig, Tenant


def default_config_path(host: Host) -> Path:
    return host.config_dir("qos.yaml")


def load_base(host: Host, path: Path) -> QosConfig:
    text = host.read_opt(path)
    if text is None:
        return QosConfig()
    import yaml

    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InvalidInput(f"{host.display(path)}: not valid YAML: {exc}") from exc
    try:
        return QosConfig.from_dict(doc)
    except VgpukitError as err:
        raise InvalidInput(f"{host.display(path)}: {err}") from err


@dataclass
class Overlay:
    gpus: dict[str, dict[str, Any]] = field(default_factory=dict)  # key -> {policy, slice_ms}
    tenants: dict[str, dict[str, dict[str, Any] | None]] = field(default_factory=dict)  # key -> name -> doc|None

    @staticmethod
    def path(host: Host) -> Path:
        return host.state_dir("qos", "runtime.json")

    @classmethod
    def load(cls, host: Host) -> Overlay:
        text = host.read_opt(cls.path(host))
        if not text:
            return cls()
        try:
            doc = json.loads(text)
            return cls(gpus=dict(doc.get("gpus", {})), tenants=dict(doc.get("tenants", {})))
        except (ValueError, AttributeError):
            return cls()

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
