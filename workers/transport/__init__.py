"""Kafka for the workers behind one small interface: ``make_consumer`` and ``make_producer``.

``client="kafka-python"`` (the default, pure Python) or ``client="confluent"``
(librdkafka, optional extra ``fast``; a ``ConfigError`` says so when it is missing).
"""

from __future__ import annotations

from typing import get_args

from stream_winnow.errors import ConfigError
from workers.transport.base import (
    COMPRESSIONS,
    Client,
    Compression,
    Consumer,
    Delivery,
    KafkaSettings,
    PartitionsCallback,
    Producer,
    Record,
    SecurityProtocol,
    TopicPartition,
    next_offsets,
)

__all__ = [
    "COMPRESSIONS",
    "Client",
    "Compression",
    "Consumer",
    "Delivery",
    "KafkaSettings",
    "PartitionsCallback",
    "Producer",
    "Record",
    "SecurityProtocol",
    "TopicPartition",
    "make_consumer",
    "make_producer",
    "next_offsets",
]


def _check_client(client: str) -> None:
    if client not in get_args(Client):
        raise ConfigError(f"unknown Kafka client {client!r}; choose one of {get_args(Client)}")


def make_consumer(settings: KafkaSettings, client: Client = "kafka-python") -> Consumer:
    """A consumer on the chosen client library; it joins a group on ``subscribe``."""
    _check_client(client)
    if client == "confluent":
        from workers.transport.confluent import ConfluentConsumer

        return ConfluentConsumer(settings)
    from workers.transport.kafka_python import KafkaPythonConsumer

    return KafkaPythonConsumer(settings)


def make_producer(settings: KafkaSettings, client: Client = "kafka-python") -> Producer:
    """A connected, idempotent producer on the chosen client library."""
    _check_client(client)
    if client == "confluent":
        from workers.transport.confluent import ConfluentProducer

        return ConfluentProducer(settings)
    from workers.transport.kafka_python import KafkaPythonProducer

    return KafkaPythonProducer(settings)
