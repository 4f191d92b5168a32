"""The ``vgpukit.host/v1`` document declared once: what checks a host config is what ships as its schema.

The ``msgspec.Struct`` types below state every key, type and bound of a host document;
:func:`vgpukit.fleet.document.parse` checks the file with them (:func:`vgpukit.declared.convert`, the
refusal placed at the line and column of the value at fault) and ``vgpukit/data/schemas/host.json`` is
generated from them (``scripts/gen_schemas.py``). ``mig-configs`` is mig-parted's format, read by
mig-parted's own reader (:mod:`vgpukit.mig.config`); ``qos`` is the QoS config's declaration
(:class:`vgpukit.qos.document.QosDoc`, a refusal's path from the file's root: ``$.configs.a.qos.gpus...``;
host.json refers to qos/config.json for it), the remediation policy
:class:`vgpukit.remedy.policy.RemediationDoc`. What a schema cannot say (exactly one of ``device`` and
``match``, uuids at most ``count``, a ``mig`` naming a config under ``mig-configs``) stays in
:mod:`vgpukit.fleet.document` and the areas' planners (docs/decisions.md, "Configuration documents").
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, UnsetType

from ..qos.document import QosDoc
from ..remedy.policy import RemediationDoc

# (?!\n): Python's $ (msgspec's and jsonschema's re.search) also matches before a last newline
Name = Annotated[
    str,
    Meta(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}$(?!\n)",
        description="a config name: a letter or digit, then up to 63 letters, digits, _ . + -",
    ),
]
DevName = Annotated[
    str,
    Meta(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:+-]{0,127}$(?!\n)",
        description="gpu0/nic0/nvme0, a PCI address, or (mdev) a parent name",
    ),
]
MatchText = Annotated[
    str,
    Meta(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9 _.:+/()-]{0,127}$(?!\n)",
        description="vendor:device in hex (10de:20b0) or part of the model name (A100, case-insensitive)",
    ),
]
Uuid = Annotated[
    str, Meta(pattern=r"^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$(?!\n)")
]
Count = Annotated[int, Meta(ge=0, le=4096)]
MigConfigs = Annotated[
    dict[Any, Any], Meta(description="mig-parted v1 mig-configs, as is (read by vgpukit's mig-parted reader)")
]


class _Entry(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    match: MatchText | UnsetType = UNSET


class Sriov(_Entry, frozen=True):
    """VFs of a PF."""

    vfs: Annotated[int, Meta(ge=0, le=65535)]
    device: DevName | UnsetType = UNSET
    driver: Literal["default", "vfio-pci", "none"] = "default"


class Vfio(_Entry, frozen=True):
    """A device bound to vfio-pci."""

    device: DevName | UnsetType = UNSET
    force: Annotated[
        bool, Meta(description="move it even when it is the console display device or in use (as bind --force)")
    ] = False


class Mdev(_Entry, frozen=True):
    """mdevs of one type on a parent."""

    type: Annotated[str, Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:+-]{0,127}$(?!\n)")]
    count: Count
    parent: DevName | UnsetType = UNSET
    uuids: Annotated[list[Uuid], Meta(max_length=4096)] | UnsetType = UNSET


class Vgpu(_Entry, frozen=True):
    """NVIDIA vGPUs of one type on a GPU (SR-IOV vGPU)."""

    type: Annotated[str, Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9 _.:+-]{0,63}$(?!\n)")]
    count: Count
    device: DevName | UnsetType = UNSET


class Config(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """One named host config: what each area should look like (a section left out: the area is left alone)."""

    sriov: Annotated[list[Sriov], Meta(max_length=1024)] = []
    vfio: Annotated[list[Vfio], Meta(max_length=4096)] = []
    mdev: Annotated[list[Mdev], Meta(max_length=4096)] = []
    vgpu: Annotated[list[Vgpu], Meta(max_length=1024)] = []
    mig: Annotated[Name, Meta(description="a config name under mig-configs")] | UnsetType = UNSET
    qos: (
        Annotated[
            QosDoc,
            Meta(
                description="the QoS daemon's config (schema qos/config.json), written to its config file (docs/qos.md)"
            ),
        ]
        | UnsetType
    ) = UNSET
    remediation: RemediationDoc | UnsetType = UNSET


class HostDoc(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """A declarative host config: several named configs, one selected per node with -c NAME. See docs/fleet.md.
    A mig-parted v1 file (version: v1, mig-configs) is accepted as is."""

    version: Literal["vgpukit.host/v1", "v1"]
    configs: Annotated[dict[Name, Config], Meta(max_length=256)] | UnsetType = UNSET
    mig_configs: (
        Annotated[
            dict[Any, Any], Meta(description="mig-parted v1 mig-configs, as is (read by vgpukit's mig-parted reader)")
        ]
        | UnsetType
    ) = msgspec.field(name="mig-configs", default=UNSET)
