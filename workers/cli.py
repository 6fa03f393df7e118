"""The ``stream-winnow`` command: one entry point, subcommands grouped by what they serve.

- learning in process (``cli_learning``): ``dataset``, ``evaluate``
- the service (``cli_service``): ``worker``
- on one machine (``cli_local``): ``up``, ``produce``, ``tail``, ``demo``
- models in Redis (``cli_model``): ``train``, ``export``, ``import``, ``explain``, ``categories``, ``status``, ``compact``
"""

from __future__ import annotations

import sys

import click

from stream_winnow.errors import ConfigError, StreamWinnowError


class _Group(click.Group):
    """Turns the library's errors into one clear line and an exit code (2: bad settings, 1: anything else)."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except ConfigError as error:
            raise click.UsageError(str(error), ctx) from None
        except StreamWinnowError as error:
            click.echo(f"error: {error}", err=True)
            ctx.exit(1)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(package_name="stream-winnow")
def main() -> None:
    """Streaming, mistake-driven text classification: Winnow, Perceptron and Naive Bayes, on Kafka and Redis."""


def _register() -> None:
    from workers import cli_learning, cli_local, cli_model, cli_service

    for command in [*cli_learning.COMMANDS, *cli_service.COMMANDS, *cli_model.COMMANDS, *cli_local.COMMANDS]:
        main.add_command(command)


_register()

if __name__ == "__main__":
    sys.exit(main())
