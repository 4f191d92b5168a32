"""The simulated board's NVLink wiring, from a profile's ``nvlink:`` section (the simulator's own facts).

An HGX/DGX baseboard wires every GPU's links to NVSwitch chips (A100: 12 links, two to each of six
NVSwitches); NVML reports each link's state, the PCI address of its remote end and that end's type.
A PCIe board pair joined by NVLink bridges has links whose remote end is the other GPU.

```yaml
nvlink:
  switches: ['0000:c3:00.0', ...]   # NVSwitch chips (the remote end NVML reports for a switch link)
  links_per_switch: 2               # every GPU: links 0-1 to switch 0, 2-3 to switch 1, ...
  bridges: [{gpus: [BDF, BDF], links: 4}]   # direct GPU-GPU links, numbered after the switch links
  down: [{gpu: BDF, link: 3}]       # links whose state is disabled
```
"""

from __future__ import annotations

from typing import Any

from ..errors import InvalidInput

KEYS = {"switches", "links_per_switch", "bridges", "down"}


def wire(spec: dict[str, Any], gpus: list[dict[str, Any]]) -> None:
    """Give each GPU dict (``bdf`` set) its ``nvlinks``: ``[{link, active, remote, type}]``."""
    if not isinstance(spec, dict) or set(spec) - KEYS:
        raise InvalidInput(f"profile nvlink: a mapping with keys {', '.join(sorted(KEYS))}")
    bdfs = {g["bdf"]: g for g in gpus}
    switches = [str(s) for s in spec.get("switches") or []]
    per_switch = int(spec.get("links_per_switch", 0 if not switches else 1))
    for g in gpus:
        g["nvlinks"] = [
            {"link": n, "active": True, "remote": sw, "type": "switch"}
            for n, sw in enumerate(s for s in switches for _ in range(per_switch))
        ]
    for bridge in spec.get("bridges") or []:
        a, b = (str(x) for x in bridge["gpus"])
        if a not in bdfs or b not in bdfs:
            raise InvalidInput(f"profile nvlink bridge {a} - {b}: both ends must be GPUs of the profile")
        for here, there in ((a, b), (b, a)):
            links = bdfs[here]["nvlinks"]
            for _ in range(int(bridge["links"])):
                links.append({"link": len(links), "active": True, "remote": there, "type": "gpu"})
    for down in spec.get("down") or []:
        links = bdfs.get(str(down["gpu"]), {}).get("nvlinks", [])
        hit = [k for k in links if k["link"] == int(down["link"])]
        if not hit:
            raise InvalidInput(f"profile nvlink down: GPU {down['gpu']} has no link {down['link']}")
        hit[0]["active"] = False
