"""Weight stores: one interface (``base``), in memory (``memory``) and in Redis (``redis``)."""

from stream_winnow.stores.base import Bounds, CounterUpdate, RowUpdate, TableSpec, Update, WeightStore
from stream_winnow.stores.memory import MemoryStore

__all__ = ["Bounds", "CounterUpdate", "Update", "MemoryStore", "RowUpdate", "TableSpec", "WeightStore"]
