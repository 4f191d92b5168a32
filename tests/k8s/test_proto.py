"""The vendored kubelet API and its generated code are reproducible (scripts/k8s_proto.py)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ("api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py")
PKG = Path("vgpukit/k8s/v1beta1")
APIS = {  # the kubelet APIs vgpukit serves: repository directory -> upstream path
    "v1beta1": "pkg/apis/deviceplugin/v1beta1/api.proto",
    "dra_v1": "pkg/apis/dra/v1/api.proto",
    "dra_v1beta1": "pkg/apis/dra/v1beta1/api.proto",
    "drahealth_v1": "pkg/apis/dra-health/v1/api.proto",
    "pluginreg_v1": "pkg/apis/pluginregistration/v1/api.proto",
}


def _script() -> object:
    spec = importlib.util.spec_from_file_location("k8s_proto", ROOT / "scripts" / "k8s_proto.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_regenerating_gives_the_committed_files(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(ROOT / "scripts/k8s_proto.py"), "generate", str(tmp_path)], check=True)
    for api in APIS:
        pkg = Path("vgpukit/k8s") / api
        for name in GENERATED:
            assert (tmp_path / pkg / name).read_bytes() == (ROOT / pkg / name).read_bytes(), (api, name)


def test_the_dra_apis_are_vendored_from_the_same_commit() -> None:
    for api, upstream in APIS.items():
        head = (ROOT / "vgpukit/k8s" / api / "api.proto").read_text().splitlines()[:3]
        assert upstream in head[0] and "63b3249724f7d89a8aa48f9acb3811f193c9aa68" in head[1], api
    assert "rpc NodePrepareResources" in (ROOT / "vgpukit/k8s/dra_v1/api.proto").read_text()
    assert "rpc NodeWatchResources" in (ROOT / "vgpukit/k8s/drahealth_v1/api.proto").read_text()
    assert "rpc GetInfo" in (ROOT / "vgpukit/k8s/pluginreg_v1/api.proto").read_text()


def test_vendored_proto_names_its_source_and_has_no_gogo() -> None:
    text = (ROOT / PKG / "api.proto").read_text()
    head = text.splitlines()[:3]
    assert "github.com/kubernetes/kubelet pkg/apis/deviceplugin/v1beta1/api.proto" in head[0]
    assert "63b3249724f7d89a8aa48f9acb3811f193c9aa68" in head[1]
    assert "gogo" not in "\n".join(text.splitlines()[3:])
    assert "repeated CDIDevice cdi_devices = 5;" in text


def test_strip_gogo_on_the_pre_2025_upstream_form() -> None:
    """Releases before the 2025 conversion carried gogo-proto options: they are removed, fields kept."""
    old = (
        'syntax = "proto3";\n\npackage v1beta1;\n\n'
        'import "github.com/gogo/protobuf/gogoproto/gogo.proto";\n\n'
        "option (gogoproto.goproto_stringer_all) = false;\n"
        "option (gogoproto.stringer_all) =  true;\n"
        "message AllocateRequest {\n"
        '\trepeated string devices_ids = 1 [(gogoproto.customname) = "DevicesIDs"];\n'
        "}\n"
    )
    out = _script().strip_gogo(old)  # type: ignore[attr-defined]
    assert "gogo" not in out
    assert "\trepeated string devices_ids = 1;\n" in out and "package v1beta1;" in out
