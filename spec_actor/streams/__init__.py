"""Async streams of one generation request over a bounded trio memory channel.

`EventStream` yields `Token`, `Stats` (`Progress` when asked) and one
terminal event; `TextStream` yields text pieces. `StreamSource` is the request API (``stream_events``,
``stream``, ``generate``) that actors and pools share.
"""

from ._event_stream import EventStream
from ._source import StreamSource
from ._text_stream import TextStream

__all__ = ["EventStream", "StreamSource", "TextStream"]
