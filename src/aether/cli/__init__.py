"""The `aether` command."""

from aether.cli.main import main

__all__ = ["main"]
