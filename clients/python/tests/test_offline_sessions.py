"""Sessions, files and streaming without kiln: the SSE parser, and the client
against a scripted HTTP server on 127.0.0.1 (chunked event streams, early
413s, retries, error classes)."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import http.server  # noqa: E402
import json  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import unittest  # noqa: E402
from typing import Any, Callable  # noqa: E402

from kiln_client import (BadRequest, ExecutionResult, KilnClient, KilnConnectionError, KilnError,  # noqa: E402
                         NotFound, PayloadTooLarge, SessionBusy, SessionGone, StreamEvent,
                         WorkspaceFile)
from kiln_client._sse import SseEvent, SseParser, parse_events  # noqa: E402
from kiln_client.errors import error_from_response, error_from_stream  # noqa: E402

SESSION = {"id": "s1", "profile": "default", "state": "idle", "created_at": "2026-01-02T03:04:05.600Z",
           "last_used_at": "2026-01-02T03:04:05.600Z", "expires_at": "2026-01-02T03:14:05.600Z",
           "executions": 0, "idle_ttl": 600.0, "max_lifetime": 3600.0, "timeout": 30.0,
           "limits": {"memory_bytes": 536870912}, "memory_bytes": 1048576}
DONE = {"status": "ok", "stdout": "a\nb\n", "outputs": [], "execution_count": 3, "id": "e1",
        "session_id": "s1", "session_state": "kept"}


def gone(message: str = "session s1 is gone: deleted by the client") -> dict[str, Any]:
    return {"error": {"code": "session_gone", "message": message, "field": None}}


class Answer:
    """One scripted answer: write(handler) sends it; reads_body says whether the
    request body is read first (an early 413 does not)."""

    def __init__(self, write: Callable[[http.server.BaseHTTPRequestHandler], None],
                 reads_body: bool = True) -> None:
        self.write = write
        self.reads_body = reads_body


def send(h: http.server.BaseHTTPRequestHandler, status: int, data: bytes, content_type: str,
         headers: dict[str, str] | None = None) -> None:
    h.send_response(status)
    for k, v in (headers or {}).items():
        h.send_header(k, v)
    h.send_header("Content-Type", content_type)
    h.send_header("Content-Length", str(len(data)))
    h.send_header("Connection", "close")
    h.end_headers()
    h.wfile.write(data)


def json_answer(status: int, body: Any, headers: dict[str, str] | None = None) -> Answer:
    return Answer(lambda h: send(h, status, json.dumps(body).encode(), "application/json", headers))


def bytes_answer(data: bytes) -> Answer:
    return Answer(lambda h: send(h, 200, data, "application/octet-stream"))


def no_content() -> Answer:
    def write(h):
        h.send_response(204)
        h.send_header("Connection", "close")
        h.end_headers()
    return Answer(write)


def sse_answer(*steps: tuple[str, Any] | float | bytes) -> Answer:
    """A chunked event stream: (name, data) is one event, a float sleeps, bytes
    are sent as they are (one chunk)."""
    def write(h):
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Transfer-Encoding", "chunked")
        h.send_header("Connection", "close")
        h.end_headers()
        try:
            for step in steps:
                if isinstance(step, float):
                    time.sleep(step)
                    continue
                raw = step if isinstance(step, bytes) else \
                    f"event: {step[0]}\ndata: {json.dumps(step[1])}\n\n".encode()
                h.wfile.write(b"%x\r\n%s\r\n" % (len(raw), raw))
                h.wfile.flush()
            h.wfile.write(b"0\r\n\r\n")
        except OSError:
            h.close_connection = True  # the client went away
    return Answer(write)


def early_413() -> Answer:
    """Answers 413 from the headers alone and closes, the body unread (as kiln
    does over server.max_body)."""
    def write(h):
        send(h, 413, json.dumps({"error": {"code": "body_too_large", "message": "over 1 MiB",
                                           "field": None}}).encode(), "application/json")
        h.close_connection = True
    return Answer(write, reads_body=False)


class Scripted(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def handle_one(self) -> None:
        server = self.server
        answer = server.answers.pop(0)
        body = b""
        if answer.reads_body:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        server.seen.append({"method": self.command, "path": self.path, "headers": dict(self.headers),
                            "body": body})
        answer.write(self)

    do_GET = do_POST = do_PUT = do_DELETE = handle_one

    def log_message(self, *args):
        pass


class SseParserTest(unittest.TestCase):
    STREAM = (b"\xef\xbb\xbf: a comment\r\n"
              b"event: stdout\r\ndata: {\"text\": \"a\"}\r\n\r\n"
              b"event: x\ndata: 1\ndata:2\nid: 7\nretry: 10\n\n"
              b"event: empty\n\n"
              b"data: \xc3\xa9\r\rdata: next\n\n")

    def test_whole_and_byte_by_byte_agree(self):
        expected = [SseEvent("stdout", '{"text": "a"}'), SseEvent("x", "1\n2"), SseEvent("message", "\u00e9"),
                    SseEvent("message", "next")]
        self.assertEqual(list(parse_events([self.STREAM])), expected)
        parser = SseParser()
        got = []
        for i in range(len(self.STREAM)):
            got += parser.feed(self.STREAM[i:i + 1])
        self.assertEqual(got, expected)

    def test_event_waits_for_its_blank_line(self):
        parser = SseParser()
        self.assertEqual(parser.feed(b"event: a\ndata: 1\n"), [])
        self.assertEqual(parser.feed(b"\r"), [])  # a CR alone: an LF may follow
        self.assertEqual(parser.feed(b"\n"), [SseEvent("a", "1")])
        self.assertEqual(parser.feed(b"data: tail without end"), [])


class Offline(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
        cls.httpd.daemon_threads = True
        threading.Thread(target=cls.httpd.serve_forever, daemon=True).start()
        cls.url = "http://127.0.0.1:%d" % cls.httpd.server_address[1]

    @classmethod
    def tearDownClass(cls):
        cls.httpd.shutdown()
        cls.httpd.server_close()

    def setUp(self):
        self.httpd.answers, self.httpd.seen = [], []

    def script(self, *answers: Answer) -> None:
        self.httpd.answers.extend(answers)

    def client(self, **kw) -> tuple[KilnClient, list[float]]:
        sleeps: list[float] = []
        c = KilnClient(self.url, api_key="k", timeout=10, **kw)
        c._http._sleep = sleeps.append
        return c, sleeps

    def session(self, **kw):
        self.script(json_answer(201, SESSION))
        c, sleeps = self.client(**kw)
        s = c.create_session()
        self.httpd.seen.clear()
        return s, sleeps

    # --- sessions ---------------------------------------------------------------

    def test_create_sends_only_given_fields(self):
        self.script(json_answer(201, SESSION))
        c, _ = self.client()
        s = c.create_session(profile="strict", timeout=5, idle_ttl=60)
        req = self.httpd.seen[0]
        self.assertEqual((req["method"], req["path"]), ("POST", "/v1/sessions"))
        self.assertEqual(json.loads(req["body"]), {"profile": "strict", "timeout": 5, "idle_ttl": 60})
        self.assertEqual(req["headers"]["Authorization"], "Bearer k")
        self.assertEqual(s.id, "s1")
        info = s.last_info
        self.assertEqual((info.timeout, info.executions, info.memory_bytes), (30.0, 0, 1048576))
        self.assertEqual(info.created_at.isoformat(), "2026-01-02T03:04:05.600000+00:00")

    def test_execute_result_has_session_fields(self):
        s, _ = self.session()
        self.script(json_answer(200, DONE))
        r = s.execute("x", timeout=3)
        self.assertEqual(self.httpd.seen[0]["path"], "/v1/sessions/s1/execute")
        self.assertEqual(json.loads(self.httpd.seen[0]["body"]), {"code": "x", "timeout": 3})
        self.assertEqual((r.session_id, r.session_state, r.execution_count), ("s1", "kept", 3))
        self.assertTrue(r.session_kept)

    def test_busy_and_gone_are_not_retried(self):
        s, sleeps = self.session(retries=3)
        self.script(json_answer(409, {"error": {"code": "session_busy", "message": "running", "field": None}},
                                {"Retry-After": "1"}))
        with self.assertRaises(SessionBusy):
            s.execute("x")
        self.script(json_answer(410, gone()))
        with self.assertRaises(SessionGone) as cm:
            s.execute("x")
        self.assertIn("deleted", cm.exception.message)
        self.assertEqual(len(self.httpd.seen), 2)
        self.assertEqual(sleeps, [])

    def test_429_and_503_are_retried(self):
        s, sleeps = self.session(retries=2)
        full = {"error": {"code": "queue_full", "message": "full", "field": None}}
        self.script(json_answer(503, full, {"Retry-After": "2"}), json_answer(200, DONE))
        self.assertEqual(s.execute("x").stdout, "a\nb\n")
        self.assertEqual(sleeps, [2.0])

    def test_context_manager_deletes_and_tolerates_gone(self):
        s, _ = self.session()
        self.script(no_content())
        with s:
            pass
        self.assertEqual((self.httpd.seen[0]["method"], self.httpd.seen[0]["path"]), ("DELETE", "/v1/sessions/s1"))
        self.script(json_answer(410, gone()))
        with s:
            pass  # already gone: no error
        self.script(json_answer(410, gone()))
        with self.assertRaises(SessionGone):
            s.delete()

    def test_session_limit_is_not_retried(self):
        c, sleeps = self.client(retries=3)
        self.script(json_answer(429, {"error": {"code": "session_limit", "message": "8 live sessions",
                                                "field": None}}))
        with self.assertRaises(KilnError) as cm:
            c.create_session()
        self.assertEqual((cm.exception.status_code, cm.exception.code), (429, "session_limit"))
        self.assertEqual((len(self.httpd.seen), sleeps), (1, []))

    def test_listing(self):
        self.script(json_answer(200, {"sessions": [SESSION, dict(SESSION, id="s2", state="busy")]}))
        c, _ = self.client()
        listed = c.sessions()
        self.assertEqual([(x.id, x.last_info.state) for x in listed], [("s1", "idle"), ("s2", "busy")])

    def test_interrupt(self):
        s, _ = self.session()
        self.script(json_answer(200, {"interrupted": True}), json_answer(200, {"interrupted": False}))
        self.assertTrue(s.interrupt())
        self.assertFalse(s.interrupt())
        self.assertEqual(self.httpd.seen[0]["path"], "/v1/sessions/s1/interrupt")

    # --- files --------------------------------------------------------------------

    def test_upload_quotes_the_path_and_sends_raw_bytes(self):
        s, _ = self.session()
        data = bytes(range(256))
        self.script(json_answer(201, {"path": "a b/\u00e9%#?.bin", "size": 256}))
        entry = s.upload("a b/\u00e9%#?.bin", data)
        req = self.httpd.seen[0]
        self.assertEqual(req["method"], "PUT")
        self.assertEqual(req["path"], "/v1/sessions/s1/files/a%20b/%C3%A9%25%23%3F.bin")
        self.assertEqual(req["body"], data)
        self.assertEqual(req["headers"]["Content-Type"], "application/octet-stream")
        self.assertEqual(entry, WorkspaceFile("a b/\u00e9%#?.bin", 256, False))

    def test_download_is_bytes_even_when_it_looks_like_json(self):
        s, _ = self.session()
        self.script(bytes_answer(b'{"not": "parsed"}'))
        self.assertEqual(s.download("x.json"), b'{"not": "parsed"}')

    def test_early_413_is_read_and_raised(self):
        s, _ = self.session()
        self.script(early_413())
        with self.assertRaises(PayloadTooLarge) as cm:
            s.upload("big.bin", b"\0" * (32 * 1024 * 1024))
        self.assertEqual((cm.exception.status_code, cm.exception.code), (413, "body_too_large"))

    def test_list_and_delete_files(self):
        s, _ = self.session()
        self.script(json_answer(200, {"files": [{"path": "d", "size": 0, "directory": True},
                                                {"path": "d/f", "size": 3, "directory": False}]}),
                    no_content(),
                    json_answer(404, {"error": {"code": "not_found", "message": "no", "field": None}}))
        self.assertEqual(s.list_files(), [WorkspaceFile("d", 0, True), WorkspaceFile("d/f", 3, False)])
        s.delete_file("d/f")
        with self.assertRaises(NotFound):
            s.delete_file("d/f")

    # --- streaming ------------------------------------------------------------------

    def test_events_arrive_as_sent(self):
        s, _ = self.session()
        self.script(sse_answer(("stdout", {"text": "a\n"}), 0.5, ("stdout", {"text": "b\n"}), ("done", DONE)))
        arrivals = []
        with s.stream("code") as events:
            for event in events:
                arrivals.append((event, time.monotonic()))
        req = self.httpd.seen[0]
        self.assertEqual(req["headers"]["Accept"], "text/event-stream")
        self.assertEqual(json.loads(req["body"]), {"code": "code"})
        self.assertEqual([e for e, _ in arrivals[:2]], [StreamEvent("stdout", {"text": "a\n"}),
                                                      StreamEvent("stdout", {"text": "b\n"})])
        self.assertGreaterEqual(arrivals[1][1] - arrivals[0][1], 0.4)
        self.assertEqual(arrivals[-1][0].name, "done")
        self.assertEqual(events.result.session_state, "kept")

    def test_error_after_the_stream_began_is_raised(self):
        s, _ = self.session()
        self.script(sse_answer(("stdout", {"text": "a\n"}), ("done", gone("session s1 is gone: killed"))))
        events = s.stream("code")
        self.assertEqual(next(events).name, "stdout")
        with self.assertRaises(SessionGone) as cm:
            next(events)
        self.assertEqual((cm.exception.status_code, cm.exception.code), (410, "session_gone"))

    def test_stream_without_done_is_a_connection_error(self):
        s, _ = self.session()
        self.script(sse_answer(("stdout", {"text": "a\n"})))
        with self.assertRaises(KilnConnectionError):
            list(s.stream("code"))

    def test_refusal_before_the_stream_is_raised_and_429_retried(self):
        s, sleeps = self.session(retries=1)
        rate = {"error": {"code": "rate", "message": "slow down", "field": None}}
        self.script(json_answer(429, rate, {"Retry-After": "1"}), sse_answer(("done", DONE)))
        self.assertEqual(s.stream("x").wait().stdout, "a\nb\n")
        self.assertEqual(sleeps, [1.0])
        self.script(json_answer(409, {"error": {"code": "session_busy", "message": "m", "field": None}}))
        with self.assertRaises(SessionBusy):
            s.stream("x")

    def test_plain_json_answer_to_a_stream_request(self):
        c, _ = self.client()
        self.script(json_answer(200, DONE))
        events = list(c.execute_stream("x"))
        self.assertEqual(self.httpd.seen[0]["path"], "/v1/execute")
        self.assertEqual(events, [StreamEvent("done", ExecutionResult.from_json(DONE))])

    def test_close_from_another_thread_ends_the_iteration(self):
        s, _ = self.session()
        self.script(sse_answer(("stdout", {"text": "a\n"}), 5.0, ("done", DONE)))
        events = s.stream("code")
        first = threading.Event()
        outcome: list[BaseException | None] = []

        def consume():
            try:
                for event in events:
                    first.set()
            except KilnError as e:
                outcome.append(e)
            else:
                outcome.append(None)

        worker = threading.Thread(target=consume, daemon=True)
        t0 = time.monotonic()
        worker.start()
        self.assertTrue(first.wait(5))
        events.close()
        worker.join(3)
        self.assertFalse(worker.is_alive())
        self.assertLess(time.monotonic() - t0, 3)
        self.assertIsInstance(outcome[0], KilnConnectionError)
        self.assertIsNone(events.result)

    # --- errors -----------------------------------------------------------------------

    def test_error_classes(self):
        def err(status, code):
            return error_from_response(status, {"error": {"code": code, "message": "m", "field": None}}, None)
        self.assertIsInstance(err(400, "invalid_value"), BadRequest)
        self.assertIsInstance(err(404, "not_found"), NotFound)
        self.assertIsInstance(err(409, "session_busy"), SessionBusy)
        self.assertIs(type(err(409, "conflict")), KilnError)
        self.assertIsInstance(err(410, "session_gone"), SessionGone)
        self.assertIsInstance(err(413, "too_large"), PayloadTooLarge)
        self.assertIs(type(err(429, "session_limit")), KilnError)
        self.assertTrue(issubclass(SessionGone, KilnError))
        e = error_from_stream({"error": {"code": "session_busy", "message": "m", "field": None}})
        self.assertIsInstance(e, SessionBusy)
        self.assertEqual(e.status_code, 409)
        self.assertEqual(error_from_stream({"error": {"code": "weird"}}).status_code, 500)


if __name__ == "__main__":
    unittest.main()
