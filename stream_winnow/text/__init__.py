"""From text to features: the tokenizer, stable feature ids and strengths, and the compiled hashing behind them.

- ``tokenize``: the built-in tokenizer (lowercase runs of letters and digits).
- ``features``: ``Featurizer``, from tokens (or token hashes) to feature ids and strengths.
- ``feature_hash``: feature ids of many new tokens at once, in compiled code.
- ``hash_table``: the compiled open-addressing table from 64-bit keys to ids (also used by ``stores.memory``).
"""
