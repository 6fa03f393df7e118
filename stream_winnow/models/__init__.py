"""Whole models: open a named model in Redis, train one on labelled documents, and move one through a file.

- ``named``: ``connect`` to Redis and ``open_learner`` a named model (created on first use).
- ``training``: ``fit`` a learner online or iteratively, with feature discarding.
- ``snapshot``: a whole model exported to and imported from one ``.msgpack`` or ``.npz`` file.
"""
