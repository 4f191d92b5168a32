"""One quantity grammar per context (docs/cli.md, "Sizes"):

* vgpukit's own (the command line, host configs, the QoS config): every unit binary (``4G`` = ``4Gi`` =
  ``4GiB`` = 4 * 2^30, as QEMU and Docker read it), decimal fractions that come to whole bytes, and
  ``KB``/``MB``/``GB``/``TB`` refused as ambiguous;
* Kubernetes' where Kubernetes is the source (a DRA claim's opaque configuration): ``4G`` = 4 * 10^9,
  ``1.5Gi``, exponents, valued by the Kubernetes client library's parser.
"""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import invoke, make_sim
from vgpukit.errors import InvalidInput
from vgpukit.inputs import parse_k8s_quantity, parse_size
from vgpukit.k8s.dra.config import parameters

BINARY = {"": 0, "k": 10, "m": 20, "g": 30, "t": 40}
HI = 1 << 50


def _case(text: str, flips: list[bool]) -> str:
    return "".join(c.upper() if f else c.lower() for c, f in zip(text, flips + [False] * len(text), strict=False))


@given(
    whole=st.integers(0, 4096),
    frac=st.sampled_from(["", "5", "25", "125", "75"]),
    unit=st.sampled_from(["k", "m", "g", "t"]),
    spelling=st.sampled_from(["", "i", "ib"]),
    flips=st.lists(st.booleans(), max_size=3),
)
def test_vgpukit_sizes_are_binary_in_every_spelling(
    whole: int, frac: str, unit: str, spelling: str, flips: list[bool]
) -> None:
    text = f"{whole}{'.' + frac if frac else ''}{_case(unit + spelling, flips)}"
    value = Fraction(f"{whole}.{frac or 0}") * (1 << BINARY[unit])
    if value.denominator != 1:
        with pytest.raises(InvalidInput, match="not a whole number of bytes"):
            parse_size(text, "--memory")
    elif value > HI:
        with pytest.raises(InvalidInput, match="expected a size <= 1 PiB"):
            parse_size(text, "--memory")
    else:
        assert parse_size(text, "--memory") == value
        assert parse_size(f"  {text} ", "--memory") == value  # white space around is ignored


@given(n=st.integers(1, 10**6), unit=st.sampled_from(["KB", "MB", "GB", "TB", "kb", "Gb", "gB", "PB"]))
def test_si_looking_units_are_refused_as_ambiguous_in_one_line(n: int, unit: str) -> None:
    with pytest.raises(InvalidInput) as err:
        parse_size(f"{n}{unit}", "--memory")
    assert "ambiguous" in str(err.value) and "\n" not in str(err.value)


@given(st.text(max_size=12))
def test_anything_else_is_a_size_or_one_line_refusal(text: str) -> None:
    try:
        n = parse_size(text, "size")
    except InvalidInput as err:
        assert "\n" not in str(err)
        return
    assert isinstance(n, int) and 0 <= n <= HI and text.isascii()


K8S_SUFFIX = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30}


@settings(deadline=None)  # the first example imports the Kubernetes client library
@given(
    whole=st.integers(0, 100000),
    frac=st.sampled_from(["", "5", "25", "001"]),
    suffix=st.sampled_from(sorted(K8S_SUFFIX)),
)
def test_kubernetes_quantities_as_the_api_server_reads_them(whole: int, frac: str, suffix: str) -> None:
    text = f"{whole}{'.' + frac if frac else ''}{suffix}"
    value = Decimal(f"{whole}.{frac or 0}") * K8S_SUFFIX[suffix]
    if value != value.to_integral_value():
        with pytest.raises(InvalidInput, match="not a whole number of bytes"):
            parse_k8s_quantity(text, "limit", lo=1)
    elif 1 <= value <= HI:
        assert parse_k8s_quantity(text, "limit", lo=1) == int(value)
    else:
        with pytest.raises(InvalidInput):
            parse_k8s_quantity(text, "limit", lo=1)


@pytest.mark.parametrize(
    ("text", "value"), [("1e3", 1000), ("1E6", 10**6), ("+5", 5), (".5Ki", 512), ("5.", 5), ("1.5Gi", 3 << 29)]
)
def test_kubernetes_forms_beyond_digits_and_a_suffix(text: str, value: int) -> None:
    assert parse_k8s_quantity(text, "limit") == value


@pytest.mark.parametrize("text", ["4K", "4GB", "4 Gi", "1.5.Gi", "٣Gi", "1_000", "100m", "-1", "Gi", "4gi"])
def test_kubernetes_refuses_what_kubernetes_refuses_and_fractions_of_a_byte(text: str) -> None:
    with pytest.raises(InvalidInput):
        parse_k8s_quantity(text, "limit", lo=1)


@pytest.mark.parametrize(("limit", "value"), [("1.5Gi", 3 << 29), ("4G", 4 * 10**9), ("4Gi", 4 << 30)])
def test_a_dra_memory_cap_takes_what_kubernetes_accepts(limit: str, value: int) -> None:
    doc = {"apiVersion": "vgpukit.io/v1", "kind": "MemoryCapConfig", "limit": limit}
    kind, cap = parameters(doc, "config entry 1")
    assert (kind, cap.limit) == ("MemoryCapConfig", value)


def test_the_command_line_reads_4g_as_gib_and_refuses_4gb(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "host", "hgx-a100")
    args = ["render", "domain", "--name", "vm", "--vcpus", "2", "--memory"]
    r = invoke(sim, *args, "4G")
    assert r.exit_code == 0, r.stderr
    assert "<memory unit='MiB'>4096</memory>" in r.stdout
    r = invoke(sim, *args, "4GB")
    assert r.exit_code == 2 and "ambiguous" in r.stderr and r.stderr.count("\n") == 1
