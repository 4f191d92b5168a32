"""Write (or, with --check, compare) the JSON Schemas of the configuration documents, generated from
their declarations (docs/decisions.md, "Configuration documents"): the shipped files under
vgpukit/data/schemas/ are this script's output, never edited by hand.

    python scripts/gen_schemas.py          # write them
    python scripts/gen_schemas.py --check  # exit 1, naming each file that differs
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SCHEMAS = ROOT / "vgpukit/data/schemas"
# shipped file -> (module, the declared type, the schema's $id, title, description)
DECLARED: dict[str, tuple[str, str, dict[str, str]]] = {
    "dra/sharing-config.json": (
        "vgpukit.k8s.dra.config",
        "Parameters",
        {
            "$id": "https://vgpukit.dev/schemas/dra/sharing-config.json",
            "title": "vgpukit DRA driver (gpu.vgpukit.io): opaque sharing parameters of a ResourceClaim or DeviceClass",
            "description": "The `opaque.parameters` of a config entry whose `opaque.driver` is gpu.vgpukit.io. "
            "docs/kubernetes.md, 'Sharing in the claim'. Generated from vgpukit/k8s/dra/config.py.",
        },
    ),
    "qos/config.json": (
        "vgpukit.qos.document",
        "QosDoc",
        {
            "$id": "https://vgpukit.dev/schemas/qos/config.json",
            "title": "vgpukit QoS config (/etc/vgpukit/qos.yaml)",
            "description": "The QoS daemon's configuration, also a host config's qos section. docs/qos.md. "
            "Generated from vgpukit/qos/document.py.",
        },
    ),
    "host.json": (
        "vgpukit.fleet.declaration",
        "HostDoc",
        {"$id": "https://vgpukit.dev/schemas/host.json", "title": "vgpukit.host/v1"},
    ),
}


# a declaration that is another shipped schema's, referred to (relative to the $id) rather than copied
REFER: dict[str, dict[str, str]] = {"host.json": {"QosDoc": "qos/config.json"}}


def generated() -> dict[str, str]:
    """Each declared schema file's text, as it ships."""
    from vgpukit.declared import schema

    out = {}
    for name, (module, typ, head) in DECLARED.items():
        doc: dict[str, Any] = schema(getattr(importlib.import_module(module), typ), refer=REFER.get(name), **head)
        out[name] = json.dumps(doc, indent=2) + "\n"
    return out


def main(argv: list[str]) -> int:
    stale = []
    for name, text in generated().items():
        path = SCHEMAS / name
        if "--check" in argv:
            if not path.is_file() or path.read_text() != text:
                stale.append(name)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    for name in stale:
        print(f"{name}: differs from its declaration: run python scripts/gen_schemas.py", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main(sys.argv[1:]))
