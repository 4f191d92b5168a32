"""What a PF reset does to its VFs on the real kernel (issue 35 §0; docs/sriov.md, "VFs configured but
missing"; docs/simulator.md: the simulator's ``pf-reset`` fault and where it differs).

On Linux 6.1 (QEMU's NVMe PF, ``reset_method`` ``flr``) a reset through the PF's ``reset`` file keeps
the VFs: ``sriov_numvfs``, the ``virtfnN`` links and the VF functions are all still there, as
``pci_reset_function`` -> ``pci_restore_iov_state`` promises; vgpukit sees nothing missing and the
health layer finds nothing wrong. A VF has no ``remove`` file (the kernel hides the hot-plug
attributes of a VF), so it cannot be taken away on its own from user space either: the state the
simulator's fault makes is not one a sysfs write gives here. Kernel only (the simulated kernel has no
``reset`` file).
"""

from __future__ import annotations

from .targets import PF, TOTAL_VFS, VF_BDFS, Target


def test_a_pf_reset_through_sysfs_keeps_its_vfs(real_target: Target) -> None:
    t = real_target
    h = t.host
    r = t.cli("sriov", "enable", PF, "--vfs", str(TOTAL_VFS), "--driver", "none", "--json")
    assert r.rc == 0, r
    assert t.cli("health").rc == 0
    assert not any(h.exists(h.pci_device(vf, "remove")) for vf in VF_BDFS)  # a VF cannot be removed alone
    assert h.exists(h.pci_device(PF, "remove"))  # (the PF can)
    assert (h.read_opt(h.pci_device(PF, "reset_method")) or "").split() == ["flr"]
    assert t.write(h.pci_device(PF, "reset"), "1") is None
    assert t.num_vfs() == TOTAL_VFS
    assert all(h.exists(h.pci_device(vf)) for vf in VF_BDFS)
    assert sorted(h.link_name(h.pci_device(PF, f"virtfn{n}")) or "" for n in range(TOTAL_VFS)) == list(VF_BDFS)
    pf = t.cli("sriov", "list", PF, "--json").json()["pfs"][0]
    assert (pf["num_vfs"], pf["missing_vfs"], [v["bdf"] for v in pf["vfs"]]) == (TOTAL_VFS, 0, list(VF_BDFS))
    assert t.cli("health", PF).rc == 0  # watched (VFs configured), healthy
    assert t.write(h.pci_device(PF, "sriov_numvfs"), "0") is None
