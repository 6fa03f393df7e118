"""The ``stream-winnow`` command: one entry point, subcommands grouped by what they serve.

- learning in process (``cli_learning``): ``dataset``, ``evaluate``
- domain models (``cli_domain``): ``domain fit``, ``domain show``
- the service (``cli_service``): ``worker``
- on one machine (``cli_local``): ``up``, ``produce``, ``tail``, ``demo``
- models in Redis (``cli_model``): ``train``, ``export``, ``import``, ``explain``, ``categories``, ``status``, ``compact``
"""

from __future__ import annotations

import sys

import click

from stream_winnow.errors import ConfigError, StreamWinnowError
from workers import local_state
from workers.interrupts import Terminated, exit_code, raise_on_sigterm


class _Group(click.Group):
    """Turns what a user can cause into one clear line and an exit code: 2 bad settings, 1 a failure
    (a bad file line, a service down, a file that cannot be written), 130 Ctrl-C, 143 SIGTERM."""

    def invoke(self, ctx: click.Context) -> object:
        raise_on_sigterm()
        try:
            return super().invoke(ctx)
        except ConfigError as error:
            click.echo(f"error: {error}", err=True)
            ctx.exit(2)
        except StreamWinnowError as error:
            click.echo(f"error: {error}", err=True)
            ctx.exit(1)
        except OSError as error:
            where = f": {error.filename}" if error.filename else ""
            click.echo(f"error: {error.strerror or error}{where}", err=True)
            ctx.exit(1)
        except KeyboardInterrupt as interrupt:
            click.echo("stopped" + (" (SIGTERM)" if isinstance(interrupt, Terminated) else ""), err=True)
            ctx.exit(exit_code(interrupt))


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(package_name="stream-winnow")
@click.pass_context
def main(ctx: click.Context) -> None:
    """Streaming, mistake-driven text classification: Winnow, Perceptron and Naive Bayes, on Kafka and Redis.

    While `stream-winnow up` runs, every command uses its broker and Redis unless told otherwise.
    """
    services = local_state.running()
    if services is not None:
        found = {"bootstrap_servers": services.bootstrap_servers, "redis_url": services.redis_url}
        ctx.default_map = {
            name: {sub: found for sub in command.commands} if isinstance(command, click.Group) else found
            for name, command in main.commands.items()
        }


def _register() -> None:
    from workers import cli_domain, cli_learning, cli_local, cli_model, cli_service

    commands = [*cli_learning.COMMANDS, *cli_domain.COMMANDS, *cli_service.COMMANDS, *cli_model.COMMANDS,
                *cli_local.COMMANDS]  # fmt: skip
    for command in commands:
        main.add_command(command)


_register()

if __name__ == "__main__":
    sys.exit(main())
