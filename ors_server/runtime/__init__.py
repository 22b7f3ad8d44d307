"""What the session core runs on: worker threads for sync user code (`worker_threads.py`) and the events it waits on
(`lazy_event.py`)."""
