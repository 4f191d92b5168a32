"""The toolkit's vGPU catalogue and the simulated driver's type tables are two sources: they must agree.

The simulator never reads the catalogue (tests/core/test_sim_independence.py); this checks both
against each other for every board and type both describe.
"""

from __future__ import annotations

from vgpukit.sim.vgpu_types import boards
from vgpukit.vgpu.catalog import catalogs


def test_catalogue_and_simulated_driver_agree_on_shared_types() -> None:
    sim = boards()
    shared = [c for c in catalogs() if c.key in sim]
    assert {c.key for c in shared} == {"tesla-t4", "h100-pcie"}
    compared = 0
    for cat in shared:
        board = sim[cat.key]
        assert (board.interface, board.framebuffer_mb, board.homogeneous, board.name_prefix) == (
            cat.interface,
            cat.framebuffer_mb,
            cat.homogeneous,
            cat.name_prefix,
        ), cat.key
        for t in cat.types:
            s = board.by_id(t.id)
            if s is None:
                continue
            fields = ("name", "framebuffer_mb", "max_instances", "num_heads", "frl_config", "max_resolution")
            assert {f: getattr(s, f) for f in fields} == {f: getattr(t, f) for f in fields}, (cat.key, t.id)
            assert board.full_name(s) == cat.full_name(t)
            assert s.description() == t.description()
            assert s.framebuffer_mb * s.max_instances <= board.framebuffer_mb
            compared += 1
    assert compared == 18
