"""An incremental Server-Sent Events parser (the WHATWG "event stream"
interpretation): bytes in, as they arrive; (event name, data) out, as soon as
the blank line that ends each event has arrived."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Iterator


@dataclass(frozen=True)
class SseEvent:
    name: str   # the "event:" field; "message" when there is none
    data: str   # the "data:" lines joined with "\n"


@dataclass
class SseParser:
    """feed() bytes in any pieces (a line, a multi-byte character or a CR LF may
    be split across them); it returns the events completed so far. Lines end in
    LF, CR or CR LF; lines starting with ":" are comments; "id" and "retry" and
    unknown fields are ignored."""

    _buffer: bytes = b""
    _event: str = ""
    _data: list[str] = field(default_factory=list)
    _started: bool = False

    def feed(self, chunk: bytes) -> list[SseEvent]:
        self._buffer += chunk
        events: list[SseEvent] = []
        for line in self._take_lines():
            event = self._line(line)
            if event is not None:
                events.append(event)
        return events

    def _take_lines(self) -> Iterator[str]:
        start = 0
        try:
            while True:
                end, width = _line_end(self._buffer, start)
                if end < 0:
                    return
                raw = self._buffer[start:end]
                start = end + width
                if not self._started:
                    self._started = True
                    raw = raw.removeprefix(b"\xef\xbb\xbf")  # a UTF-8 BOM
                yield raw.decode("utf-8", "replace")
        finally:
            self._buffer = self._buffer[start:]

    def _line(self, line: str) -> SseEvent | None:
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        return None

    def _dispatch(self) -> SseEvent | None:
        name, data = self._event or "message", self._data
        self._event, self._data = "", []
        if not data:  # an event with no data is not dispatched
            return None
        return SseEvent(name, "\n".join(data))


def _line_end(buffer: bytes, start: int) -> tuple[int, int]:
    """(index, width) of the first complete line end in buffer[start:], or
    (-1, 0). A CR at the very end is not complete yet: an LF may follow."""
    lf, cr = buffer.find(b"\n", start), buffer.find(b"\r", start)
    if cr < 0 or (0 <= lf < cr):
        return (lf, 1) if lf >= 0 else (-1, 0)
    if cr + 1 == len(buffer):
        return -1, 0
    return (cr, 2) if buffer[cr + 1] == 0x0A else (cr, 1)


def parse_events(chunks: Iterable[bytes]) -> Iterator[SseEvent]:
    """The events of a stream of byte chunks, each yielded as soon as it is complete."""
    parser = SseParser()
    for chunk in chunks:
        yield from parser.feed(chunk)
