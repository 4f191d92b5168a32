"""One version: the manifests name the image tag scripts/build-image.sh gives (localhost/vgpukit:<__version__>),
and CHANGELOG.md has the entry scripts/release.sh wants. Fast (no build): it runs with the unit tests."""

from __future__ import annotations

import yaml

import vgpukit

from .conftest import ROOT


def test_manifests_name_the_versioned_image() -> None:
    images = []
    for manifest in sorted((ROOT / "deploy" / "kubernetes").glob("*.yaml")):
        for doc in yaml.safe_load_all(manifest.read_text()):
            spec = (doc or {}).get("spec", {}).get("template", {}).get("spec", {})
            images += [c["image"] for c in spec.get("containers", []) + spec.get("initContainers", [])]
    assert images and set(images) == {f"localhost/vgpukit:{vgpukit.__version__}"}


def test_changelog_has_the_entry() -> None:
    heads = [line for line in (ROOT / "CHANGELOG.md").read_text().splitlines() if line.startswith("## ")]
    assert heads[0] in ("## Unreleased", f"## {vgpukit.__version__}", f"## v{vgpukit.__version__}")
