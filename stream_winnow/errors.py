"""The exception tree of stream_winnow.

Every error the library raises on purpose derives from one root, so a caller can
catch ``StreamWinnowError`` and know it came from here::

    StreamWinnowError
    ├── ConfigError            a flag, setting or hyperparameter is not allowed
    ├── DataError              input that can never be processed (not retriable)
    │   ├── DataFormatError    a bad line in a file; names the file and line number
    │   └── CodecError         a bad message on a topic; carries a short reason code
    └── ServiceUnavailable     a dependency is down or timed out (retriable)
        ├── StoreError         the weight store (Redis) did not answer
        └── TransportError     the broker did not answer

Like kafka-python's ``RetriableError``, each class says whether retrying can
help (``retriable``), so a worker decides retry vs dead-letter from the
exception's class, never from its message.
"""

from __future__ import annotations


class StreamWinnowError(Exception):
    """Root of every error raised on purpose by stream_winnow."""

    retriable: bool = False


class ConfigError(StreamWinnowError, ValueError):
    """A flag, environment variable or hyperparameter has a value that is not allowed."""


class DataError(StreamWinnowError, ValueError):
    """Input that is wrong in itself; retrying it gives the same answer."""


class DataFormatError(DataError):
    """A line of an input file cannot be read.

    >>> str(DataFormatError("train.jsonl", 12, "'tokens' must be a list of strings"))
    "train.jsonl:12: 'tokens' must be a list of strings"
    """

    def __init__(self, path: str, line_number: int, reason: str) -> None:
        self.path = path
        self.line_number = line_number
        self.reason = reason
        super().__init__(f"{path}:{line_number}: {reason}")


class CodecError(DataError):
    """A message cannot be decoded or breaks its schema.

    ``code`` is a short, stable reason (``not-msgpack``, ``schema``,
    ``too-many-tokens`` ...) used as a metric label and in dead letters;
    ``detail`` is the readable explanation.
    """

    def __init__(self, code: str, detail: str) -> None:
        self.code = code
        self.detail = detail
        super().__init__(f"{code}: {detail}")


class ServiceUnavailable(StreamWinnowError):
    """A service the worker depends on is down or slow; retrying later can succeed."""

    retriable = True


class StoreError(ServiceUnavailable):
    """The weight store (Redis) could not be reached or did not answer in time."""


class TransportError(ServiceUnavailable):
    """The Kafka-protocol broker could not be reached or did not answer in time."""
