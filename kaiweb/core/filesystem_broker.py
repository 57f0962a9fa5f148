"""The server-less Celery broker of `make run`: kombu's filesystem transport, written atomically.

kombu's filesystem transport creates a message file and then writes it; a worker polling the
folder can take the file in between and read it empty, which ends the worker. Here a message is
written under a name the reader ignores and then renamed into place (`os.replace` is atomic on
one filesystem), so a reader sees either no file or the whole message.
"""

from __future__ import annotations

import os
import uuid
from time import monotonic
from typing import Any

from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps


class Channel(filesystem.Channel):
    def _put(self, queue: str, payload: Any, **kwargs: Any) -> None:
        name = f"{int(round(monotonic() * 1000))}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        # A leading dot: the reader matches "<anything>.<queue>.msg" after the first dot only.
        partial = os.path.join(self.data_folder_out, f".{name}.partial")
        try:
            with open(partial, "wb") as f:
                f.write(str_to_bytes(dumps(payload)))
            os.replace(partial, final)
        except OSError as exc:
            raise filesystem.ChannelError(f"Cannot add file {final!r} to directory") from exc


class Transport(filesystem.Transport):
    Channel = Channel
