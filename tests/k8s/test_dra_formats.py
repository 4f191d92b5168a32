"""Property tests of the DRA plugin's formats: device names, and ResourceClaims of any shape."""

from __future__ import annotations

import re
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from vgpukit.errors import VgpukitError
from vgpukit.k8s.dra.claims import results_of
from vgpukit.k8s.dra.devices import DRIVER, pci_functions
from vgpukit.node.dra_names import KINDS, device_name

DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=12,
)


@given(st.sampled_from(KINDS), st.text(max_size=120))
def test_a_device_name_is_always_a_dns_label(kind: str, ident: str) -> None:
    assert DNS_LABEL.fullmatch(device_name(kind, ident))


bdfs = st.builds(
    "{:04x}:{:02x}:{:02x}.{}".format,
    st.integers(0, 0xFFFF),
    st.integers(0, 0xFF),
    st.integers(0, 0x1F),
    st.integers(0, 7),
)


@given(st.sampled_from(["gpu", "vf"]), bdfs, st.sampled_from(KINDS), st.text(max_size=80))
def test_a_pci_name_gives_back_its_function_and_no_other_name_does(kind: str, bdf: str, other: str, ident: str) -> None:
    """A claim's prepare reads the functions its names name: a GPU's or VF's name names its BDF; a
    name of a MIG slice, an mdev or anything else names none or a well-formed BDF."""
    assert pci_functions([device_name(kind, bdf)]) == {bdf}
    for fn in pci_functions([device_name(other, ident), ident]):
        assert re.fullmatch(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", fn)
    assert pci_functions([device_name("mig", "MIG-4a2b3c4d-0000-1111-2222-333344445555")]) == frozenset()


RESULT = {"request": "r", "driver": DRIVER, "pool": "node-1", "device": "gpu-0000-03-00-0"}


def _claim(devices: Any) -> dict[str, Any]:
    return {"status": {"allocation": {"devices": devices}}}


@settings(max_examples=300)
@given(
    st.one_of(
        json_values,
        st.builds(_claim, json_values),
        st.builds(lambda rs: _claim({"results": rs}), st.lists(json_values, max_size=3)),
        st.builds(
            lambda rs: _claim({"results": rs}),
            st.lists(st.fixed_dictionaries({"driver": st.just(DRIVER)}, optional={"pool": json_values}), max_size=3),
        ),
        st.builds(  # a share of a device shared by capacity: its shareID and consumed capacity of any shape
            lambda share, used: _claim({"results": [{**RESULT, "shareID": share, "consumedCapacity": used}]}),
            json_values | st.uuids().map(str),
            json_values | st.dictionaries(st.sampled_from(["memory", "computeShare"]), json_values),
        ),
        st.builds(  # a result of this node, with opaque configuration and reservations of any shape
            lambda cfg, reserved: {
                "status": {
                    "allocation": {"devices": {"results": [RESULT], "config": cfg}},
                    "reservedFor": reserved,
                }
            },
            st.lists(
                st.fixed_dictionaries(
                    {
                        "opaque": st.fixed_dictionaries(
                            {"driver": st.just(DRIVER)}, optional={"parameters": json_values}
                        )
                    },
                    optional={"requests": json_values, "source": json_values},
                )
                | json_values,
                max_size=3,
            ),
            json_values,
        ),
    )
)
def test_a_claim_of_any_shape_gives_results_or_a_vgpukit_error(doc: Any) -> None:
    try:
        out = results_of(doc, "node-1")
    except VgpukitError:
        return
    assert out and all(r.pool == "node-1" for r in out)
