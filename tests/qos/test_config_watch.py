"""The daemon listens to its config file: an edit reloads it as SIGHUP does, without a signal."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from .conftest import DaemonProc, wait_for

pytestmark = pytest.mark.realproc


def _replace(path: Path, text: str) -> None:
    """As an editor or ``apply`` writes: a temporary file renamed over the config."""
    tmp = path.with_name(".qos.yaml.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def test_an_edited_config_file_is_reloaded_without_a_signal(tmp_path: Path, spawn) -> None:  # type: ignore[no-untyped-def]
    p = spawn()
    cfg = tmp_path / "qos.yaml"
    cfg.write_text("gpus:\n  gpu0:\n    policy: best-effort\n")
    d = DaemonProc(tmp_path, cfg).start()
    try:
        config = lambda: d.req(op="status")["config"]  # noqa: E731
        policy = lambda: d.req(op="status")["gpus"][0]["policy"]  # noqa: E731
        assert config()["reloads"] == 0
        tenant = f"      w: {{class: online, share: 30, pids: [{p.pid}]}}\n"
        burst = f"gpus:\n  gpu0:\n    policy: burst-share\n    tenants:\n{tenant}"
        _replace(cfg, burst)  # renamed into place
        assert wait_for(lambda: policy() == "burst-share", timeout=10), (tmp_path / "daemon.log").read_text()
        assert set(d.status()) == {"w"} and config()["reloads"] == 1
        cfg.write_text(burst)  # written in place, the same text: nothing to reload
        time.sleep(0.5)
        assert config()["reloads"] == 1
        cfg.write_text("gpus: [broken\n")  # refused, the running configuration kept (as on SIGHUP)
        assert wait_for(lambda: config()["reloads_refused"] == 1, timeout=10)
        assert config()["reload_error"] is not None and set(d.status()) == {"w"}
        cfg.write_text("gpus:\n  gpu0:\n    policy: best-effort\n")  # fixed: reloaded
        assert wait_for(lambda: policy() == "best-effort", timeout=10)
        assert config()["reloads"] == 2 and config()["reload_error"] is None
    finally:
        assert d.stop() == 0
