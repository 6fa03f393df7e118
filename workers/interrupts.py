"""How every command stops on Ctrl-C and SIGTERM: cleanly, with the shell's exit codes (130 and 143).

SIGTERM raises ``Terminated``, a ``KeyboardInterrupt``, so whatever a command does to stop on Ctrl-C
(stop its workers and services, flush its producer) it does on SIGTERM too. The worker installs its
own handlers: it finishes its batch, commits and exits 0 (``workers.worker.Worker.install_signal_handlers``).
"""

from __future__ import annotations

import signal
from types import FrameType

EXIT_INTERRUPTED = 128 + signal.SIGINT  # 130
EXIT_TERMINATED = 128 + signal.SIGTERM  # 143


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived."""


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise Terminated


def raise_on_sigterm() -> None:
    """Make SIGTERM raise ``Terminated`` in the main thread."""
    signal.signal(signal.SIGTERM, _on_sigterm)


def exit_code(interrupt: KeyboardInterrupt) -> int:
    return EXIT_TERMINATED if isinstance(interrupt, Terminated) else EXIT_INTERRUPTED
