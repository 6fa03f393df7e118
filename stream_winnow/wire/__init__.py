"""Bytes on the wire: the topics' message formats and the Redis requests a worker packs itself.

- ``codec``: the msgpack contracts of the four topics (``schemas/``), their encoders and decoders.
- ``fast_documents``: a batch of document messages to token hashes in one compiled pass.
- ``top_scores``: which categories' scores a decision message carries.
- ``resp``: Redis commands written as one packed request and their replies read back.
"""
