"""Where files that programs keep live on the host, named once: vgpukit's own (its configuration under
``/etc/vgpukit``, its state under ``/run/vgpukit`` and ``/var/lib/vgpukit``: health, remediation, DRA claim
records, quarantine) and other programs' that vgpukit reads or writes (mdevctl's definitions and scripts,
CDI specs, the kubelet's DRA metadata, NFD's feature file, the dynamic linker's cache, libvirt's networks,
cuda-checkpoint). A part of :class:`vgpukit.host.Host` (the kernel's own layout: :mod:`.kernel_paths`).
Paths as other programs see them (written into specs, units, plans) are the constants at the top."""

from __future__ import annotations

from pathlib import Path

from ..inputs import check_component
from .contain import Containment

# Host paths as other programs see them (written into CDI specs, systemd units, plans).
CDI_SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")  # where CDI consumers look for specs, the first the default
SYSTEMD_UNIT_DIR = "/etc/systemd/system"
UDEV_RULES_DIR = "/etc/udev/rules.d"
# The NVIDIA daemons' sockets and the MPS pipe directory a container gets when they exist (nvidia-ctk's list).
NVIDIA_IPC_PATHS = ("/run/nvidia-persistenced/socket", "/run/nvidia-fabricmanager/socket", "/tmp/nvidia-mps")
# Where a pod finds its DRA claims' device metadata files (KEP-5304; the CDI spec of each mounts one there).
DRA_METADATA_CONTAINER_DIR = "/var/run/kubernetes.io/dra-device-attributes"


class FilePlaces(Containment):
    """Where vgpukit's and other programs' files live under the root: ``/etc``, ``/run``, ``/var/lib``, ``/usr``."""

    def etc(self, *parts: str) -> Path:
        return self.path("etc", *parts)

    def run(self, *parts: str) -> Path:
        return self.path("run", *parts)

    def config_dir(self, *parts: str) -> Path:
        """vgpukit's own configuration: ``/etc/vgpukit``."""
        return self.etc("vgpukit", *parts)

    def state_dir(self, *parts: str) -> Path:
        """vgpukit's runtime state: ``/run/vgpukit``."""
        return self.run("vgpukit", *parts)

    # ------------------------------------------------------------------ /run
    def health_record(self) -> Path:
        """``/run/vgpukit/health/state.json``: the health layer's recent events and what it last saw
        of each device (IOMMU group, VF count, AER totals), to compare the next look with."""
        return self.run("vgpukit", "health", "state.json")

    def dra_claim_records(self) -> Path:
        """``/run/vgpukit/dra/claims``: one record per prepared ResourceClaim (:meth:`dra_claim_record`)."""
        return self.run("vgpukit", "dra", "claims")

    def dra_claim_record(self, uid: str) -> Path:
        """``/run/vgpukit/dra/claims/<uid>.json``: a ResourceClaim the DRA plugin prepared (its devices
        and CDI names), until unprepared; a restarted plugin unprepares from it."""
        return self.run("vgpukit", "dra", "claims", check_component(uid, "claim UID") + ".json")

    def dra_made_record(self, uid: str | None = None) -> Path:
        """``/run/vgpukit/dra/made/<uid>.json``: what the DRA plugin created on demand for a claim (a MIG
        slice's GPU and placement), written before it is created, removed once it is destroyed; without
        ``uid``, the directory."""
        if uid is None:
            return self.run("vgpukit", "dra", "made")
        return self.run("vgpukit", "dra", "made", check_component(uid, "claim UID") + ".json")

    def dra_mig_mode_record(self, bdf: str) -> Path:
        """``/run/vgpukit/dra/mig-mode/<BDF>.json``: the DRA plugin turned MIG mode on for the first slice
        a claim got on this GPU (one that changes mode without a reset); removed when the last slice's
        unprepare turns it off again."""
        return self.run("vgpukit", "dra", "mig-mode", check_component(bdf, "PCI address") + ".json")

    def dra_claim_cdi_spec(self, uid: str) -> Path:
        """``/run/cdi/vgpukit.io-claim-<uid>.json`` (``/var/run/cdi``, where CDI consumers look for
        transient specs): the CDI spec of one prepared claim."""
        return self.run("cdi", "vgpukit.io-claim-" + check_component(uid, "claim UID") + ".json")

    def dra_metadata_dir(self, driver: str, namespace: str, claim: str) -> Path:
        """``/var/lib/kubelet/plugins/<driver>/dra-device-metadata/<namespace>_<claim>``: where the
        kubelet-plugin library (KEP-5304) keeps a prepared claim's device metadata, one directory per request."""
        part = check_component(f"{namespace}_{claim}", "claim name")
        return self.path(
            "var", "lib", "kubelet", "plugins", check_component(driver, "driver"), "dra-device-metadata", part
        )

    def dra_metadata_file(self, driver: str, namespace: str, claim: str, request: str) -> Path:
        """``.../dra-device-metadata/<namespace>_<claim>/<request>/metadata.json``: one request's metadata stream."""
        return self.dra_metadata_dir(driver, namespace, claim) / check_component(request, "request") / "metadata.json"

    def dra_metadata_cdi_spec(self, driver: str, uid: str, request: str) -> Path:
        """``/run/cdi/<driver>-metadata-<uid>-<request>.json``: the CDI spec mounting one request's metadata file."""
        name = f"{driver}-metadata-{check_component(uid, 'claim UID')}-{check_component(request, 'request')}.json"
        return self.run("cdi", check_component(name, "CDI spec"))

    def remedy_state(self, *parts: str) -> Path:
        """``/run/vgpukit/remedy``: what remediation did this boot (``history.json``: each run, its outcome
        and escalations, read by ``vgpukit health``, the exporter and the rate limits)."""
        return self.run("vgpukit", "remedy", *parts)

    def device_resets(self) -> Path:
        """``/run/vgpukit/health/resets.json``: when each device was last reset by vgpukit (BDF -> time):
        the health layer counts no event from before it."""
        return self.run("vgpukit", "health", "resets.json")

    # ------------------------------------------------------------------ /var/lib
    def quarantine_record(self, bdf: str | None = None) -> Path:
        """``/var/lib/vgpukit/quarantine/<bdf>.json``: a device an operator or the remediation policy
        quarantined (survives a reboot: ``vgpukit release`` ends it); without ``bdf``, the directory."""
        if bdf is None:
            return self.path("var", "lib", "vgpukit", "quarantine")
        return self.path("var", "lib", "vgpukit", "quarantine", check_component(bdf, "PCI address") + ".json")

    # ------------------------------------------------------------------ programs
    def cuda_checkpoint_tools(self) -> list[Path]:
        """Where NVIDIA's ``cuda-checkpoint`` utility (driver R550+) is looked for, in order."""
        return [self.path("usr", "bin", "cuda-checkpoint"), self.path("usr", "local", "bin", "cuda-checkpoint")]

    # ------------------------------------------------------------------ /etc
    def ld_cache(self) -> Path:
        """``/etc/ld.so.cache``: the dynamic linker's cache (where the driver's libraries are)."""
        return self.etc("ld.so.cache")

    def libvirt_network(self, name: str) -> Path:
        """``/etc/libvirt/qemu/networks/<name>.xml``: a network libvirt's system instance has defined."""
        return self.etc("libvirt", "qemu", "networks", check_component(name, "libvirt network") + ".xml")

    def mdevctl_dir(self, *parts: str) -> Path:
        """``/etc/mdevctl.d``: mdevctl's persistent definitions, ``<parent>/<uuid>``."""
        return self.etc("mdevctl.d", *parts)

    def mdevctl_scripts(self, kind: str) -> Path:
        """``/etc/mdevctl.d/scripts.d/<kind>``: mdevctl's callout and notifier scripts."""
        return self.etc("mdevctl.d", "scripts.d", kind)

    def nfd_feature_file(self) -> Path:
        """``/etc/kubernetes/node-feature-discovery/features.d/vgpukit``: NFD's local source reads it."""
        return self.etc("kubernetes", "node-feature-discovery", "features.d", "vgpukit")
