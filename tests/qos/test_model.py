from __future__ import annotations

from pathlib import Path

import pytest

from vgpukit.errors import Conflict, InvalidInput, NoCapacity, NotFound
from vgpukit.host import Host
from vgpukit.qos.config import Overlay
from vgpukit.qos.model import MAX_TENANTS, Gpu, QosConfig, Tenant
from vgpukit.qos.planner import AddTenant, RemoveTenant, change, effective, load


def t(name: str, share: int = 10, cls: str = "offline") -> Tenant:
    """A tenant of its own process (one per name: a process may be in one tenant only)."""
    return Tenant(name, cls, share, "pids", pids=(int.from_bytes(name.encode()[:3], "big") % 4_000_000 + 2,))


def test_config_roundtrip() -> None:
    doc = {
        "gpus": {
            "gpu0": {
                "policy": "fixed-share",
                "slice_ms": 5,
                "tenants": {
                    "web": {"class": "online", "share": 40, "cgroup": "/sys/fs/cgroup/unified/web"},
                    "batch": {"class": "offline", "share": 60, "pids": [100, 101], "demand": "sample"},
                    "vm": {"class": "offline", "share": 10, "domain": "vm1"},
                },
            },
            "MIG-1234abcd-0000": {},
        }
    }
    cfg = QosConfig.from_dict(doc)
    assert cfg.gpus["gpu0"].tenant("batch").pids == (100, 101)
    assert cfg.gpus["MIG-1234abcd-0000"].policy == "best-effort"
    again = QosConfig.from_dict(cfg.to_dict())
    assert again.to_dict() == cfg.to_dict()


@pytest.mark.parametrize(
    "doc",
    [
        {"gpus": {"gpu0": {"policy": "fair"}}},
        {"gpus": {"gpu0": {"slice_ms": 0}}},
        {"gpus": {"bad/key": {}}},
        {"gpus": {"gpu0": {"tenants": {"a": {"class": "online", "share": 0, "pids": [5]}}}}},
        {"gpus": {"gpu0": {"tenants": {"a": {"class": "online", "share": 5.5, "pids": [5]}}}}},
        {"gpus": {"gpu0": {"tenants": {"a": {"class": "gold", "share": 5, "pids": [5]}}}}},
        {"gpus": {"gpu0": {"tenants": {"a": {"class": "online", "share": 5}}}}},
        {"gpus": {"gpu0": {"tenants": {"a": {"class": "online", "share": 5, "pids": [5], "domain": "x"}}}}},
        {"gpus": {"gpu0": {"tenants": {"a": {"class": "online", "share": 5, "cgroup": "../x"}}}}},
        {"gpus": {"gpu0": {"tenants": {"a": {"class": "online", "share": 5, "pids": [1]}}}}},
        {"gpus": {"gpu0": {"colour": 1}}},
        {"extra": 1},
        [],
        {"watchdog_s": "x"},  # these three raised ValueError / TypeError: SIGHUP killed the daemon
        {"sample_ms": [1]},
        {"gpus": {"gpu0": {"tenants": {"a": {"class": "online", "share": 5, "cgroup": 5}}}}},
        {"gpus": {"gpu0": {"tenants": {"a": {"class": ["online"], "share": 5, "pids": [5]}}}}},
        {"gpus": {"gpu0": {"slice_ms": True}}},
        {"gpus": {"gpu0": {"tenants": {1: {}, "b": {}, "a" * 5000: {}}}}},
        {1: 2, "x": 3},
    ],
)
def test_bad_configs_rejected(doc: object) -> None:
    with pytest.raises(InvalidInput):
        QosConfig.from_dict(doc)


def test_share_sum_per_class() -> None:
    cfg = QosConfig()
    cfg = change(cfg, AddTenant("gpu0", t("a", 60, "online"))).config
    cfg = change(cfg, AddTenant("gpu0", t("b", 60, "offline"))).config  # other class: fine
    with pytest.raises(Conflict, match="online shares add up to 101"):
        change(cfg, AddTenant("gpu0", t("c", 41, "online")))
    assert [x.name for x in cfg.gpus["gpu0"].tenants] == ["a", "b"]


def test_tenant_limit_and_duplicates() -> None:
    cfg = QosConfig()
    for i in range(MAX_TENANTS):
        cfg = change(cfg, AddTenant("gpu0", t(f"t{i}", 1))).config
    with pytest.raises(NoCapacity):
        change(cfg, AddTenant("gpu0", Tenant("x", "online", 1, "pids", pids=(9,))))
    assert change(cfg, AddTenant("gpu0", t("t0", 1))).plan == []  # the same tenant again: nothing to do
    with pytest.raises(Conflict):
        change(cfg, AddTenant("gpu0", t("t0", 2)))
    with pytest.raises(NotFound):
        change(cfg, RemoveTenant("gpu0", "nope"))
    with pytest.raises(NotFound):
        change(cfg, RemoveTenant("gpu9", "t0"))


def test_overlay_applies_on_top_of_base() -> None:
    base = QosConfig.from_dict({"gpus": {"gpu0": {"tenants": {"a": {"class": "online", "share": 50, "pids": [10]}}}}})
    ov = Overlay()
    ov.record_policy("gpu0", "burst-share", 20)
    ov.record_tenant("gpu0", "a", None)
    ov.record_tenant("gpu0", "b", t("b", 30))
    ov.record_tenant("gpu1", "c", t("c", 80))
    ov.record_tenant("gpu1", "d", t("d", 80))  # no longer fits: skipped, reported
    cfg, problems = effective(base, ov)
    assert cfg.gpus["gpu0"].policy == "burst-share" and cfg.gpus["gpu0"].slice_ms == 20
    assert [x.name for x in cfg.gpus["gpu0"].tenants] == ["b"]
    assert [x.name for x in cfg.gpus["gpu1"].tenants] == ["c"]
    assert len(problems) == 1 and "gpu1/d" in problems[0]
    assert Gpu.from_dict("gpu0", base.gpus["gpu0"].to_dict()) == base.gpus["gpu0"]  # base untouched


def test_config_errors_name_file_and_line_never_content(tmp_path: Path) -> None:
    host = Host(tmp_path)
    path = tmp_path / "etc/vgpukit/qos.yaml"
    path.parent.mkdir(parents=True)
    cases = [
        (
            "watchdog_s: 1\ngpus:\n  gpu0:\n    tenants:\n      w: {class: SECRET, share: 5, pids: [5]}\n",
            "5:18",
        ),
        # the share that takes the class over 100%
        (
            "gpus:\n  g:\n    tenants:\n      a: {share: 60, pids: [5]}\n      b: {share: 60, pids: [6]}\n",
            "5:18",
        ),
        ("# SECRET\nsample_ms: 0\n", "2:12"),
        ("gpus:\n  gpu0: " + "[" * 3000 + "]" * 3000 + "\n# SECRET\n", "2:42"),
        ("gpus:\n  gpu0: {policy: 'SECRET" + "x" * 5000 + "'}\n", "2:18"),
        (
            "gpus:\n  gpu0:\n    slice_ms: 5\n    tenants:\n      w:\n        pids: [5]\n        memory: 4GB\n"
            "        share: 5\n",
            "7:17",
        ),
        # the declaration reads the keys in order: a tenant before the unknown key is a whole tenant
        ("gpus:\n  gpu0:\n    tenants:\n      w: {pids: [5], share: 5}\n    bogus: 1\n", "5:5"),
        ("gpus:\n  gpu0:\n    tenants:\n      w: {pids: [5]}\n", "4:10: $.gpus.gpu0.tenants.w"),
    ]
    for text, line in cases:
        path.write_text(text)
        with pytest.raises(InvalidInput) as exc:
            load(host, path)
        msg = str(exc.value)
        assert msg.startswith("/etc/vgpukit/qos.yaml:" + line + ": ") and "SECRET" not in msg, msg
        assert len(msg) < 200
    assert load(host, tmp_path / "missing.yaml").gpus == {}


def test_default_demand_is_auto() -> None:
    assert Tenant.from_dict("a", {"class": "online", "share": 5, "pids": [5]}).demand == "auto"
    assert Tenant("a", "online", 5, "pids", pids=(5,)).demand == "auto"


def test_corrupt_overlay_is_ignored(tmp_path: Path) -> None:
    host = Host(tmp_path)
    for text in ("[" * 100000, '{"gpus": {"gpu0": 5, "gpu1": {"policy": 7}}, "tenants": {"gpu0": {"a": 5}, "g": []}}'):
        host.write_file(Overlay.path(host), text)
        ov = Overlay.load(host)
        assert ov.tenants in ({}, {"gpu0": {}})
        _, problems = effective(QosConfig(), ov)
        assert all("gpu1" in p for p in problems)
