"""What the session core runs on: the store's `Runtime` (`resources.py`: thread pools, background tasks, the
composed tools' catalogue, CodeAct's sandbox pool), how an episode's environment is built, read and torn down on it
(`instances.py`), worker threads for sync user code (`worker_threads.py`), the events it waits on
(`lazy_event.py`), the one protocol every tool implements (`tool.py`), a session's tools (`session_tools.py`) and
which of an episode's calls may run at once (`call_gate.py`)."""
