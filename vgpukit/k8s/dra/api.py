"""The DRA driver's Kubernetes API calls, through the official client (``resource.k8s.io/v1``)."""

from __future__ import annotations

import json
from typing import Any

from ...errors import NotFound, VgpukitError
from ..agent import api_error


class ClaimReader:
    """``(namespace, name, uid) -> ResourceClaim`` as the API server sends it (a dict, camelCase keys)."""

    def __init__(self, resource_api: Any) -> None:
        self.api = resource_api  # kubernetes.client.ResourceV1Api

    def __call__(self, namespace: str, name: str, uid: str) -> dict[str, Any]:
        try:
            raw = self.api.read_namespaced_resource_claim(name, namespace, _preload_content=False)
            doc = json.loads(raw.data)
        except VgpukitError:
            raise
        except Exception as err:  # ApiException, connection errors, a body that is not JSON
            if getattr(err, "status", None) == 404:
                raise NotFound(f"ResourceClaim {namespace}/{name} not found") from None
            raise api_error(err) from None
        if not isinstance(doc, dict) or (doc.get("metadata") or {}).get("uid") != uid:
            raise NotFound(f"ResourceClaim {namespace}/{name} is not the claim {uid} (deleted and made again?)")
        return doc


def resource_api(kubeconfig: str | None) -> Any:
    from kubernetes import client

    from ..agent import load_kube_config

    load_kube_config(kubeconfig)
    return client.ResourceV1Api()
