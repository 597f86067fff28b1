"""Streamed executions: the events of one cell (or one-shot execution) as the
server sends them (Server-Sent Events with `Accept: text/event-stream`)."""

from __future__ import annotations

import json
from typing import Any, Iterator, NamedTuple

from ._sse import SseEvent, parse_events
from ._transport import StreamingResponse
from .errors import KilnConnectionError, KilnError, error_from_stream
from .results import ExecutionResult


class StreamEvent(NamedTuple):
    """One event: a (name, data) tuple.

    name      data
    "stdout"  {"text": "..."}: output as the code writes it
    "stderr"  {"text": "..."}
    "display" an nbformat display_data output (e.g. a PNG figure)
    "result"  an nbformat execute_result output (the last expression's value)
    "error"   an nbformat error output (the uncaught exception)
    "done"    the ExecutionResult, always last (the same as a non-streaming call)
    """

    name: str
    data: Any

    @property
    def text(self) -> str:
        """The text of a stdout or stderr event ("" for other events)."""
        if self.name in ("stdout", "stderr") and isinstance(self.data, dict):
            return str(self.data.get("text") or "")
        return ""


class EventStream:
    """The events of one streamed execution, as they arrive; iterate it:

        with session.stream("for i in range(3): print(i)") as events:
            for name, data in events:
                if name == "stdout":
                    print(data["text"], end="")
        events.result          # the ExecutionResult of the "done" event

    The last event is ("done", ExecutionResult). An error the server reports
    after the stream began (e.g. the session died: SessionGone) is raised from
    the iteration; so is a stream that breaks before "done" (KilnConnectionError).
    Closing the stream before "done" (close(), leaving the `with` block, or
    dropping the iterator) closes the connection, and the server cancels the
    execution. `result` is None until "done" has been read; `wait()` reads the
    remaining events and returns it.
    """

    def __init__(self, response: StreamingResponse) -> None:
        self._response = response
        self.result: ExecutionResult | None = None
        self._events = self._generate()

    def __iter__(self) -> "EventStream":
        return self

    def __next__(self) -> StreamEvent:
        return next(self._events)

    def __enter__(self) -> "EventStream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Closes the connection (cancelling the execution if it still runs).
        From another thread while one iterates, that iteration ends with
        KilnConnectionError."""
        try:
            self._events.close()  # its `finally` closes the connection
        except ValueError:  # "generator already executing": iterated in another thread now
            self._response.abort()
            return
        self._response.close()

    def wait(self) -> ExecutionResult:
        """Reads the remaining events and returns the result of "done"."""
        for _ in self:
            pass
        if self.result is None:  # closed before "done"
            raise KilnConnectionError("connection_error", "the event stream was closed before its 'done' event")
        return self.result

    def _generate(self) -> Iterator[StreamEvent]:
        try:
            if not self._response.is_event_stream:  # a server that answered with the plain result
                yield self._done(_json(self._response.read_all().decode("utf-8", "replace"), "body"))
                return
            for sse in parse_events(self._response.chunks()):
                event = self._event(sse)
                yield event
                if event.name == "done":
                    return
            raise KilnConnectionError("connection_error", "the event stream ended before its 'done' event")
        finally:
            self._response.close()

    def _event(self, sse: SseEvent) -> StreamEvent:
        data = _json(sse.data, sse.name)
        if sse.name == "done":
            return self._done(data)
        return StreamEvent(sse.name, data)

    def _done(self, body: Any) -> StreamEvent:
        if isinstance(body, dict) and isinstance(body.get("error"), dict) and "status" not in body:
            raise error_from_stream(body)
        if not isinstance(body, dict):
            raise KilnError(200, "invalid_response", "the 'done' event is not a JSON object", body=body)
        self.result = ExecutionResult.from_json(body)
        return StreamEvent("done", self.result)


def _json(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as e:
        raise KilnError(200, "invalid_response", f"the event stream's {what!r} data is not JSON: {e}",
                        body=text) from e
