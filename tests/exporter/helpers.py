"""Scrape helpers: run ``vgpukit exporter --once`` through the CLI harness and parse what it prints."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import invoke

Sample = tuple[str, frozenset[tuple[str, str]], float]


def scrape(sim: Path) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Family name -> [(labels, value)] of one scrape (the text must parse). A scrape of a host with a
    lost GPU is whole but for that GPU's telemetry: --once then exits 6, naming it (docs/health.md)."""
    r = invoke(sim, "exporter", "--once")
    assert r.exit_code == 0 or (r.exit_code == 6 and "not read: " in r.stderr and "is lost" in r.stderr), r.stderr
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(r.stdout):
        assert fam.name not in out, f"{fam.name} twice"
        out[fam.name] = [(dict(s.labels), s.value) for s in fam.samples]
    return out


def value(families: dict[str, list[tuple[dict[str, str], float]]], name: str, **labels: str) -> float | None:
    for got, v in families.get(name, []):
        if all(got.get(k) == want for k, want in labels.items()):
            return v
    return None


def sample_names(text: str) -> set[str]:
    return {s.name for fam in text_string_to_metric_families(text) for s in fam.samples}
