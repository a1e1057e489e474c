"""What the actor table's writer needs from Faust's RocksDB store and producer, that Faust keeps private.

`table_writer` writes the changelog itself, in batches, and RocksDB once the
broker has acked them (Faust's key-by-key writes were most of the worker's CPU
per delivery): it needs the partition's RocksDB handle, aiokafka's producer,
and every RocksDB opened without its write-ahead log.
"""

from __future__ import annotations

from typing import Any

import rocksdict


def partition_db(store: Any, partition: int) -> Any:
    """The partition's RocksDB, opened on first use."""
    return store._db_for_partition(partition)


def held_db(store: Any, partition: int) -> Any | None:
    """The partition's RocksDB if it is open here (a partition not held here has none)."""
    return store._dbs.get(partition)


def aiokafka_producer(app: Any) -> Any:
    """The app's aiokafka producer (started with the app), under Faust's buffer."""
    return app.producer._producer


def _unlogged() -> rocksdict.WriteOptions:
    options = rocksdict.WriteOptions()
    options.disable_wal = True  # type: ignore[method-assign,assignment]  # a property; the stub says method
    return options


def open_unlogged(store: Any) -> None:
    """Make every RocksDB the store opens (Faust's recovery included) write without the WAL."""
    options = store.rocksdb_options
    open_db = options.open

    def open_without_wal(path: Any, *, read_only: bool = False) -> Any:
        db = open_db(path, read_only=read_only)
        db.set_write_options(_unlogged())
        return db

    options.open = open_without_wal
