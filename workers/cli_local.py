"""Subcommands for running the service on one machine: ``up``, ``produce``, ``tail`` and ``demo``.

A session by hand, in three terminals::

    stream-winnow up                      # prints the export lines; paste them into the other terminals
    stream-winnow worker --http-port 0
    stream-winnow produce --input docs.jsonl --labels-delay 50
    stream-winnow tail decisions --from-beginning --timeout-s 10

Connection flags read the same ``STREAM_WINNOW_*`` variables as ``worker``.
"""

from __future__ import annotations

import base64
import json
import os
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from stream_winnow.datasets.labelled_jsonl import FileDocument, read_jsonl_documents
from stream_winnow.documents import LabelledDocument
from stream_winnow.errors import CodecError, ConfigError, DataFormatError, TransportError
from stream_winnow.wire.codec import (
    DocumentMessage,
    LabelledEvent,
    dead_letter_fields,
    decode_dead_letter,
    decode_decision,
    encode_document,
    encode_labelled_event,
)
from workers import local_state
from workers.cli_service import env, option
from workers.config import Topics
from workers.demo import (
    DEFAULT_BROKER_PORT,
    DEFAULT_REDIS_PORT,
    DemoConfig,
    dead_letter_reason,
    exports,
    local_services,
    now_ms,
    preferred_port,
    run_demo,
)
from workers.interrupts import exit_code
from workers.transport import KafkaSettings, Producer, make_producer

_TOPIC_DEFAULTS = Topics()


def kafka_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Where the broker is and how to authenticate: the same flags and variables as ``worker``."""
    for decorator in reversed([
        option("--bootstrap-servers", default="127.0.0.1:9092", show_default=True, help="Kafka host:port[,...]."),
        option("--security-protocol", type=click.Choice(["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]),
               default="PLAINTEXT", show_default=True),
        option("--sasl-mechanism", type=click.Choice(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]), default=None),
        option("--sasl-username", default=None),
        option("--sasl-password", default=None, help="Prefer the environment variable; never logged."),
        option("--ssl-cafile", default=None, type=click.Path(dir_okay=False)),
    ]):  # fmt: skip
        command = decorator(command)
    return command


def _kafka_settings(flags: dict[str, Any], client_id: str) -> KafkaSettings:
    return KafkaSettings(
        bootstrap_servers=flags.pop("bootstrap_servers"),
        security_protocol=flags.pop("security_protocol"),
        sasl_mechanism=flags.pop("sasl_mechanism"),
        sasl_username=flags.pop("sasl_username"),
        sasl_password=flags.pop("sasl_password"),
        ssl_cafile=flags.pop("ssl_cafile"),
        client_id=client_id,
    )


def _json_line(obj: dict[str, Any]) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


# ---------------------------------------------------------------------------------------------------
# up


@click.command("up")
@click.option("--broker-port", type=click.IntRange(0, 65535), default=None,
              help=f"Kafka port (0: any free one) [default: {DEFAULT_BROKER_PORT} if free, else any].")
@click.option("--redis-port", type=click.IntRange(0, 65535), default=None,
              help=f"Redis port (0: any free one) [default: {DEFAULT_REDIS_PORT} if free, else any].")
@click.option("--partitions", type=click.IntRange(1, 1024), default=4, show_default=True,
              help="Partitions of documents, labels and decisions (dead-letters has 1).")
def up(broker_port: int | None, redis_port: int | None, partitions: int) -> None:
    """Start a Kafka-protocol broker (Tansu, in memory) and Redis on loopback, without Docker, until Ctrl-C.

    Creates the topics and prints `export` lines for the other commands. Everything
    is lost when it stops.
    """
    with local_services(
        partitions,
        preferred_port(broker_port, DEFAULT_BROKER_PORT, "--broker-port"),
        preferred_port(redis_port, DEFAULT_REDIS_PORT, "--redis-port"),
    ) as (broker, redis_server):
        local_state.record(local_state.LocalServices(os.getpid(), broker.bootstrap_servers, redis_server.url))
        click.echo(exports(broker.bootstrap_servers, redis_server.url), nl=False)
        sys.stdout.flush()
        click.echo(
            f"# broker (Tansu, memory storage) on {broker.bootstrap_servers}, Redis on {redis_server.url}; topics "
            f"documents, labels, decisions ({partitions} partitions), dead-letters (1). Other stream-winnow "
            "commands on this machine use them by default. Ctrl-C stops both.",
            err=True,
        )
        try:
            while True:
                time.sleep(1.0)
        except KeyboardInterrupt as interrupt:
            click.echo("# stopping the broker and Redis", err=True)
            code = exit_code(interrupt)
        finally:
            local_state.forget()
    sys.exit(code)


# ---------------------------------------------------------------------------------------------------
# produce


@click.command("produce")
@click.option("--input", "input_path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="JSON Lines: id, tokens or text, and labels when known (see the README's input format).")
@click.option("--synthetic", type=click.IntRange(min=1), default=None,
              help="Instead of --input: this many documents of the built-in synthetic news stream.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of --synthetic.")
@click.option("--labels-delay", "labels_delay_docs", type=click.IntRange(min=0), default=0, show_default=True,
              help="Send each label this many documents after its document (0: right after it).")
@click.option("--with-labels", is_flag=True, help="Send each labelled line as one labelled document instead.")
@click.option("--labels-only", is_flag=True,
              help="Send only the labels, for documents sent earlier (lines need id and labels; tokens are "
                   "taken from the workers' document cache).")
@click.option("--rate", "rate_docs_per_s", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Documents per second at most [default: as fast as possible].")
@click.option("--documents-topic", "--topic", "documents_topic", envvar=env("--documents-topic"), show_envvar=True,
              default=_TOPIC_DEFAULTS.documents, show_default=True)
@option("--labels-topic", default=_TOPIC_DEFAULTS.labels, show_default=True)
@click.option("--wait-s", type=click.FloatRange(min=0), default=0, show_default=True,
              help="Then wait up to this long for the documents' decisions, and count them and the dead "
                   "letters by reason (0: do not wait).")
@option("--decisions-topic", default=_TOPIC_DEFAULTS.decisions, show_default=True)
@option("--dead-letters-topic", default=_TOPIC_DEFAULTS.dead_letters, show_default=True)
@kafka_options
@option("--kafka-client", type=click.Choice(["kafka-python", "confluent"]), default="kafka-python",
        show_default=True)
@click.option("--quiet", is_flag=True, help="No progress bar.")
def produce(
    input_path: Path | None,
    synthetic: int | None,
    seed: int,
    labels_delay_docs: int,
    with_labels: bool,
    labels_only: bool,
    rate_docs_per_s: float | None,
    documents_topic: str,
    labels_topic: str,
    wait_s: float,
    decisions_topic: str,
    dead_letters_topic: str,
    kafka_client: str,
    quiet: bool,
    **flags: Any,
) -> None:
    """Send documents to be scored and, for the lines with labels, their labelled events.

    A line with ``labels`` goes to the documents topic without them and, ``--labels-delay``
    documents later, to the labels topic as event ``label:<id>`` with its tokens, so learning
    never waits for the workers' document cache. A line without ``labels`` is only scored;
    ``"labels": []`` says it belongs to no category. Messages are keyed by document id and
    carry ``ts`` (epoch ms). The whole file is checked before the first message is sent.
    """
    if (input_path is None) == (synthetic is None):
        raise click.UsageError("give --input FILE or --synthetic N")
    if labels_only and with_labels:
        raise click.UsageError("--labels-only and --with-labels exclude each other")
    counted = _checked(input_path, synthetic, labels_only)
    settings = _kafka_settings(flags, "stream-winnow-produce")
    follow = _Outcomes(settings, decisions_topic, dead_letters_topic) if wait_s else None
    producer = make_producer(settings, kafka_client)  # type: ignore[arg-type]
    sent_docs = sent_labels = 0
    started = time.monotonic()
    try:
        with _progress_bar(counted.lines, quiet) as bar:
            delayed: deque[LabelledDocument] = deque()
            for line in _lines(input_path, synthetic, seed, labels_only):
                doc = line.doc
                if labels_only:
                    _send_label(producer, labels_topic, doc, with_tokens=False)
                    sent_labels += 1
                    bar.update(1)
                    continue
                if rate_docs_per_s is not None:
                    ahead_s = started + sent_docs / rate_docs_per_s - time.monotonic()
                    if ahead_s > 0:
                        time.sleep(ahead_s)
                labels = doc.labels if with_labels and line.labelled else None
                message = DocumentMessage(doc.id, doc.tokens, labels, now_ms())
                producer.send(documents_topic, encode_document(message), key=doc.id.encode())
                sent_docs += 1
                bar.update(1)
                if with_labels or not line.labelled:
                    continue
                delayed.append(doc)
                if len(delayed) > labels_delay_docs:
                    _send_label(producer, labels_topic, delayed.popleft(), with_tokens=True)
                    sent_labels += 1
            while delayed:
                _send_label(producer, labels_topic, delayed.popleft(), with_tokens=True)
                sent_labels += 1
            producer.flush()
    finally:
        producer.close()
    seconds = time.monotonic() - started
    scored_only = "" if labels_only else f" ({counted.lines - counted.labelled:,} to be scored only)"
    labelled_docs = f", {counted.labelled:,} of them labelled" if with_labels else ""
    click.echo(f"{sent_docs:,} documents to {documents_topic}{scored_only}{labelled_docs}, {sent_labels:,} "
               f"labelled events to {labels_topic} in {seconds:.1f} s")  # fmt: skip
    if follow is not None:
        click.echo(follow.wait(sent_docs if not labels_only else 0, wait_s))


class _Outcomes:
    """What the workers made of what ``produce`` sent: decisions and dead letters from now on, read
    without a consumer group (every partition, nothing committed)."""

    def __init__(self, settings: KafkaSettings, decisions_topic: str, dead_letters_topic: str) -> None:
        self.decisions_topic, self.started_ms = decisions_topic, now_ms()
        self.consumer = _reader(settings, [decisions_topic, dead_letters_topic], from_beginning=False)
        self.decided: set[str] = set()
        self.dead: dict[str, int] = {}

    def wait(self, documents: int, wait_s: float) -> str:
        """Read until ``documents`` decisions came or ``wait_s`` passed; the summary line."""
        deadline = time.monotonic() + wait_s
        try:
            while time.monotonic() < deadline and (len(self.decided) < documents or not documents):
                for records in self.consumer.poll(timeout_ms=200).values():
                    for record in records:
                        if 0 <= record.timestamp < self.started_ms:  # Tansu's "latest" starts at the last batch
                            continue
                        self._count(record.topic, record.value)
        finally:
            self.consumer.close()
        reasons = ", ".join(f"{n:,} {reason}" for reason, n in sorted(self.dead.items()))
        total = sum(self.dead.values())
        dead = f"{total:,} dead letter{'' if total == 1 else 's'}" + (f" ({reasons}; `tail dead-letters` shows them)"
                                                             if reasons else "")  # fmt: skip
        return f"{len(self.decided):,} of {documents:,} documents decided within {wait_s:g} s; {dead}"

    def _count(self, topic: str, value: bytes) -> None:
        if topic != self.decisions_topic:
            reason = dead_letter_reason(value)
            self.dead[reason] = self.dead.get(reason, 0) + 1
            return
        try:
            self.decided.add(decode_decision(value).id)
        except CodecError:
            pass  # not a decision: nothing to count


def _reader(settings: KafkaSettings, topics: list[str], from_beginning: bool) -> Any:
    """A kafka-python consumer on every partition of ``topics``, at their start or end, without a group
    (it joins nothing and commits nothing). A topic that does not exist is a ``ConfigError``."""
    import kafka
    from kafka.errors import KafkaError

    from workers.transport.kafka_python import client_configs

    try:
        consumer = kafka.KafkaConsumer(**client_configs(settings), group_id=None, enable_auto_commit=False)
        assigned = []
        for topic in topics:
            partitions = consumer.partitions_for_topic(topic)
            if not partitions:
                consumer.close()
                raise ConfigError(f"no topic {topic!r} on {settings.bootstrap_servers}")
            assigned += [kafka.TopicPartition(topic, p) for p in sorted(partitions)]
    except KafkaError as error:
        raise TransportError(f"cannot reach {settings.bootstrap_servers}: {error!r}") from error
    consumer.assign(assigned)
    if from_beginning:
        consumer.seek_to_beginning(*assigned)
    else:
        consumer.seek_to_end(*assigned)
    return consumer


@dataclass(frozen=True)
class _Counted:
    """What a checked input holds: its lines, and how many of them carry labels."""

    lines: int
    labelled: int


def _lines(input_path: Path | None, synthetic: int | None, seed: int, labels_only: bool) -> Iterator[FileDocument]:
    if synthetic is not None:
        from stream_winnow.datasets.synthetic import iter_synthetic

        for number, doc in enumerate(iter_synthetic(synthetic, seed), start=1):
            yield FileDocument(doc, True, number)
        return
    assert input_path is not None
    yield from read_jsonl_documents(input_path, tokens_required=not labels_only)


def _checked(input_path: Path | None, synthetic: int | None, labels_only: bool) -> _Counted:
    """Read the whole input once, so a bad line stops ``produce`` before anything is sent."""
    if synthetic is not None:
        return _Counted(synthetic, synthetic)
    lines = labelled = 0
    for line in _lines(input_path, None, 0, labels_only):
        lines += 1
        labelled += line.labelled
        if labels_only and not line.labelled:
            raise DataFormatError(str(input_path), line.line_number, "missing 'labels': --labels-only sends labels")
        try:  # the messages it will send, so a line the workers would dead-letter stops it here
            if not labels_only:
                encode_document(DocumentMessage(line.doc.id, line.doc.tokens, None, 0))
            if line.labelled:
                encode_labelled_event(LabelledEvent(f"label:{line.doc.id}", line.doc.id, line.doc.labels, None, 0))
        except CodecError as error:
            raise DataFormatError(str(input_path), line.line_number, str(error)) from None
    if not lines:
        raise DataFormatError(str(input_path), 1, "no documents: the file is empty")
    return _Counted(lines, labelled)


def _send_label(producer: Producer, topic: str, doc: LabelledDocument, *, with_tokens: bool) -> None:
    event = LabelledEvent(f"label:{doc.id}", doc.id, doc.labels, doc.tokens if with_tokens else None, now_ms())
    producer.send(topic, encode_labelled_event(event), key=doc.id.encode())


def _progress_bar(total: int, quiet: bool) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, unit="doc", disable=quiet or not sys.stderr.isatty(), file=sys.stderr)


# ---------------------------------------------------------------------------------------------------
# tail


@click.command("tail")
@click.argument("kind", type=click.Choice(["decisions", "dead-letters"]))
@click.option("--from-beginning", is_flag=True, help="Start at the oldest message [default: only new ones].")
@click.option("--max", "max_messages", type=click.IntRange(min=1), default=None, help="Stop after N messages.")
@click.option("--timeout-s", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Stop after this many seconds without a message [default: never].")
@option("--decisions-topic", default=_TOPIC_DEFAULTS.decisions, show_default=True)
@option("--dead-letters-topic", default=_TOPIC_DEFAULTS.dead_letters, show_default=True)
@kafka_options
def tail(
    kind: str,
    from_beginning: bool,
    max_messages: int | None,
    timeout_s: float | None,
    decisions_topic: str,
    dead_letters_topic: str,
    **flags: Any,
) -> None:
    """Print each message of the decisions or dead-letters topic as one JSON line.

    Reads every partition without joining a consumer group and commits nothing.
    Dead letters show the original message as base64.
    """
    from kafka.errors import KafkaError

    topic = decisions_topic if kind == "decisions" else dead_letters_topic
    settings = _kafka_settings(flags, "stream-winnow-tail")
    to_json = _decision_json if kind == "decisions" else _dead_letter_json
    started_ms = now_ms()
    consumer = _reader(settings, [topic], from_beginning)
    printed = 0
    try:
        last_message = time.monotonic()
        while max_messages is None or printed < max_messages:
            wait_ms = 500
            if timeout_s is not None:
                left_s = timeout_s - (time.monotonic() - last_message)
                if left_s <= 0:
                    break
                wait_ms = max(1, min(wait_ms, int(left_s * 1000)))
            for records in consumer.poll(timeout_ms=wait_ms).values():
                for record in records:
                    # Tansu 0.6 puts "latest" at the start of the last batch, not its end: skip what came before.
                    if not from_beginning and 0 <= record.timestamp < started_ms:
                        continue
                    last_message = time.monotonic()
                    click.echo(_json_line(to_json(record.value)))
                    printed += 1
                    if max_messages is not None and printed >= max_messages:
                        break
                if max_messages is not None and printed >= max_messages:
                    break
            sys.stdout.flush()
    except KafkaError as error:
        raise TransportError(f"reading {topic!r} failed: {error!r}") from error
    except BrokenPipeError:  # `tail ... | head`: the reader is gone; don't fail again flushing at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    finally:
        consumer.close()


def _decision_json(raw: bytes) -> dict[str, Any]:
    try:
        d = decode_decision(raw)
    except CodecError as error:
        return {"error": str(error), "value": base64.b64encode(raw).decode("ascii")}
    obj: dict[str, Any] = {"id": d.id, "categories": list(d.categories), "scores": d.scores,
                           "model_version": d.model_version}  # fmt: skip
    for key, value in (("model", d.model), ("worker", d.worker), ("ts", d.ts_ms), ("decided_ts", d.decided_ts_ms)):
        if value is not None:
            obj[key] = value
    return obj


def _dead_letter_json(raw: bytes) -> dict[str, Any]:
    try:
        d = decode_dead_letter(raw)
    except CodecError as error:
        return {"error": str(error), "value": base64.b64encode(raw).decode("ascii")}
    return {**dead_letter_fields(d), "original": base64.b64encode(d.original).decode("ascii")}


# ---------------------------------------------------------------------------------------------------
# demo


@click.command("demo")
@click.option("--data", type=click.Path(exists=True, path_type=Path), default=None,
              help="Reuters-21578 (.tar.gz or folder): stream its ModApte documents [default: the synthetic stream].")
@click.option("--workers", type=click.IntRange(1, 64), default=2, show_default=True, help="Worker processes.")
@click.option("--documents", type=click.IntRange(min=1), default=None,
              help="Documents to stream [default: all of --data, else 2,000 synthetic].")
@click.option("--labels-delay", "labels_delay_docs", type=click.IntRange(min=0), default=50, show_default=True,
              help="Send each label this many documents after its document.")
@click.option("--kafka-client", type=click.Choice(["kafka-python", "confluent"]), default="kafka-python",
              show_default=True)
@click.option("--timeout-s", type=click.FloatRange(min=0, min_open=True), default=300.0, show_default=True,
              help="Give up waiting for decisions after this long.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the synthetic stream.")
@click.pass_context
def demo(ctx: click.Context, data: Path | None, workers: int, documents: int | None, labels_delay_docs: int,
         kafka_client: str, timeout_s: float, seed: int) -> None:  # fmt: skip
    """Run it all on this machine: broker, Redis, workers; stream a corpus through and score the decisions.

    Documents go out without labels; each label follows later, so every decision is made
    before the model learned its document, and the running micro-F1 rises as it learns.
    Exits 1 if some documents got no decision.
    """

    config = DemoConfig(data=data, workers=workers, documents=documents, labels_delay_docs=labels_delay_docs,
                        kafka_client=kafka_client, timeout_s=timeout_s, seed=seed)  # type: ignore[arg-type]  # fmt: skip
    try:
        result = run_demo(config)
    except KeyboardInterrupt as interrupt:
        click.echo("interrupted; workers and services stopped", err=True)
        ctx.exit(exit_code(interrupt))
    if result.missing:
        ctx.exit(1)


COMMANDS = [up, produce, tail, demo]
