"""The harness's own checks, on the host (no QEMU): what once let a broken guest through."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from . import harness


def test_only_an_installed_package_counts_as_installed() -> None:
    assert harness.status_is_installed("install ok installed\n")
    for status in ("unknown ok not-installed", "deinstall ok config-files", "install ok half-installed", ""):
        assert not harness.status_is_installed(status), status


def test_a_failing_stage_fails_the_pipeline(tmp_path: Path) -> None:
    with pytest.raises(harness.Unavailable, match="packing"):
        harness.run_pipeline(f"false | gzip -1 > {tmp_path}/out.gz", "packing")
    harness.run_pipeline(f"echo ok | gzip -1 > {tmp_path}/out.gz", "packing")


def test_a_tiny_or_truncated_initrd_is_not_accepted(tmp_path: Path) -> None:
    empty = tmp_path / "empty.gz"
    empty.write_bytes(gzip.compress(b""))  # what "find | <missing cpio> | gzip" produced: 20 bytes
    assert not harness.initrd_ok(empty)
    big = tmp_path / "big.gz"
    big.write_bytes(gzip.compress(bytes(range(256)) * 4096 * 4, compresslevel=0))
    assert harness.initrd_ok(big)
    big.write_bytes(big.read_bytes()[:-100])
    assert not harness.initrd_ok(big)
    assert not harness.initrd_ok(tmp_path / "missing.gz")


def test_in_ci_a_suite_that_cannot_run_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="could not run in CI"):
        harness.skip_or_fail("no QEMU")
    monkeypatch.setenv("CI", "")
    with pytest.raises(pytest.skip.Exception):
        harness.skip_or_fail("no QEMU")
