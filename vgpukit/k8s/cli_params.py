"""Parameter types of the ``vgpukit k8s`` commands."""

from __future__ import annotations

from typing import Any

import click


class ShareChoice(click.ParamType):  # type: ignore[type-arg]  # generic only in newer click
    """``--share-by-capacity``: ``off``, or ``gpu``, ``mig`` and DRA device names (:func:`.dra.capacity.choice`)."""

    name = "devices"

    def get_metavar(self, param: click.Parameter, ctx: click.Context) -> str:
        return "DEVICES"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from ..errors import InvalidInput
        from .dra.capacity import Choice, choice

        if isinstance(value, Choice):
            return value
        try:
            return choice(str(value))
        except InvalidInput as err:
            self.fail(err.message, param, ctx)


def kubernetes_release(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """A Kubernetes release (``1.35``, ``v1.35.2``) the DRA rules know, or a later one (the newest known's rules)."""
    if value is None:
        return None
    from ..errors import VgpukitError
    from .dra.cluster import release

    try:
        release(value)
    except VgpukitError as err:
        raise click.BadParameter(err.message) from None
    return value
