#!/usr/bin/env python3
"""Vendor and compile the kubelet's gRPC APIs vgpukit serves (reproducible).

    python scripts/k8s_proto.py vendor UPSTREAM_API_PROTO COMMIT [API]   # strip gogo-proto, write the repo copy
    python scripts/k8s_proto.py generate [OUTDIR]          # grpcio-tools -> *_pb2.py, *_pb2.pyi, *_pb2_grpc.py

The APIs (``APIS``: repository directory -> upstream path): the Device Plugin API v1beta1 (default
API), the DRA node plugin API v1 and v1beta1, DRA resource health v1 and plugin registration v1.
``vendor`` reads the upstream ``api.proto`` from a checkout of github.com/kubernetes/kubelet at COMMIT,
removes the gogo-proto import and every ``(gogoproto.*)``
option (the Go-only annotations older releases carried; since the 2025 conversion to plain protoc
there are none, and the step changes nothing but the header), and writes
``vgpukit/k8s/<API>/api.proto`` with a header naming its source. ``generate`` compiles every copy
with the pinned grpcio-tools (``GRPCIO_TOOLS``) into OUTDIR (default: the repository), with the
import root at the repository so the generated modules import each other as
``vgpukit.k8s.v1beta1.api_pb2``. tests/k8s/test_proto.py regenerates into a temporary directory and
compares byte for byte with the committed files.
"""

from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GRPCIO_TOOLS = "1.85.1"  # also pinned in pyproject.toml's dev extra
APIS = {  # directory under vgpukit/k8s -> path in github.com/kubernetes/kubelet
    "v1beta1": "pkg/apis/deviceplugin/v1beta1/api.proto",
    "dra_v1": "pkg/apis/dra/v1/api.proto",
    "dra_v1beta1": "pkg/apis/dra/v1beta1/api.proto",
    "drahealth_v1": "pkg/apis/dra-health/v1/api.proto",
    "pluginreg_v1": "pkg/apis/pluginregistration/v1/api.proto",
}


def proto(api: str) -> Path:
    return Path("vgpukit/k8s") / api / "api.proto"


GOGO_IMPORT = re.compile(r'^\s*import\s+"github.com/gogo/protobuf/gogoproto/gogo.proto";\s*\n', re.MULTILINE)
GOGO_FILE_OPTION = re.compile(r"^\s*option\s+\(gogoproto\.[a-z_]+\)\s*=\s*\w+;\s*\n", re.MULTILINE)
GOGO_FIELD_OPTIONS = re.compile(r"\s*\[\s*\(gogoproto\.[^\]]*\]")  # `[(gogoproto.customname) = "ID", ...]`


def strip_gogo(text: str) -> str:
    text = GOGO_IMPORT.sub("", text)
    text = GOGO_FILE_OPTION.sub("", text)
    return GOGO_FIELD_OPTIONS.sub("", text)


def vendor(upstream: Path, commit: str, api: str = "v1beta1") -> None:
    if not re.fullmatch(r"[0-9a-f]{40}", commit):
        sys.exit("COMMIT: 40 hex digits")
    header = (
        f"// Vendored by vgpukit from github.com/kubernetes/kubelet {APIS[api]}\n"
        f"// at commit {commit} (Apache-2.0, The Kubernetes Authors),\n"
        "// gogo-proto import and options stripped by scripts/k8s_proto.py (nothing else changed).\n"
    )
    (REPO / proto(api)).parent.mkdir(parents=True, exist_ok=True)
    (REPO / proto(api)).write_text(header + strip_gogo(upstream.read_text()))


def generate(out: Path) -> None:
    have = metadata.version("grpcio-tools")
    if have != GRPCIO_TOOLS:
        sys.exit(f"grpcio-tools {GRPCIO_TOOLS} is pinned; {have} is installed")
    from grpc_tools import protoc  # the pinned generator

    for api in APIS:
        (out / proto(api).parent).mkdir(parents=True, exist_ok=True)
        args = ["protoc", f"-I{REPO}", f"--python_out={out}", f"--pyi_out={out}", f"--grpc_python_out={out}"]
        if protoc.main([*args, str(proto(api))]) != 0:
            sys.exit("protoc failed")


if __name__ == "__main__":
    if len(sys.argv) in (4, 5) and sys.argv[1] == "vendor" and (len(sys.argv) == 4 or sys.argv[4] in APIS):
        vendor(Path(sys.argv[2]), sys.argv[3], *sys.argv[4:])
    elif len(sys.argv) in (2, 3) and sys.argv[1] == "generate":
        generate(Path(sys.argv[2]) if len(sys.argv) == 3 else REPO)
    else:
        sys.exit(__doc__)
