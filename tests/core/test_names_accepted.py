"""Names shown are names accepted (docs/cli.md, "How devices are named").

On every simulator profile, with VFs, mdevs, vGPUs and MIG devices made: every name a listing prints
in its name columns (``devices`` NAME and BDF, ``sriov list`` PF/VF and NAME, ``vgpu list`` ID and
GPU, ``mdev list`` UUID and PARENT, ``mig status``'s GPUs and MIG UUIDs) resolves to that same device
through the one resolver for every kind of device argument the command tree has, and through the
commands themselves (``render hostdev``, ``sriov list PF``, ``mig status GPU``, ``mdev types PARENT``,
``sim fault aer``). Every command argument that names a device takes it through that resolver.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import click
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import as_json, invoke, make_sim, sim_host
from vgpukit import naming
from vgpukit.cli.main import cli
from vgpukit.clikit.params import DeviceName
from vgpukit.pci import Scan, vf_address
from vgpukit.sim.nvml import SimNvml

# each profile with something of every kind made, as a user would
SETUP = {
    "hgx-a100": [["sriov", "enable", "nic0", "--vfs", "3"], ["sriov", "enable", "nic2", "--vfs", "2"],
                 ["partition", "gpu1", "--mig", "3g.20gb,1g.5gb"]],
    "qemu-guest": [["sriov", "enable", "nvme0", "--vfs", "3"], ["mdev", "create", "mtty", "mtty-2", "--count", "2"]],
    "t4-mdev": [["vgpu", "create", "gpu0", "--type", "T4-4Q", "--count", "2", "--define"],
                ["mdev", "create", "gpu1", "T4-2Q"]],
    "h100-vgpu": [["vgpu", "create", "gpu0", "--type", "H100-10C", "--count", "2"]],
    "mixed-a100-t4": [["partition", "gpu2", "--mig", "1g.5gb"]],
}  # fmt: skip

# the listings' columns each profile's setup makes show something
EXPECTED = {
    "hgx-a100": {"devices BDF", "devices NAME", "sriov list PF NAME", "sriov list VF NAME", "mig status GPU",
                 "mig status MIG UUID"},
    "qemu-guest": {"devices NAME", "sriov list VF NAME", "mdev list UUID", "mdev list PARENT"},
    "t4-mdev": {"vgpu list GPU", "vgpu list ID", "mdev list UUID", "mdev list PARENT", "mig status GPU"},
    "h100-vgpu": {"vgpu list ID", "sriov list VF NAME", "devices NAME"},
    "mixed-a100-t4": {"devices NAME", "mig status MIG UUID"},
}  # fmt: skip

# what a device argument of the command tree takes (DeviceName kinds), as the resolver's accept sets
ACCEPT = {
    frozenset({"pci"}): frozenset({naming.PCI}),
    frozenset({"pf"}): frozenset({naming.PCI}),
    frozenset({"gpu"}): frozenset({naming.GPU}),
    frozenset({"parent"}): frozenset({naming.PARENT}),
    frozenset({"mdev"}): frozenset({naming.MDEV}),
    frozenset({"mdev", "pci"}): frozenset({naming.PCI, naming.MDEV}),
    frozenset({"gpu", "pci"}): frozenset({naming.PCI}),  # health: any PCI function (GPUs by their name too)
}


@dataclass(frozen=True)
class Shown:
    name: str  # as the listing prints it
    what: str  # pci | mdev | parent | mig
    ident: str  # the BDF, mdev UUID, parent name or MIG UUID it is
    where: str  # the listing and column

    @property
    def kinds(self) -> set[str]:
        """The DeviceName kinds that take such a thing."""
        return {"pci": {"pci", "pf", "gpu"}, "mdev": {"mdev"}, "parent": {"parent"}, "mig": set()}[self.what]


def rows(text: str, header: str) -> Iterator[dict[str, str]]:
    """The rows of the table whose header line starts with ``header`` (columns: 2+ spaces apart)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(header):
            cols = re.split(r"\s{2,}", line.strip())
            for row in lines[i + 1 :]:
                if not re.match(r"^[0-9a-f]", row):  # rows start with an address or a UUID
                    break
                yield dict(zip(cols, re.split(r"\s{2,}", row.strip()), strict=False))
            return


def shown_names(sim: Path) -> list[Shown]:
    out: list[Shown] = []
    for r in rows(invoke(sim, "devices").stdout, "BDF"):
        out.append(Shown(r["BDF"], "pci", r["BDF"], "devices BDF"))
        if r.get("NAME") and r["NAME"] != "-":
            out.append(Shown(r["NAME"], "pci", r["BDF"], "devices NAME"))
    text = invoke(sim, "sriov", "list").stdout
    out += [Shown(r["NAME"], "pci", r["PF"], "sriov list PF NAME") for r in rows(text, "PF") if r.get("NAME")]
    out += [Shown(r["NAME"], "pci", r["VF"], "sriov list VF NAME") for r in rows(text, "VF")]
    listed = as_json(invoke(sim, "vgpu", "list", "--json"))["vgpus"]
    table = list(rows(invoke(sim, "vgpu", "list").stdout, "ID"))
    for doc, r in zip(listed, table, strict=True):
        out.append(Shown(r["GPU"], "pci", doc["gpu"], "vgpu list GPU"))
        if doc["active"]:
            out.append(Shown(r["ID"], "pci" if doc["interface"] == "vfio" else "mdev", doc["id"], "vgpu list ID"))
    for r in rows(invoke(sim, "mdev", "list").stdout, "UUID"):
        out.append(Shown(r["UUID"], "mdev", r["UUID"], "mdev list UUID"))
        out.append(Shown(r["PARENT"], "parent", r["PARENT"], "mdev list PARENT"))
    mig = invoke(sim, "mig", "status").stdout
    for line in mig.splitlines():
        m = re.match(r"^(gpu[0-9]+)\s+(\S+)", line)
        if m:
            out.append(Shown(m.group(1), "pci", m.group(2), "mig status GPU"))
        out += [Shown(u, "mig", u, "mig status MIG UUID") for u in re.findall(r"MIG-[0-9a-f-]{36}", line)]
    return out


def device_arguments() -> set[frozenset[str]]:
    """The kinds of every device argument in the command tree."""
    found: set[frozenset[str]] = set()

    def walk(cmd: click.Command) -> None:
        if isinstance(cmd, click.Group):
            ctx = click.Context(cmd)
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                assert sub is not None
                walk(sub)
        for p in cmd.params:
            if isinstance(p.type, DeviceName):
                found.add(p.type.kinds)

    walk(cli)
    return found


@pytest.fixture(scope="module", params=sorted(SETUP))
def host(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    sim = make_sim(tmp_path_factory.mktemp(request.param, numbered=False) / "host", request.param)
    for argv in SETUP[request.param]:
        r = invoke(sim, *argv)
        assert r.exit_code == 0, (argv, r.stderr)
    return sim


def test_every_device_argument_has_an_accept_set() -> None:
    assert device_arguments() <= set(ACCEPT), device_arguments() - set(ACCEPT)


def test_every_name_a_listing_shows_resolves_to_that_device(host: Path) -> None:
    shown = shown_names(host)
    assert {s.where for s in shown} >= EXPECTED[host.parent.name]  # the setup showed them
    h, nvml, scan = sim_host(host), SimNvml(host), Scan(sim_host(host))
    gpus = {g.bdf: g for g in nvml.gpus()}
    checked = 0
    for s in shown:
        for kinds in device_arguments():
            if not kinds & s.kinds or (kinds == {"gpu"} and s.ident not in gpus):
                continue
            if kinds == {"pf"} and (not scan.exists(s.ident) or scan.device(s.ident).sriov is None):
                continue
            t = naming.resolve(h, s.name, ACCEPT[kinds], nvml=nvml, scan=scan)
            got = {"pci": t.bdf, "mdev": t.uuid, "parent": t.parent}[s.what]
            assert got == s.ident, (s, kinds)
            checked += 1
        if s.what == "mig":
            assert naming.resolve(h, s.name, frozenset({naming.MIG}), nvml=nvml).uuid == s.ident
    assert checked > len(shown)


def _address(bdf: str) -> str:
    dom, bus, rest = bdf.split(":")
    slot, fn = rest.split(".")
    return f"domain='0x{dom}' bus='0x{bus}' slot='0x{slot}' function='0x{fn}'"


def test_every_name_a_listing_shows_works_in_the_commands(host: Path) -> None:
    scan = Scan(sim_host(host))
    gpus = {g.bdf for g in SimNvml(host).gpus()}
    for s in {x for x in shown_names(host) if x.name != x.ident or x.what == "mdev"}:
        if s.what == "pci":
            r = invoke(host, "render", "hostdev", s.name)
            assert r.exit_code == 0 and _address(s.ident) in r.stdout, (s, r.stderr)
            if scan.device(s.ident).sriov is not None:
                assert as_json(invoke(host, "sriov", "list", s.name, "--json"))["pfs"][0]["bdf"] == s.ident
            if s.ident in gpus:
                assert as_json(invoke(host, "mig", "status", s.name, "--json"))["gpus"][0]["bdf"] == s.ident
            r = invoke(host, "sim", "fault", "aer", s.name, "correctable")
            assert r.exit_code == 0 and s.ident in r.stdout, (s, r.stderr)
        elif s.what == "mdev":
            r = invoke(host, "render", "hostdev", s.name)
            assert r.exit_code == 0 and s.ident in r.stdout, (s, r.stderr)
        elif s.what == "parent":
            doc = as_json(invoke(host, "mdev", "types", s.name, "--json"))
            assert doc["parents"][0]["name"] == s.ident


def test_sim_fault_names_a_pf_as_every_command_does(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "host", "hgx-a100")
    assert invoke(sim, "sriov", "enable", "nic1", "--vfs", "2").exit_code == 0
    r = invoke(sim, "sim", "fault", "pf-reset", "nic1")
    assert r.exit_code == 0 and "0000:25:00.0 reset" in r.stdout, r.stderr
    for argv in (["xid", "gpu3", "31"], ["ecc", "gpu3"], ["lost", "gpu3"], ["recover", "gpu3"]):
        r = invoke(sim, "sim", "fault", *argv)
        assert r.exit_code == 0 and "GPU 3" in r.stdout, (argv, r.stderr)
    assert invoke(sim, "sim", "fault", "xid", "nic0", "31").exit_code == 3  # a NIC is no GPU of the driver


SEPARATORS = st.sampled_from([" ", "", "-", "/", "   "])


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_a_vf_by_its_pf_and_number_in_any_spelling(sriov_host: Path, data: st.DataObject) -> None:
    h = sim_host(sriov_host)
    scan = Scan(h)
    pf = data.draw(st.sampled_from(["nic0", "nic2"]))
    bdf = naming.resolve(h, pf, scan=scan).bdf
    assert bdf is not None
    sriov = scan.device(bdf).sriov
    assert sriov is not None and sriov.offset and sriov.stride
    n = data.draw(st.integers(0, sriov.num_vfs - 1))
    pf_text = data.draw(st.sampled_from([pf, pf.upper(), bdf, bdf[5:]]))
    vf_text = data.draw(st.sampled_from(["vf", "VF", "Vf"]))
    name = f"{pf_text}{data.draw(SEPARATORS)}{vf_text}{n}"
    assert naming.resolve(h, name, scan=scan).bdf == vf_address(bdf, sriov.offset, sriov.stride, n)


@pytest.fixture(scope="module")
def sriov_host(tmp_path_factory: pytest.TempPathFactory) -> Path:
    sim = make_sim(tmp_path_factory.mktemp("vfs") / "host", "hgx-a100")
    assert invoke(sim, "sriov", "enable", "nic0", "--vfs", "16").exit_code == 0
    assert invoke(sim, "sriov", "enable", "nic2", "--vfs", "5").exit_code == 0
    return sim


def test_a_missing_vf_says_how_many_there_are(sriov_host: Path) -> None:
    r = invoke(sriov_host, "render", "hostdev", "nic2 vf5")
    assert r.exit_code == 3 and "no VF nic2 vf5 on this host: nic2 has 5 VFs (vf0..vf4)" in r.stderr
    assert json.loads(invoke(sriov_host, "render", "hostdev", "nic2 vf9", "--json").stdout)["error"] == "not-found"
