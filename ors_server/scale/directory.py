"""A front's memory of where sessions live: session id -> the worker incarnation holding it, bounded.

The front records an id when it places a new session (and the other id its reply names it by, as its face
declares), and when a lookup finds it. It is a cache, never the truth: an id it has forgotten (evicted, or this
front was restarted) is looked up again from the workers. Bounded by `--front-directory-size` entries
(`Settings.front_directory_size`; least recently used out first). An entry costs ~200 bytes (the id's
string and the dict's node; the tag is shared with the worker), so the default 100,000 hold ~20 MB.
"""

from __future__ import annotations

from collections import OrderedDict

from ors_server.ids import WorkerTag
from ors_server.settings import Settings

DEFAULT_SIZE = Settings.front_directory_size


class Directory:
    def __init__(self, size: int = DEFAULT_SIZE) -> None:
        if size < 1:
            raise ValueError(f"the front's directory needs at least 1 entry, got {size}")
        self.size = size
        self._entries: OrderedDict[str, WorkerTag] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> WorkerTag | None:
        tag = self._entries.get(key)
        if tag is not None:
            self._entries.move_to_end(key)
        return tag

    def put(self, key: str, tag: WorkerTag) -> None:
        self._entries[key] = tag
        self._entries.move_to_end(key)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def drop(self, key: str) -> None:
        self._entries.pop(key, None)
