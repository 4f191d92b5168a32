"""The DRA plugin is a door too (issue 35 §0): a claim's device on a GPU the health layer finds unusable
is refused at prepare with the refusal ``partition`` gives, before anything is made; a claim of the
other GPUs is prepared as usual."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import invoke, make_sim
from tests.k8s.apiserver import ApiServer
from tests.k8s.test_dra_plugin import Node, api, claim  # noqa: F401 (fixtures)


def _ok(sim: Path, *args: str) -> None:
    r = invoke(sim, *args)
    assert r.exit_code == 0, (args, r.stderr)


def _partition_says(sim: Path, gpu: str) -> str:
    r = invoke(sim, "partition", gpu, "--mig", "1g.5gb")
    assert r.exit_code == 6, r.output
    return r.stderr.strip().removeprefix("vgpukit: error: ")


def test_a_device_on_an_unusable_gpu_is_refused_at_prepare_as_partition_refuses_it(
    short_tmp: Path,
    api: ApiServer,  # noqa: F811
) -> None:
    sim = make_sim(short_tmp / "h", "hgx-a100")
    _ok(sim, "partition", "gpu1", "--mig", "1g.5gb")  # gpu1 in MIG mode: slices made on demand offered
    node = Node(sim, api)
    try:
        _ok(sim, "sim", "fault", "ecc", "gpu0", "--double")  # unusable, still answering
        _ok(sim, "sim", "fault", "xid", "gpu1", "79")  # lost
        for uid, device, gpu in (
            ("u-whole", "gpu-0000-03-00-0", "gpu0"),
            ("u-made", "gpu-0000-04-00-0-mig-1g-5gb-0", "gpu1"),
        ):
            ref = node.add(claim(uid, uid, device))
            answer = node.kubelet.prepare(ref).claims[uid]
            assert answer.error == _partition_says(sim, gpu), answer.error
            assert not any(p.exists() for p in node.files(uid))  # nothing written, nothing made
        ref = node.add(claim("u-ok", "ok", "gpu-0000-23-00-0"))
        assert node.kubelet.prepare(ref).claims["u-ok"].error == ""  # the other GPUs: as usual
    finally:
        node.close()
