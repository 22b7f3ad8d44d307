"""Episode records: every episode on every face kept in a database, listed, exported and watched.

    labels.py    what clients say of their episodes (`X-Episode-Labels`, `clientInfo._extra.labels`)
    db.py        the database: SQLite (default) or PostgreSQL, a versioned schema, batched writes, reads
    recorder.py  the call pipeline's `Observer` that queues what it sees, and the writer task (backpressure)
    reading.py   records as the REST readers, the export formats (jsonl, evaluation_row) and the CLI show them

The REST readers are a face (`ors_server/faces/episodes.py`); the CLI is `ors-server episodes ...`.
"""
