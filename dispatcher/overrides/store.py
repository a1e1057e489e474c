"""What the actor table's writer needs from Faust's RocksDB store and producer, that Faust keeps private.

`table_writer` writes the changelog itself, in batches, and RocksDB once the
broker has acked them (Faust's key-by-key writes were most of the worker's CPU
per delivery): it needs the partition's RocksDB handle, aiokafka's producer,
and every RocksDB opened without its write-ahead log and with whole-file
Bloom filters.
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


# Bits per key of each table file's Bloom filter. Faust builds the old block-based filter at 3 bits
# a key (a quarter of its answers wrong), so the dedup lookup of every new message id, a miss,
# went on to read index and data blocks of most files: 10.4-11.2 us a miss against 5.1-5.2 us
# with a whole-file filter at 10 bits (about 1 % wrong), 200,000 intakes on the worker's settings
# (docs/benchmarks.md, "Performance II").
FILTER_BITS = 10


def open_unlogged(store: Any) -> None:
    """Make every RocksDB the store opens (Faust's recovery included) write without the WAL, and
    give its table files whole-file Bloom filters (`FILTER_BITS`)."""
    options = store.rocksdb_options
    open_db = options.open
    faust_options = options.as_options

    def with_full_filters() -> Any:
        db_options = faust_options()
        table = rocksdict.BlockBasedOptions()
        table.set_bloom_filter(FILTER_BITS, block_based=False)
        table.set_block_cache(rocksdict.Cache(options.block_cache_size))
        table.set_index_type(rocksdict.BlockBasedIndexType.binary_search())
        db_options.set_block_based_table_factory(table)  # replaces Faust's, the filter aside the same
        return db_options

    def open_without_wal(path: Any, *, read_only: bool = False) -> Any:
        db = open_db(path, read_only=read_only)
        db.set_write_options(_unlogged())
        return db

    options.as_options = with_full_filters
    options.open = open_without_wal
