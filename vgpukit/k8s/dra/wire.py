"""A ResourceSlice written to the API server without the Kubernetes client's models, the same bytes sent.

The official client (``ResourceV1Api.create_resource_slice`` / ``replace_resource_slice``) validates the
body into its pydantic models and turns them back into a dict: 15 ms of CPU for a slice of 128 devices,
where encoding it takes under 1. Here the body goes straight to the client's own request layer
(``ApiClient.param_serialize`` for the URL, headers and credentials, ``ApiClient.call_api`` for the
request, which encodes it as the client does) with its keys in the order the models would give them:
each model's fields in declaration order under their wire names, a map's keys as they come. So the API
server receives the very bytes the client would have sent (tests/k8s/test_dra_wire.py compares both ways
over the slices of several hosts and releases). A body the models would not take as it is (a key they
do not declare, a value of another type) goes through the client as before, which reports it.
"""

from __future__ import annotations

import contextlib
import json
import types
import typing
from typing import Any

from .cluster import API_TIMEOUT

RESOURCE = "/apis/resource.k8s.io/v1/resourceslices"
ACCEPT = ["application/json", "application/yaml", "application/vnd.kubernetes.protobuf", "application/cbor"]
PRIMITIVE = (str, int, bool)


class NotPlain(Exception):
    """The body is not what the models would pass through unchanged: the client's own path is taken."""


def _model(cls: Any) -> dict[str, tuple[str, Any]] | None:
    """A model's fields: wire name -> (position key, annotation), in declaration order; None: not a model."""
    fields = getattr(cls, "model_fields", None)
    if not isinstance(fields, dict):
        return None
    out = {}
    for name, info in fields.items():
        out[info.serialization_alias or info.alias or name] = (name, info.annotation)
    return out


def _unwrap(ann: Any) -> Any:
    """``Optional[X]``, ``Annotated[X, ...]`` (StrictStr and the like): X."""
    while True:
        origin = typing.get_origin(ann)
        if origin is typing.Annotated:
            ann = typing.get_args(ann)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(ann) if a is not type(None)]
            if len(args) != 1:
                raise NotPlain(str(ann))
            ann = args[0]
        else:
            return ann


class Order:
    """How the client's models order a body's keys (a ``V1ResourceSlice``'s), read from the models once per
    publisher: what each annotation is (a list, a map, a model and its fields, a plain value), kept."""

    def __init__(self, root: Any = None) -> None:
        if root is None:
            from kubernetes.client.models import V1ResourceSlice

            root = V1ResourceSlice
        self.root = root
        self.shapes: dict[Any, tuple[str, Any]] = {}

    def body(self, doc: dict[str, Any]) -> dict[str, Any]:
        return self._value(doc, self.root)  # type: ignore[no-any-return]

    def _shape(self, ann: Any) -> tuple[str, Any]:
        try:
            return self.shapes[ann]
        except (KeyError, TypeError):  # not seen yet (or an annotation that cannot be a key: not kept)
            pass
        plain = _unwrap(ann)
        origin = typing.get_origin(plain)
        if origin in (list, typing.List):  # noqa: UP006
            shape: tuple[str, Any] = ("list", typing.get_args(plain)[0])
        elif origin in (dict, typing.Dict):  # noqa: UP006
            shape = ("map", typing.get_args(plain)[1])
        elif (plan := _model(plain)) is not None:
            shape = ("model", plan)
        else:
            shape = ("plain", plain)
        with contextlib.suppress(TypeError):
            self.shapes[ann] = shape
        return shape

    def _value(self, value: Any, ann: Any) -> Any:
        what, of = self._shape(ann)
        if what == "list":
            if not isinstance(value, list):
                raise NotPlain("not a list")
            return [self._value(v, of) for v in value]
        if what == "map":
            if not isinstance(value, dict):
                raise NotPlain("not a map")
            return {k: self._value(v, of) for k, v in value.items()}
        if what == "model":
            if not isinstance(value, dict) or not value.keys() <= of.keys():
                raise NotPlain("not a model's fields")
            if len(value) == 1:  # an attribute's value, a capacity's: one field of several
                ((w, v),) = value.items()
                return {w: self._value(v, of[w][1])} if v is not None else {}
            return {w: self._value(value[w], a) for w, (_n, a) in of.items() if value.get(w) is not None}
        if of in PRIMITIVE and type(value) is of:
            return value
        raise NotPlain(f"{type(value).__name__} for {of}")


def write(api: Any, order: Order, doc: dict[str, Any], name: str | None = None) -> Any:
    """Create (``name`` None) or replace the slice ``doc``; the stored object (a dict), as the API server
    answered. Raises the client's ``ApiException`` for an answer that is not 2xx, as the client does."""
    try:
        body = order.body(doc)
    except NotPlain:
        call = api.create_resource_slice if name is None else api.replace_resource_slice
        raw = call(*([name] if name is not None else []), doc, _preload_content=False, _request_timeout=API_TIMEOUT)
        return json.loads(raw.data) if raw.data else None
    from kubernetes.client.exceptions import ApiException

    client = api.api_client
    method, url, headers, _none, post = client.param_serialize(
        method="POST" if name is None else "PUT",
        resource_path=RESOURCE + ("/{name}" if name is not None else ""),
        path_params={"name": name} if name is not None else {},
        header_params={"Accept": client.select_header_accept(ACCEPT)},
        body=None,
        post_params=[],
        files={},
        auth_settings=["BearerToken"],
        collection_formats={},
    )
    resp = client.call_api(method, url, headers, body=body, post_params=post, _request_timeout=API_TIMEOUT)
    if not 200 <= resp.status <= 299:
        resp.read()
        raise ApiException.from_response(http_resp=resp, body=None, data=None)
    data = resp.read()
    return json.loads(data) if data else None
