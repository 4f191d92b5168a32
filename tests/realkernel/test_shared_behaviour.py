"""One set of behavioural tests, run against the simulator AND the real kernel in QEMU.

Every case takes ``target``: ``[sim]`` runs on the qemu-guest simulated host, ``[real]`` inside the
guest booting Debian's kernel with an SR-IOV NVMe (see conftest.py). A case passing on both is the
proof that the simulator's kernel reactions match Linux for that behaviour.
"""

from __future__ import annotations

from .targets import PF, PF_IDS, TOTAL_VFS, VF_BDFS, Target

# ----------------------------------------------------------------------------- the kernel itself


def test_kernel_changes_the_vf_count_only_through_zero(target: Target) -> None:
    h = target.host
    numvfs = h.pci_device(PF, "sriov_numvfs")
    assert target.write(numvfs, "3") is None
    assert sorted(h.link_name(h.pci_device(PF, f"virtfn{n}")) or "" for n in range(3)) == list(VF_BDFS)
    assert h.link_name(h.pci_device(VF_BDFS[0], "physfn")) == PF
    assert target.write(numvfs, "2") == "EBUSY"
    assert target.write(numvfs, "3") is None  # same count: accepted, nothing changes
    assert target.num_vfs() == 3
    assert target.write(numvfs, "0") is None
    assert target.write(numvfs, "2") is None
    assert target.num_vfs() == 2


def test_kernel_places_vf_n_at_pf_routing_id_plus_offset_plus_n_strides(target: Target) -> None:
    """The SR-IOV capability's arithmetic, computed here from the PF's own attributes (a third source)."""
    h = target.host
    offset = h.read_int(h.pci_device(PF, "sriov_offset"), -1, base=10) or 0
    stride = h.read_int(h.pci_device(PF, "sriov_stride"), -1, base=10) or 0
    assert offset > 0 and stride > 0
    assert target.write(h.pci_device(PF, "sriov_numvfs"), str(TOTAL_VFS)) is None
    domain, bus, devfn = int(PF[:4], 16), int(PF[5:7], 16), int(PF[8:10], 16) << 3 | int(PF[11])
    for n in range(TOTAL_VFS):
        rid = (bus << 8 | devfn) + offset + n * stride
        want = f"{domain:04x}:{rid >> 8:02x}:{rid >> 3 & 0x1F:02x}.{rid & 7}"
        assert h.link_name(h.pci_device(PF, f"virtfn{n}")) == want
    assert target.write(h.pci_device(PF, "sriov_numvfs"), "0") is None


def test_kernel_rejects_counts_it_cannot_do(target: Target) -> None:
    numvfs = target.host.pci_device(PF, "sriov_numvfs")
    assert target.write(numvfs, str(TOTAL_VFS + 1)) == "ERANGE"
    assert target.write(numvfs, "abc") == "EINVAL"
    assert target.write(numvfs, "-1") == "EINVAL"
    assert target.write(numvfs, " 1 \n") == "EINVAL"  # kstrtou16: only one trailing newline is allowed
    assert target.num_vfs() == 0
    assert target.write(numvfs, "0x2\n") is None  # base 0: hex accepted
    assert target.num_vfs() == 2
    assert target.write(numvfs, "0") is None


def test_kernel_needs_a_pf_driver_for_sriov(target: Target) -> None:
    h = target.host
    assert target.write(h.pci_driver("nvme", "unbind"), PF) is None
    assert target.driver(PF) is None
    assert target.write(h.pci_device(PF, "sriov_numvfs"), "2") == "ENOENT"
    assert target.write(h.pci_device(PF, "sriov_numvfs"), "0") is None  # unchanged count: fine
    assert target.write(h.pci_device(PF, "sriov_numvfs"), "4") == "ERANGE"  # range is checked first
    assert target.write(h.sys("bus", "pci", "drivers_probe"), PF) is None
    assert target.driver(PF) == "nvme"


def test_kernel_driver_override_alone_does_not_move_a_bound_device(target: Target) -> None:
    h = target.host
    assert target.write(h.pci_device(PF, "driver_override"), "vfio-pci") is None
    assert target.write(h.sys("bus", "pci", "drivers_probe"), PF) is None
    assert target.driver(PF) == "nvme"
    # bind_store matches first: the override names another driver, so even a bound device gets ENODEV
    assert target.write(h.pci_driver("nvme", "bind"), PF) == "ENODEV"
    assert target.write(h.pci_device(PF, "driver_override"), "\n") is None
    assert target.override(PF) is None
    assert target.write(h.pci_driver("nvme", "bind"), PF) == "EBUSY"  # matching driver, already bound


def test_kernel_binding_rules_for_an_unbound_vf(target: Target) -> None:
    h = target.host
    assert target.write(h.pci_device(PF, "sriov_drivers_autoprobe"), "0") is None
    assert target.write(h.pci_device(PF, "sriov_numvfs"), "1") is None
    vf = VF_BDFS[0]
    assert target.driver(vf) is None  # autoprobe off: nobody probed it
    assert target.write(h.pci_driver("vfio-pci", "bind"), vf) == "ENODEV"  # no id match, no override
    assert target.write(h.pci_driver("vfio-pci", "unbind"), vf) == "ENODEV"  # not bound there
    assert target.write(h.pci_device(vf, "driver_override"), "vfio-pci") is None
    assert target.write(h.sys("bus", "pci", "drivers_probe"), vf) is None
    assert target.driver(vf) == "vfio-pci"
    node = target.vfio_node(vf)
    assert h.exists(node)
    assert target.group(vf) != target.group(PF)
    assert target.write(h.sys("bus", "pci", "drivers_probe"), "0000:00:09.0") == "ENODEV"
    assert target.write(h.pci_device(PF, "sriov_drivers_autoprobe"), "2") == "EINVAL"
    assert target.write(h.pci_device(PF, "sriov_numvfs"), "0") is None
    assert not h.exists(h.pci_device(vf))
    assert not h.exists(node)


# ----------------------------------------------------------------------------- the CLI on top


def test_cli_topology_and_list_see_the_nvme_pf(target: Target) -> None:
    topo = target.cli("devices", "--json")
    assert topo.rc == 0, topo
    pf = next(d for d in topo.json()["devices"] if d["bdf"] == PF)
    assert pf["ids"] == PF_IDS and pf["driver"] == "nvme" and pf["sriov"]["total_vfs"] == TOTAL_VFS
    listing = target.cli("sriov", "list", "--json")
    assert listing.rc == 0, listing
    (doc,) = listing.json()["pfs"]
    assert (doc["bdf"], doc["alias"], doc["total_vfs"], doc["num_vfs"], doc["vf_device"], doc["autoprobe"]) == (
        PF,
        "nvme0",
        3,
        0,
        "10",
        True,
    )


def test_cli_enable_three_then_two_goes_through_zero(target: Target) -> None:
    r = target.cli("sriov", "enable", "nvme0", "--vfs", "3", "--driver", "none", "--json")
    assert r.rc == 0, r
    pf = r.json()["pf"]
    assert [v["bdf"] for v in pf["vfs"]] == list(VF_BDFS)
    assert all(v["driver"] is None for v in pf["vfs"])
    groups = {v["iommu_group"] for v in pf["vfs"]}
    assert len(groups) == 3 and None not in groups
    assert pf["autoprobe"] is True  # turned off only while the VFs were created
    r = target.cli("sriov", "enable", PF, "--vfs", "2", "--driver", "none", "--json")
    assert r.rc == 0, r
    doc = r.json()
    assert any("3 -> 0" in step for step in doc["plan"]) and any("0 -> 2" in step for step in doc["plan"])
    assert [v["bdf"] for v in doc["pf"]["vfs"]] == list(VF_BDFS[:2])
    assert target.num_vfs() == 2


def test_cli_enable_is_idempotent_and_dry_run_changes_nothing(target: Target) -> None:
    r = target.cli("sriov", "enable", PF, "--vfs", "2", "--driver", "vfio-pci", "--dry-run", "--json")
    assert r.rc == 0 and r.json()["changed"] is False and len(r.json()["plan"]) >= 3, r
    assert target.num_vfs() == 0
    r = target.cli("sriov", "enable", PF, "--vfs", "2", "--driver", "vfio-pci", "--json")
    assert r.rc == 0, r
    assert [target.driver(v) for v in VF_BDFS[:2]] == ["vfio-pci", "vfio-pci"]
    assert all(target.host.exists(target.vfio_node(v)) for v in VF_BDFS[:2])
    again = target.cli("sriov", "enable", PF, "--vfs", "2", "--driver", "vfio-pci", "--json")
    assert again.rc == 0 and again.json()["plan"] == [] and again.json()["changed"] is False, again


def test_cli_bind_a_vf_to_vfio_and_back(target: Target) -> None:
    assert target.cli("sriov", "enable", PF, "--vfs", "1", "--driver", "none").rc == 0
    vf = VF_BDFS[0]
    r = target.cli("bind", vf, "--driver", "vfio-pci", "--json")
    assert r.rc == 0, r
    assert target.driver(vf) == "vfio-pci" and target.override(vf) == "vfio-pci"
    node = target.vfio_node(vf)
    assert target.host.exists(node)
    assert r.json()["device"]["remembered"] == {"driver": None, "override": None, "probe": False}
    assert r.json()["warnings"] == []  # every VF sits alone in its IOMMU group
    r = target.cli("bind", vf, "--restore", "--json")
    assert r.rc == 0, r
    assert target.driver(vf) is None and target.override(vf) is None
    assert not target.host.exists(node)
    assert target.bind_records() == []


def test_cli_unbind_pf_then_enable_fails_with_enoent_and_restore(target: Target) -> None:
    r = target.cli("unbind", "nvme0", "--json")
    assert r.rc == 0, r
    assert target.driver(PF) is None
    r = target.cli("sriov", "enable", PF, "--vfs", "2", "--json")
    assert r.rc == 3, r
    err = r.json()
    assert err["error"] == "not-found" and err["errno"] == "ENOENT" and "no driver" in err["message"]
    assert target.num_vfs() == 0
    r = target.cli("bind", PF, "--restore")
    assert r.rc == 0, r
    assert target.driver(PF) == "nvme"


def test_cli_bad_input_exits_cleanly(target: Target) -> None:
    r = target.cli("sriov", "enable", PF, "--vfs", "4", "--json")
    assert r.rc == 2 and "at most 3" in r.json()["message"], r
    r = target.cli("sriov", "list", "0000:00:09.0")
    assert r.rc == 3 and "no PCI device" in r.stderr, r
    assert target.cli("sriov", "enable", PF, "--vfs", "1", "--driver", "none").rc == 0
    r = target.cli("sriov", "enable", VF_BDFS[0], "--vfs", "1")
    assert r.rc == 5 and "virtual function" in r.stderr, r
    assert target.num_vfs() == 1


def test_cli_refuses_to_destroy_vfs_in_use(target: Target) -> None:
    assert target.cli("sriov", "enable", PF, "--vfs", "2", "--driver", "vfio-pci").rc == 0
    with target.holding(VF_BDFS[1]):
        listing = target.cli("sriov", "list", PF, "--json").json()
        in_use = [v["in_use"] for v in listing["pfs"][0]["vfs"]]
        assert in_use == [False, True]
        users = listing["pfs"][0]["vfs"][1]["users"]
        assert users[0]["kind"] == "process"
        for args in (("sriov", "disable", PF), ("sriov", "enable", PF, "--vfs", "1")):
            r = target.cli(*args)
            assert r.rc == 4 and "in use" in r.stderr, r
        assert target.num_vfs() == 2 and target.driver(VF_BDFS[1]) == "vfio-pci"
        # --force goes ahead; holding only the group fd (no device fd) does not block the kernel
        r = target.cli("sriov", "disable", "nvme0", "--force", "--json")
        assert r.rc == 0, r
    assert target.num_vfs() == 0 and target.bind_records() == []
    assert target.cli("sriov", "disable", "nvme0", "--json").json()["plan"] == []


def test_cli_no_autoprobe_leaves_vfs_unbound(target: Target) -> None:
    r = target.cli("sriov", "enable", PF, "--vfs", "2", "--no-autoprobe", "--json")
    assert r.rc == 0, r
    assert r.json()["pf"]["autoprobe"] is False
    assert [target.driver(v) for v in VF_BDFS[:2]] == [None, None]
