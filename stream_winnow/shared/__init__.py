"""What workers share through Redis besides the weights.

- ``document_cache``: recently seen documents, for labelled events that come without tokens.
- ``outcomes``: the last labelled events' outcomes per model, for per-category mistake rates.
- ``learning_peers``: heartbeats of the workers learning one model, and the rounds they learn in.
"""
