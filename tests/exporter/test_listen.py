"""``--listen ADDR:PORT``: a value that is not one is refused with one line, exit 2, nothing served."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import invoke, make_sim
from vgpukit.clikit.params import parse_listen


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (":9401", ("", 9401)),
        ("127.0.0.1:80", ("127.0.0.1", 80)),
        ("[::1]:9401", ("::1", 9401)),
        ("node-1:1", ("node-1", 1)),
    ],
)
def test_good_values(text: str, want: tuple[str, int]) -> None:
    assert parse_listen(text) == want


@pytest.mark.parametrize("text", ["9401", ":0", ":65536", ":x", "::1:80", "[zz]:1", "a b:1", "-a:1", ":+1", ":٣"])
def test_bad_values_exit_2_in_one_line(text: str) -> None:
    r = invoke(None, "exporter", "--listen", text, "--once")
    assert r.exit_code == 2 and r.stdout == ""
    assert len(r.stderr.splitlines()) == 1 and "--listen" in r.stderr


MESSAGES = {
    "expected ADDR:PORT (or :PORT)",
    "the port must be a number from 1 to 65535",
    "not an IPv6 address between the brackets",
    "an IPv6 address goes between brackets: [::1]:PORT",
    "not an address or a host name",
}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(max_size=40))
def test_any_value_is_parsed_or_refused_cleanly(text: str) -> None:
    try:
        addr, port = parse_listen(text)
    except ValueError as exc:
        assert str(exc) in MESSAGES  # fixed messages: the value itself is never quoted
        return
    assert 1 <= port <= 65535 and (addr == "" or addr.isascii())


@settings(max_examples=25, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cs")), max_size=30).filter(lambda t: ":" not in t))
def test_the_cli_refuses_a_value_without_a_port(text: str) -> None:
    r = invoke(None, "exporter", "--listen", text, "--once")
    assert r.exit_code == 2 and len(r.stderr.splitlines()) == 1


def test_json_is_refused_not_ignored(tmp_path: Path) -> None:
    """Trial 2: ``exporter --once --json`` printed the text format as if --json were not there."""
    sim = make_sim(tmp_path / "h")
    for argv in (["exporter", "--once", "--json"], ["--json", "exporter", "--once"]):
        r = invoke(sim, *argv)
        assert r.exit_code == 2 and "no --json" in r.stderr and "# HELP" not in r.stdout, r.output
    assert invoke(sim, "exporter", "--once").exit_code == 0
