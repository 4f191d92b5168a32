"""A local Kubernetes API-server stand-in: the REST paths the official client uses for one Node and DRA.

* ``GET /version`` and discovery (``GET /apis``, ``/apis/resource.k8s.io``, ``/apis/resource.k8s.io/v1``)
  as the release ``version`` (1.34 .. 1.37) answers them (``git_version`` as a provider spells it);
* ``GET /api/v1/nodes/NAME``                                   (CoreV1Api.read_node)
* ``GET /api/v1/nodes?fieldSelector=metadata.name=NAME&watch=true&timeoutSeconds=N``
                                                                (watch.Watch().stream(list_node, ...)):
  one JSON event per line, ``ADDED`` first, then ``MODIFIED`` on every change, until the timeout
* ``PATCH /api/v1/nodes/NAME`` with a merge / strategic-merge patch of labels and annotations
  (CoreV1Api.patch_node); a ``null`` value deletes the key, as the API server does.
* ``POST /api/v1/namespaces/NS/events`` (CoreV1Api.create_namespaced_event): kept in ``events``
* ``GET /apis/resource.k8s.io/v1/namespaces/NS/resourceclaims/NAME``
  (ResourceV1Api.read_namespaced_resource_claim): the claims a test put in ``claims``.
* ``/apis/resource.k8s.io/v1/resourceslices[/NAME]``: list (``fieldSelector`` on ``spec.nodeName``
  and ``spec.driver``), read, create (409 AlreadyExists; ``dryRun=All`` validates and stores nothing;
  ``generateName``), replace (409 Conflict on a stale ``metadata.resourceVersion``), delete. Every
  create and replace is validated as the release's API server does (:mod:`tests.k8s.validation`: its
  strict schema and the rules the schema cannot say) and refused with 422 Invalid, its reasons in the
  Status message; each refusal is kept in ``refused``. The release's feature gates (``gates``: defaults
  as the release has them, ``partitionable`` and ``device_taints`` to turn them) drop the fields of a
  gate that is off before validation, as the API server does: ``DRAPartitionableDevices`` the slice's
  ``sharedCounters`` and the devices' ``consumesCounters``, ``DRADeviceTaints`` the devices' ``taints``
  (otherwise each taint is stamped with ``timeAdded``), ``DRAConsumableCapacity`` (``consumable_capacity``)
  the devices' ``allowMultipleAllocations`` and their capacities' ``requestPolicy``. ``pool_problems()``
  is the scheduler's view of the stored pools (incomplete, a counter set not found...).

Every request is recorded (method, path, query, content type) so tests can assert what the client sent.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.k8s import validation

SLICES = "/apis/resource.k8s.io/v1/resourceslices"
PATCH_TYPES = ("application/merge-patch+json", "application/strategic-merge-patch+json")


class ApiServer:
    def __init__(self, node: str, version: str = "1.37", git_version: str | None = None) -> None:
        assert version in validation.RELEASES, version
        self.release = version
        self.git_version = git_version or f"v{version}.0"
        defaults = validation.GATE_DEFAULTS[version]
        self.gates = dict(zip(validation.GATES, defaults, strict=True))
        self.refused: list[tuple[str, str, str]] = []  # (method, slice name, the Status message) of each 422
        self.schema_check = True  # the release's strict schema too (benchmarks/dra turns it off: its cost is ours)
        self.node: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": node, "labels": {"kubernetes.io/hostname": node}, "annotations": {}},
        }
        self.version = 1
        self.requests: list[tuple[str, str, dict[str, list[str]], str]] = []
        self.changed = threading.Condition()
        self.label_history: list[dict[str, str]] = []
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}  # (namespace, name) -> ResourceClaim
        self.slices: dict[str, dict[str, Any]] = {}  # name -> ResourceSlice (resourceVersion set)
        self.events: list[dict[str, Any]] = []  # core/v1 Events created (POST /api/v1/namespaces/NS/events)
        self.closing = False
        handler = type("Handler", (_Handler,), {"api": self})
        self.http = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.http.daemon_threads = True
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    @property
    def partitionable(self) -> bool:
        return self.gates["DRAPartitionableDevices"]

    @partitionable.setter
    def partitionable(self, on: bool) -> None:
        self.gates["DRAPartitionableDevices"] = on

    @property
    def consumable_capacity(self) -> bool:
        return self.gates["DRAConsumableCapacity"]

    @consumable_capacity.setter
    def consumable_capacity(self, on: bool) -> None:
        self.gates["DRAConsumableCapacity"] = on

    @property
    def device_taints(self) -> bool:
        return self.gates["DRADeviceTaints"]

    @device_taints.setter
    def device_taints(self, on: bool) -> None:
        self.gates["DRADeviceTaints"] = on

    def pool_problems(self) -> list[str]:
        """What the scheduler would find wrong with the stored pools (empty: every pool is usable)."""
        with self.changed:
            return validation.pool_problems(list(self.slices.values()), self.release)

    def version_doc(self) -> dict[str, Any]:
        major, minor = self.release.split(".")
        provider = not self.git_version.endswith(".0") and "-" in self.git_version
        return {
            "major": major,
            "minor": minor + ("+" if provider else ""),
            "gitVersion": self.git_version,
            "gitCommit": "0" * 40,
            "gitTreeState": "clean",
            "buildDate": "2026-11-01T00:00:00Z",
            "goVersion": "go1.25.3",
            "compiler": "gc",
            "platform": "linux/amd64",
        }

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http.server_address[1]}"

    def kubeconfig(self, path: Path) -> Path:
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "stub", "cluster": {"server": self.url}}],
            "users": [{"name": "agent", "user": {"token": "stub-token"}}],
            "contexts": [{"name": "stub", "context": {"cluster": "stub", "user": "agent"}}],
            "current-context": "stub",
        }
        path.write_text(json.dumps(doc))
        return path

    def labels(self) -> dict[str, str]:
        with self.changed:
            return dict(self.node["metadata"]["labels"])

    def set_labels(self, changes: dict[str, str | None]) -> None:
        """As ``kubectl label node NAME key=value`` (None removes): a MODIFIED event for watchers."""
        self.patch({"metadata": {"labels": changes}})

    def patch(self, body: dict[str, Any]) -> None:
        with self.changed:
            meta = self.node["metadata"]
            for field in ("labels", "annotations"):
                for k, v in (body.get("metadata", {}).get(field) or {}).items():
                    if v is None:
                        meta[field].pop(k, None)
                    else:
                        meta[field][k] = v
            self.version += 1
            meta["resourceVersion"] = str(self.version)
            self.label_history.append(dict(meta["labels"]))
            self.changed.notify_all()

    def wait(self, predicate: Any, timeout: float = 10.0) -> bool:
        with self.changed:
            return self.changed.wait_for(predicate, timeout=timeout)

    def close(self) -> None:
        with self.changed:
            self.closing = True
            self.changed.notify_all()
        self.http.shutdown()
        self.http.server_close()


class _Handler(BaseHTTPRequestHandler):
    api: ApiServer
    protocol_version = "HTTP/1.1"  # a watch is a chunked body, one event per chunk, as the API server sends it

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _record(self) -> tuple[str, dict[str, list[str]]]:
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        with self.api.changed:
            self.api.requests.append((self.command, url.path, query, self.headers.get("Content-Type", "")))
            self.api.changed.notify_all()
        return url.path, query

    def _send(self, code: int, doc: dict[str, Any]) -> None:
        data = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _node(self) -> dict[str, Any]:
        with self.api.changed:
            meta = self.api.node["metadata"]
            meta["resourceVersion"] = str(self.api.version)
            return json.loads(json.dumps(self.api.node))

    def _not_found(self) -> None:
        self._send(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404})

    def do_GET(self) -> None:
        path, query = self._record()
        name = self.api.node["metadata"]["name"]
        if path == f"/api/v1/nodes/{name}":
            self._send(200, self._node())
        elif path == "/api/v1/nodes" and query.get("watch") in (["true"], ["True"]):
            if query.get("fieldSelector") != [f"metadata.name={name}"]:
                self._send(403, {"kind": "Status", "status": "Failure", "reason": "Forbidden", "code": 403})
                return
            self._watch(float(query.get("timeoutSeconds", ["30"])[0]))
        elif path.startswith("/apis/resource.k8s.io/v1/namespaces/") and "/resourceclaims/" in path:
            ns, _, claim = path.removeprefix("/apis/resource.k8s.io/v1/namespaces/").partition("/resourceclaims/")
            doc = self.api.claims.get((ns, claim))
            if doc is None:
                self._not_found()
            else:
                self._send(200, doc)
        elif path.startswith(SLICES):
            self._slices_get(path, query)
        elif path.rstrip("/") in ("/version", "/apis", "/apis/resource.k8s.io", "/apis/resource.k8s.io/v1"):
            self._send(200, self._discovery(path.rstrip("/")))
        elif path == "/api/v1/nodes":
            self._send(200, {"kind": "NodeList", "apiVersion": "v1", "metadata": {}, "items": [self._node()]})
        else:
            self._not_found()

    def _discovery(self, path: str) -> dict[str, Any]:
        """``/version`` and discovery as the release serves them: ``resource.k8s.io`` at ``v1`` only (its beta
        and alpha versions are off unless enabled with ``--runtime-config``, in 1.34 to 1.37 alike)."""
        if path == "/version":
            return self.api.version_doc()
        v1 = {"groupVersion": "resource.k8s.io/v1", "version": "v1"}
        group = {"name": "resource.k8s.io", "versions": [v1], "preferredVersion": v1}
        if path == "/apis":
            apps = {"groupVersion": "apps/v1", "version": "v1"}
            return {
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [{"name": "apps", "versions": [apps], "preferredVersion": apps}, group],
            }
        if path == "/apis/resource.k8s.io":
            return {"kind": "APIGroup", "apiVersion": "v1", **group}
        verbs = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
        kinds = [
            ("deviceclasses", "DeviceClass", False),
            ("resourceclaims", "ResourceClaim", True),
            ("resourceclaimtemplates", "ResourceClaimTemplate", True),
            ("resourceslices", "ResourceSlice", False),
        ]
        resources = [{"name": n, "singularName": "", "namespaced": ns, "kind": k, "verbs": verbs} for n, k, ns in kinds]
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": "resource.k8s.io/v1",
            "resources": resources,
        }

    def _watch(self, timeout: float) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        end = time.monotonic() + timeout
        kind, seen = "ADDED", [-1]
        try:
            while time.monotonic() < end and not self.api.closing:
                with self.api.changed:
                    self.api.changed.wait_for(lambda: self.api.version != seen[0] or self.api.closing, timeout=0.2)
                    if self.api.version == seen[0]:
                        continue
                    seen[0] = self.api.version
                line = json.dumps({"type": kind, "object": self._node()}).encode() + b"\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
                kind = "MODIFIED"
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass  # the client closed the watch

    def do_PATCH(self) -> None:
        path, _ = self._record()
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        if path != f"/api/v1/nodes/{self.api.node['metadata']['name']}":
            self._not_found()
            return
        if self.headers.get("Content-Type") not in PATCH_TYPES:
            self._send(415, {"kind": "Status", "status": "Failure", "reason": "UnsupportedMediaType", "code": 415})
            return
        self.api.patch(body)
        self._send(200, self._node())

    def _status(self, code: int, reason: str) -> None:
        self._send(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "code": code})

    def _slices_get(self, path: str, query: dict[str, list[str]]) -> None:
        with self.api.changed:
            if path == SLICES:
                want = dict(kv.split("=", 1) for s in query.get("fieldSelector", []) for kv in s.split(","))
                items = [
                    doc
                    for doc in self.api.slices.values()
                    if all(
                        {"spec.nodeName": doc["spec"].get("nodeName"), "spec.driver": doc["spec"].get("driver")}[k] == v
                        for k, v in want.items()
                    )
                ]
                self._send(200, {"kind": "ResourceSliceList", "apiVersion": "resource.k8s.io/v1", "items": items})
                return
            doc = self.api.slices.get(path.removeprefix(SLICES + "/"))
        self._send(200, doc) if doc is not None else self._not_found()

    def _body(self) -> dict[str, Any]:
        body: dict[str, Any] = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        spec = body.get("spec")
        if not self.api.partitionable and isinstance(spec, dict):  # the gate off: its fields are dropped
            spec.pop("sharedCounters", None)
            for dev in spec.get("devices") or []:
                dev.pop("consumesCounters", None)
        if not self.api.consumable_capacity and isinstance(spec, dict):
            for dev in spec.get("devices") or []:
                dev.pop("allowMultipleAllocations", None)
                for cap in (dev.get("capacity") or {}).values():
                    cap.pop("requestPolicy", None)
        if not self.api.device_taints and isinstance(spec, dict):
            for dev in spec.get("devices") or []:
                dev.pop("taints", None)
        elif isinstance(spec, dict):  # the API server stamps when a taint was added
            for dev in spec.get("devices") or []:
                for t in dev.get("taints") or []:
                    t.setdefault("timeAdded", "2026-11-27T00:00:00Z")
        return body

    def _invalid(self, body: dict[str, Any], old: dict[str, Any] | None = None) -> bool:
        """Refused (422) as the release's API server does: its reasons in the Status message, kept in ``refused``."""
        errs = validation.spec_errors(body, self.api.release, self.api.schema_check)
        if old is not None:
            errs += validation.update_errors(body, old)
        if not errs:
            return False
        name = str((body.get("metadata") or {}).get("name", ""))
        message = f'ResourceSlice.resource.k8s.io "{name}" is invalid: ' + "; ".join(errs)
        with self.api.changed:
            self.api.refused.append((self.command, name, message))
        self._send(422, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Invalid",
                         "message": message[:4000], "code": 422})  # fmt: skip
        return True

    def do_POST(self) -> None:
        path, query = self._record()
        body = self._body()
        parts = path.strip("/").split("/")
        if parts[:3] == ["api", "v1", "namespaces"] and len(parts) == 5 and parts[4] == "events":
            with self.api.changed:
                body.setdefault("metadata", {})["namespace"] = parts[3]
                self.api.events.append(body)
                self.api.changed.notify_all()
            self._send(201, body)
            return
        if path != SLICES:
            self._not_found()
            return
        meta = body.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + f"{len(self.api.requests):05x}"
        if self._invalid(body):
            return
        with self.api.changed:
            name = meta["name"]
            if name in self.api.slices:
                self._status(409, "AlreadyExists")
                return
            if query.get("dryRun") == ["All"]:  # validated, gates applied, nothing stored
                self._send(201, body)
                return
            self.api.version += 1
            body["metadata"]["resourceVersion"] = str(self.api.version)
            self.api.slices[name] = body
            self.api.changed.notify_all()
        self._send(201, body)

    def do_PUT(self) -> None:
        path, _ = self._record()
        body = self._body()
        name = path.removeprefix(SLICES + "/")
        with self.api.changed:
            old = self.api.slices.get(name)
        if not path.startswith(SLICES + "/") or old is None:
            self._not_found()
            return
        if self._invalid(body, old):
            return
        with self.api.changed:
            old = self.api.slices.get(name)
            if old is None:
                self._not_found()
                return
            if body["metadata"].get("resourceVersion") != old["metadata"]["resourceVersion"]:
                self._status(409, "Conflict")
                return
            self.api.version += 1
            body["metadata"]["resourceVersion"] = str(self.api.version)
            self.api.slices[name] = body
            self.api.changed.notify_all()
        self._send(200, body)

    def do_DELETE(self) -> None:
        path, _ = self._record()
        with self.api.changed:
            doc = self.api.slices.pop(path.removeprefix(SLICES + "/"), None)
            self.api.changed.notify_all()
        self._send(200, doc) if doc is not None else self._not_found()
