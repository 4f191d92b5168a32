"""Every file format vgpukit reads, fuzzed: valid documents with one part replaced by something
hostile, random documents, and raw text (deep nesting, binary, NUL bytes, not UTF-8).

Each case writes the file where vgpukit looks for it, runs the command that reads it through
``main(argv)`` (or, for the QoS daemon, which serves forever, the loader it starts with) and checks
the contract of tests/fuzz/harness.py. A marker string that no name rule accepts rides in the
documents: it must never show up in an error message (messages never quote file content).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from vgpukit.errors import VgpukitError
from vgpukit.host import Host

from .conftest import examples
from .harness import PROFILE, FuzzHost

MARKER = "s3cr3t marker!"
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, 1, 2, 7, -1, 2**64, 10**30]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["", MARKER, "٣", "all", "v1", "1g.5gb", "../../etc", "a\nb", "\x1b[2J", "x" * 3000, "0x20B010DE"]),
    st.text(max_size=10),
)
KEYS = st.sampled_from(["", MARKER, "a", "gpus", "tenants", "devices", "1g.5gb", "../x"]) | st.text(max_size=6)
TREES = st.recursive(SCALARS, lambda c: st.lists(c, max_size=3) | st.dictionaries(KEYS, c, max_size=3), max_leaves=10)
RAW = st.sampled_from(
    [
        "[" * 5000 + "]" * 5000,
        "a:\n" + "".join("  " * i + "- \n" for i in range(2000)),
        '{"a":' * 5000 + "1" + "}" * 5000,
        "&a [*a]",
        "a: &x [1]\nb: *x\n" + "".join(f"c{i}: [*x, *x, *x]\n" for i in range(30)),
        "\x00\x01\x02",
        "!!python/object/apply:os.system ['true']",
        "version: v1\nmig-configs: !!binary AAAA\n",
        "%YAML 9.9\n---\na",
        "2001-99-99",
        "key: 2001-99-99 99:99:99",
        MARKER + ": 1\n",
        "root:x:0:0:" + MARKER + ":/root:/bin/bash\n",
    ]
) | st.text(max_size=60)


@st.composite
def mutated(draw: st.DrawFn, doc: Any) -> Any:
    """``doc`` with one subtree (at a random depth) replaced by a hostile value or tree."""
    if not isinstance(doc, dict | list) or not doc or draw(st.integers(0, 3)) == 0:
        return draw(TREES)
    if isinstance(doc, dict):
        key = draw(st.sampled_from(sorted(doc, key=str)))
        out = dict(doc)
        if draw(st.integers(0, 5)) == 0:
            out[draw(KEYS)] = draw(TREES)  # an extra key
        else:
            out[key] = draw(mutated(doc[key]))
        return out
    i = draw(st.integers(0, len(doc) - 1))
    return [*doc[:i], draw(mutated(doc[i])), *doc[i + 1 :]]


def as_text(fmt: str) -> Callable[[Any], str]:
    def render(doc: Any) -> str:
        if fmt == "json":
            return json.dumps(doc)
        return yaml.safe_dump(doc)

    return render


def documents(valid: Any, fmt: str) -> st.SearchStrategy[str | bytes]:
    return (
        mutated(valid).map(as_text(fmt))
        | TREES.map(as_text(fmt))
        | RAW
        | st.binary(max_size=40)
        | st.just(as_text(fmt)(valid))
    )


def plant(path: Path, content: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() or path.is_symlink():
        path.unlink()
    if isinstance(content, str):
        path.write_bytes(content.encode("utf-8", "surrogatepass"))
    else:
        path.write_bytes(content)


def no_content_in(res_err: str) -> None:
    assert MARKER not in res_err, res_err


UUID = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001"


# --------------------------------------------------------------------------- formats under the host root
CASES: dict[str, tuple[str, str, Any, list[list[str]]]] = {
    # name: (path under the root, format, a valid document, commands that read it)
    "mdevctl definition": (
        f"etc/mdevctl.d/mtty/{UUID}",
        "json",
        {"mdev_type": "mtty-2", "start": "auto", "attrs": [{"a/b": "1"}]},
        [["mdev", "list", "--defined"], ["mdev", "start", UUID]],
    ),
    "bind record": (
        "run/vgpukit/bind/0000:05:00.0.json",
        "json",
        {"driver": "mlx5_core", "override": None, "probe": False},
        [["bind", "nic0", "--restore"]],
    ),
    "CDI spec": (
        "etc/cdi/vgpukit-vf.yaml",
        "yaml",
        {"cdiVersion": "0.6.0", "kind": "vgpukit.io/vf", "x-generated-by": "vgpukit", "devices": []},
        [["cdi", "generate"]],
    ),
    "QEMU firmware descriptor": (
        "usr/share/qemu/firmware/50-edk2.json",
        "json",
        {"interface-types": ["uefi"], "mapping": {"device": "flash"}},
        [["render", "domain", "--name", "vm", "--memory", "1024", "--vcpus", "1", "--no-pin"]],
    ),
    "override template": (
        "etc/vgpukit/templates/libvirt/hostdev-pci.xml.j2",
        "text",
        "<hostdev mode='subsystem' type='pci'>{{ dev.bdf }}</hostdev>",
        [["render", "hostdev", "gpu0"]],
    ),
    "simulated kernel state": (
        ".vgpukit-sim/kernel.json",
        "json",
        None,  # read from the pristine host
        [["sriov", "enable", "nic0", "--vfs", "1"], ["mdev", "create", "mtty", "mtty-1"]],
    ),
    "simulated NVML state": (
        ".vgpukit-sim/nvml.json",
        "json",
        None,
        [["mig", "status"], ["partition", "gpu0", "--mig", "1g.5gb"]],
    ),
    "simulated host record": (".vgpukit-sim/sim.json", "json", None, [["sim", "info"]]),
}

TEMPLATE_TOKENS = st.lists(
    st.sampled_from(
        [
            "{{",
            "}}",
            "{%",
            "%}",
            "dev",
            ".",
            "bdf",
            "nope",
            "1/0",
            "'x'*10**9",
            "2**10**10",
            "range(10**9)",
            "''.__class__.__mro__",
            "include 'x'",
            "for x in dev",
            "endfor",
            "|",
            "e",
            "(",
            ")",
            MARKER,
            "\n",
        ]
    ),
    max_size=12,
).map(" ".join)


@pytest.mark.parametrize("name", list(CASES))
def test_files_under_the_root(fuzz_host: FuzzHost, name: str) -> None:
    rel, fmt, valid, commands = CASES[name]
    if valid is None:
        valid = json.loads((fuzz_host.pristine / rel).read_text())
    strategy = TEMPLATE_TOKENS | RAW if fmt == "text" else documents(valid, fmt)

    @settings(max_examples=examples(25))
    @given(content=strategy, which=st.integers(0, len(commands) - 1))
    def case(content: str | bytes, which: int) -> None:
        plant(fuzz_host.work / rel, content)
        fuzz_host.before = _with_planted(fuzz_host)
        try:
            res = fuzz_host.run(commands[which], group="formats", allow_1=commands[which][:2] == ["mdev", "start"])
            no_content_in(res.err)
        finally:
            fuzz_host.before = fuzz_host.pristine_snapshot
            fuzz_host.restore()

    case()


def _with_planted(fuzz_host: FuzzHost) -> dict[str, object]:
    from .harness import snapshot

    return snapshot(fuzz_host.work)


# --------------------------------------------------------------------------- the user's own files
def test_mig_parted_config(fuzz_host: FuzzHost) -> None:
    valid = {
        "version": "v1",
        "mig-configs": {
            "a": [{"devices": [0], "mig-enabled": True, "mig-devices": {"1g.5gb": 2, "1c.3g.20gb": 2}}],
            "b": [{"devices": "all", "device-filter": ["0x20B010DE"], "mig-enabled": False}],
        },
    }

    @settings(max_examples=examples(40))
    @given(content=documents(valid, "yaml"), cmd=st.sampled_from(["apply", "assert"]), name=st.sampled_from(["a", "b"]))
    def case(content: str | bytes, cmd: str, name: str) -> None:
        plant(fuzz_host.scratch / "cfg.yaml", content)
        argv = ["mig", cmd, "-f", "cfg.yaml", "-c", name] + (["--dry-run"] if cmd == "apply" else [])
        res = fuzz_host.run(argv, group="formats", allow_1=cmd == "assert")
        no_content_in(res.err)

    case()


def test_simulator_profile(fuzz_host: FuzzHost) -> None:
    valid = yaml.safe_load(PROFILE.read_text())

    @settings(max_examples=examples(15))
    @given(content=documents(valid, "yaml"))
    def case(content: str | bytes) -> None:
        plant(fuzz_host.scratch / "p.yaml", content)
        target = fuzz_host.scratch / "newsim"
        try:
            res = fuzz_host.run(["sim", "init", "newsim", "--profile", "p.yaml"], group="formats")
            no_content_in(res.err)
            if res.rc != 0:
                assert not target.exists() or not any(target.iterdir()), "a failed sim init left a half-built host"
        finally:
            shutil.rmtree(target, ignore_errors=True)

    case()


# --------------------------------------------------------------------------- the QoS daemon's files
def test_qos_config_and_runtime_record(fuzz_host: FuzzHost) -> None:
    """``qos daemon`` serves forever, so its two files go through the loaders it starts with."""
    from vgpukit.qos.config import Overlay, default_config_path
    from vgpukit.qos.planner import effective, load

    valid = {
        "watchdog_s": 2,
        "gpus": {
            "gpu0": {
                "policy": "fixed-share",
                "slice_ms": 10,
                "tenants": {"a": {"class": "online", "share": 50, "pids": [5]}},
            }
        },
    }
    runtime = {"schema": "vgpukit.qos-runtime/v1", "gpus": {"gpu0": {"policy": "best-effort", "slice_ms": 5}},
               "tenants": {"gpu0": {"b": {"class": "offline", "share": 10, "cgroup": "x"}, "a": None}}}  # fmt: skip
    host = Host(fuzz_host.work)

    @settings(max_examples=examples(40))
    @given(config=documents(valid, "yaml"), record=documents(runtime, "json"))
    def case(config: str | bytes, record: str | bytes) -> None:
        plant(default_config_path(host), config)
        plant(Overlay.path(host), record)
        fuzz_host.cases["formats"] = fuzz_host.cases.get("formats", 0) + 1
        try:
            base = load(host, default_config_path(host))
        except VgpukitError as err:
            assert err.exit_code == 2 and "\n" not in str(err), str(err)
            no_content_in(str(err))
            return
        _cfg, problems = effective(base, Overlay.load(host))
        for p in problems:
            assert "\n" not in p
            no_content_in(p)

    case()
