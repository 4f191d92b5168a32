"""Attaching and detaching a device of a libvirt domain as an engine step.

``DomainDevice`` ensures a device is present (or absent) in the live and/or persistent definition
of a domain; its inverse ensures the opposite for the same scopes, so a failed or interrupted
attach of several devices leaves the domain as it was. A step names its libvirt by URI: the command
hands its open connection to the engine (``Env.handles``); a replay after a crash connects anew.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..engine import Env, Step, step_kind
from ..errors import Unsupported, VerifyFailed
from ..libvirt.connection import AFFECT_CONFIG, AFFECT_LIVE, Libvirt, connect
from ..libvirt.domain import DomainXML, device_keys, parse_device


def libvirt_of(env: Env, uri: str) -> Libvirt:
    lv = env.handles.get(f"libvirt:{uri}")
    if not isinstance(lv, Libvirt):
        lv = connect(uri)
        env.handles[f"libvirt:{uri}"] = lv
    return lv


@step_kind
@dataclass(frozen=True)
class DomainDevice(Step):
    kind: ClassVar[str] = "libvirt-device"
    uri: str
    domain: str
    device: str  # key: pci:<bdf> / mdev:<uuid>
    label: str
    xml: str
    live: bool
    config: bool
    present: bool = True

    def scopes(self) -> str:
        return "+".join(s for s, on in (("live", self.live), ("config", self.config)) if on)

    def describe(self) -> str:
        verb, prep = ("attach", "to") if self.present else ("detach", "from")
        return f"{verb} {self.label} {prep} {self.domain} ({self.scopes()})"

    def _missing(self, lv: Libvirt) -> tuple[bool, bool]:
        """Which of the step's scopes still differ from what it wants."""
        live = (
            self.live
            and lv.domain(self.domain).active
            and (self.device in device_keys(lv.xml(self.domain))) != self.present
        )
        config = self.config and (self.device in device_keys(lv.xml(self.domain, inactive=True))) != self.present
        return live, config

    def inverse(self, env: Env) -> Step:
        return DomainDevice(
            self.uri, self.domain, self.device, self.label, self.xml, self.live, self.config, not self.present
        )

    def apply(self, env: Env) -> None:
        lv = libvirt_of(env, self.uri)
        live, config = self._missing(lv)
        if not (live or config):
            return
        if lv.is_test_driver:
            # the test driver has no device hotplug: --config edits the inactive XML and redefines
            if live:
                raise Unsupported(
                    f"libvirt's test driver ({lv.uri}) cannot {'attach' if self.present else 'detach'} devices live",
                    hint="use --config on test:/// URIs",
                )
            dom = DomainXML.parse(lv.xml(self.domain, inactive=True))
            if self.present:
                dom.add_device(parse_device(self.xml))
            else:
                dom.remove_devices({self.device})
            lv.define(dom.to_xml())
            return
        flags = (AFFECT_LIVE if live else 0) | (AFFECT_CONFIG if config else 0)
        (lv.attach if self.present else lv.detach)(self.domain, self.xml, flags)

    def verify(self, env: Env) -> None:
        live, config = self._missing(libvirt_of(env, self.uri))
        for scope, off in (("live", live), ("config", config)):
            if off:
                state = "missing from" if self.present else "still in"
                raise VerifyFailed(
                    f"{self.label} is {state} the {scope} definition of {self.domain!r} after libvirt accepted it"
                )
