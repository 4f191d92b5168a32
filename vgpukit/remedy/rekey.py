"""The QoS tenants of a rebuilt MIG GPU follow its slices to their new UUIDs (a remediation step).

A reset destroys a MIG GPU's GPU and compute instances; the rebuild makes the same layout again (each
GPU instance by profile and placement, each compute instance by its start), but NVML gives every MIG
device a new UUID. The QoS tenants of such a GPU can only be keyed by MIG UUID (docs/qos.md, "GPU
keys"), so :class:`RekeyQos` -- after the rebuild -- maps each old slice to the new one at the same
place and moves the tenants there: in the config file (``/etc/vgpukit/qos.yaml``, the key replaced;
a running daemon reloads it) and in the daemon's run-time record (through the daemon when it runs,
``tenant-rm`` then ``tenant-add``; else in the record itself). Its inverse puts both files back as
they were.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar

from ..engine import Env, Step, step_kind
from ..engine.files import PutFile
from ..errors import NotFound, VerifyFailed


@step_kind
@dataclass(frozen=True)
class RekeyQos(Step):
    """Move the QoS tenants ``names`` keyed by the MIG devices of GPU ``index`` to the same slices' new
    UUIDs; ``slices``: [old MIG UUID, GPU instance profile id, GPU instance start, compute instance start]."""

    kind: ClassVar[str] = "remedy-rekey-qos"
    bdf: str
    label: str
    index: int
    slices: tuple[tuple[str, int, int, int], ...]
    names: tuple[str, ...]

    def describe(self) -> str:
        return (
            f"re-key QoS tenant{'s' if len(self.names) > 1 else ''} {', '.join(self.names)} of {self.label}"
            " to the rebuilt MIG devices' new UUIDs (same profile and placement)"
        )

    def _paths(self, env: Env) -> tuple[str, str]:
        from ..qos.config import Overlay, default_config_path

        return env.host.display(default_config_path(env.host)), env.host.display(Overlay.path(env.host))

    def inverse(self, env: Env) -> list[Step]:
        from ..qos.config import Overlay, default_config_path

        config, runtime = self._paths(env)
        return [
            PutFile(config, env.host.read_raw_opt(default_config_path(env.host)), 0o644),
            PutFile(runtime, env.host.read_raw_opt(Overlay.path(env.host)), 0o600),
        ]

    def mapping(self, env: Env) -> dict[str, str]:
        """Old MIG UUID -> the UUID of the MIG device at the same place now."""
        from ..mig.steps import nvml_of

        nvml = nvml_of(env)
        now: dict[tuple[int, int, int], str] = {}
        for gi in nvml.gpu_instances(self.index):
            for ci in gi.compute_instances:
                now[(gi.profile_id, gi.start, ci.start)] = ci.uuid
        out = {}
        for old, profile, gi_start, ci_start in self.slices:
            new = now.get((profile, gi_start, ci_start))
            if new is None:
                raise VerifyFailed(
                    f"{self.label}: no MIG device at GPU instance {gi_start}, compute instance {ci_start} after"
                    f" the rebuild, for the QoS tenants of {old}",
                    device=self.bdf,
                )
            if new != old:
                out[old] = new
        return out

    def apply(self, env: Env) -> None:
        from ..qos import control
        from ..qos.config import Overlay, default_config_path

        moves = self.mapping(env)
        if not moves:
            return
        path = default_config_path(env.host)
        text = env.host.read_raw_opt(path)
        if text is not None and any(old in text for old in moves):
            for old, new in moves.items():
                text = text.replace(old, new)
            env.host.write_file(path, text, 0o644)
        overlay = Overlay.load(env.host)
        runtime = {old: overlay.tenants.get(old) or {} for old in moves}
        try:
            control.request(env.host, {"op": "ping"})
            running = True
        except NotFound:
            running = False
        if running:
            control.request(env.host, {"op": "reload"})
            for old, tenants in runtime.items():
                for name, doc in tenants.items():
                    if doc is None:
                        continue
                    control.request(env.host, {"op": "tenant-rm", "gpu": old, "name": name})
                    req: dict[str, Any] = {"op": "tenant-add", "gpu": moves[old], "name": name, "tenant": doc}
                    control.request(env.host, req)
            return
        if any(runtime.values()):
            doc_text = env.host.read_raw_opt(Overlay.path(env.host)) or ""
            for old, new in moves.items():
                doc_text = doc_text.replace(json.dumps(old), json.dumps(new))
            env.host.write_file(Overlay.path(env.host), doc_text, 0o600)
