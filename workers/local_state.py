"""Where ``stream-winnow up`` says its broker and Redis are, so the other commands find them without flags.

``up`` writes ``stream-winnow-up-<uid>.json`` (in ``$XDG_RUNTIME_DIR``, else the temporary directory)
with its pid, bootstrap servers and Redis URL, and removes it when it stops. While that pid lives,
every command takes those two as its defaults; a flag or a ``STREAM_WINNOW_*`` variable still wins.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class LocalServices:
    pid: int
    bootstrap_servers: str
    redis_url: str


def state_file() -> Path:
    folder = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    return Path(folder) / f"stream-winnow-up-{os.getuid()}.json"


def record(services: LocalServices) -> None:
    path = state_file()
    path.write_text(json.dumps(services.__dict__), encoding="utf-8")
    path.chmod(0o600)


def forget() -> None:
    state_file().unlink(missing_ok=True)


def running() -> LocalServices | None:
    """The services a live ``up`` recorded, or None (no file, a stale one, or one that cannot be read)."""
    try:
        services = LocalServices(**json.loads(state_file().read_text(encoding="utf-8")))
        os.kill(services.pid, 0)
    except (OSError, ValueError, TypeError):
        return None
    return services
