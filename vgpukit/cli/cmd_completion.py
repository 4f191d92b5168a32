"""``vgpukit completion SHELL``: click's completion script for bash, zsh or fish.

Install: ``vgpukit completion bash > /etc/bash_completion.d/vgpukit`` (zsh: a file named
``_vgpukit`` on ``$fpath``; fish: ``~/.config/fish/completions/vgpukit.fish``). Commands, options
and device names (gpuN/nicN/nvmeN and PCI addresses of the host, or of ``--sim DIR``/``VGPUKIT_SIM``)
complete.
"""

from __future__ import annotations

import click


@click.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the completion script for SHELL (bash, zsh, fish)."""
    from click.shell_completion import get_completion_class

    from .main import cli

    cls = get_completion_class(shell)
    if cls is None:  # pragma: no cover - click ships all three
        raise click.UsageError(f"no completion for {shell}")
    click.echo(cls(cli, {}, "vgpukit", "_VGPUKIT_COMPLETE").source())
