"""Find and render the jinja2 templates under ``templates/`` (shipped as ``vgpukit/_templates``).

Lookup order, first hit wins:

1. the user override directory ``host.config_dir("templates")`` (``/etc/vgpukit/templates``),
2. the templates installed inside the package (``vgpukit/_templates``, wheel force-include),
3. the source checkout's top-level ``templates/`` (running from a git tree).

Templates render with autoescaping on (values land in XML attributes) and ``StrictUndefined``
(a field an override template expects but the model lacks is an error, not an empty string).
The context of a device template is the XML model's object itself (``dev``: a
:class:`~vgpukit.libvirt.domain.PciHostdev`, ``MdevHostdev`` or ``HostdevInterface``), and what a
device template renders is parsed back with the same model: it must be one element naming the
same device, so an override cannot silently hand a VM another device.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from ..errors import InvalidInput, NotFound, VgpukitError
from ..host import Host
from ..libvirt.domain import Device, parse_device
from .model import DomainSpec

PACKAGE_DIR = Path(__file__).resolve().parent.parent / "_templates"
CHECKOUT_DIR = Path(__file__).resolve().parent.parent.parent / "templates"


def shipped_dirs() -> list[Path]:
    return [d for d in (PACKAGE_DIR, CHECKOUT_DIR) if d.is_dir()]


class TemplateSet:
    """The templates one command sees: user overrides first, then the shipped ones."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.override_dir = host.config_dir("templates")
        self.env = jinja2.Environment(
            loader=jinja2.ChoiceLoader(
                [jinja2.FunctionLoader(self._load_override), jinja2.FileSystemLoader(shipped_dirs())]
            ),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
            keep_trailing_newline=False,
        )

    def _load_override(self, name: str) -> tuple[str, str, Callable[[], bool]] | None:
        path = self.host.config_dir("templates", *name.split("/"))
        text = self.host.read_opt(path)
        if text is None:
            return None
        return text, str(path), lambda: False

    def origin(self, name: str) -> str:
        """Where ``name`` comes from (for ``render --explain`` and error messages)."""
        return self.env.get_template(name).filename or name

    def render(self, name: str, **context: Any) -> str:
        try:
            return self.env.get_template(name).render(**context).strip() + "\n"
        except jinja2.TemplateNotFound as exc:
            raise NotFound(
                f"template {name} not found in {self.host.display(self.override_dir)} or the shipped templates",
                value=name,
            ) from exc
        except jinja2.TemplateError as exc:
            where = getattr(exc, "filename", None) or name
            raise InvalidInput(f"template {where} failed to render: {exc}", value=name) from exc
        except VgpukitError:
            raise

    def device(self, dev: Device) -> str:
        xml = self.render(dev.template, dev=dev)
        try:
            back = parse_device(xml).key()
        except InvalidInput as exc:
            raise InvalidInput(f"template {self.origin(dev.template)} rendered no usable device: {exc}") from exc
        if back != dev.key():
            raise InvalidInput(f"template {self.origin(dev.template)} rendered {back} for {dev.key()}")
        return xml

    def domain(self, vm: DomainSpec) -> str:
        snippets = [Markup(self.device(d).rstrip("\n")) for d in vm.devices]
        return self.render(vm.template, vm=vm, devices=snippets)
