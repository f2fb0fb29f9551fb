"""transcript-sync's server side: the Transcript entity, the hub, the app, stores, CLI."""

from __future__ import annotations

from importlib import metadata


def package_version() -> str:
    """The installed distribution's version (``tsync --version``), or
    ``unknown`` when running from a source tree that was never installed."""
    try:
        return metadata.version("transcript-sync")
    except metadata.PackageNotFoundError:
        return "unknown"
