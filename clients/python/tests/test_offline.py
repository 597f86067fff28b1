"""kiln_client without kiln: result parsing, error bodies, and retries on 429/503
against a stub HTTP server on 127.0.0.1."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import base64
import http.server
import json
import socket
import threading
import unittest

from kiln_client import KilnClient, KilnConnectionError, KilnError
from kiln_client.results import PNG_SIGNATURE, ExecutionResult


class Stub(http.server.BaseHTTPRequestHandler):
    answers: list = []   # (status, headers, body) popped per request
    seen: list = []

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        type(self).seen.append((self.path, dict(self.headers), json.loads(self.rfile.read(n))))
        status, headers, body = type(self).answers.pop(0)
        raw = json.dumps(body).encode()
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args):
        pass


OK = {"id": "abc", "status": "ok", "exit_code": 0, "signal": None, "stdout": "1\n", "stderr": "",
      "outputs": [{"output_type": "stream", "name": "stdout", "text": "1\n"}]}


class Offline(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Stub)
        threading.Thread(target=cls.httpd.serve_forever, daemon=True).start()
        cls.url = "http://127.0.0.1:%d" % cls.httpd.server_address[1]

    @classmethod
    def tearDownClass(cls):
        cls.httpd.shutdown()
        cls.httpd.server_close()

    def setUp(self):
        Stub.answers, Stub.seen = [], []

    def client(self, **kw):
        sleeps = []
        c = KilnClient(self.url, api_key="k", **kw)
        c._http._sleep = sleeps.append
        return c, sleeps

    def test_request_body_and_auth(self):
        Stub.answers = [(200, {}, OK)]
        c, _ = self.client()
        r = c.execute("print(1)", timeout=5, memory="256m", cpus=0.5, profile="strict",
                      files={"a.txt": "t", "b.bin": b"\x00\xff"}, return_files=["*.csv"])
        self.assertTrue(r.ok)
        path, headers, body = Stub.seen[0]
        self.assertEqual(path, "/v1/execute")
        self.assertEqual(headers["Authorization"], "Bearer k")
        self.assertEqual(body, {"code": "print(1)", "timeout": 5, "memory": "256m", "cpus": 0.5,
                                "profile": "strict", "return_files": ["*.csv"],
                                "files": [{"path": "a.txt", "content": "t"},
                                          {"path": "b.bin", "content_base64": "AP8="}]})

    def test_no_retry_by_default(self):
        Stub.answers = [(429, {"Retry-After": "3"},
                         {"error": {"code": "rate", "message": "over 10/s", "field": None}})]
        c, sleeps = self.client()
        with self.assertRaises(KilnError) as cm:
            c.execute("print(1)")
        e = cm.exception
        self.assertEqual((e.status_code, e.code, e.message, e.field, e.retry_after),
                         (429, "rate", "over 10/s", None, 3.0))
        self.assertEqual(sleeps, [])

    def test_retries_honour_retry_after(self):
        full = {"error": {"code": "queue_full", "message": "full", "field": None}}
        Stub.answers = [(503, {"Retry-After": "2"}, full), (429, {"Retry-After": "1"}, full), (200, {}, OK)]
        c, sleeps = self.client(retries=2)
        self.assertEqual(c.execute("print(1)").stdout, "1\n")
        self.assertEqual(sleeps, [2.0, 1.0])
        Stub.answers = [(503, {"Retry-After": "500"}, full), (503, {}, full)]
        c, sleeps = self.client(retries=1, max_retry_wait=7)
        with self.assertRaises(KilnError):
            c.execute("print(1)")
        self.assertEqual(sleeps, [7])

    def test_400_is_not_retried(self):
        Stub.answers = [(400, {}, {"error": {"code": "invalid_value", "message": "bad",
                                             "field": "files[0].path"}})]
        c, sleeps = self.client(retries=5)
        with self.assertRaises(KilnError) as cm:
            c.execute("print(1)")
        self.assertEqual(cm.exception.field, "files[0].path")
        self.assertEqual(sleeps, [])

    def test_reference_422_names_field(self):
        Stub.answers = [(422, {}, {"detail": [{"loc": ["body", "timeout"], "msg": "between 1 and 300",
                                               "type": "value_error"}]})]
        c, _ = self.client()
        with self.assertRaises(KilnError) as cm:
            c.reference_execute("print(1)", timeout=999)
        self.assertEqual((cm.exception.status_code, cm.exception.field), (422, "timeout"))
        self.assertEqual(Stub.seen[0][1]["X-Api-Key"], "k")

    def test_connection_refused(self):
        # A port of ours, bound but not listening: refused on any host (a
        # fixed one, such as 9, may be served somewhere).
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as closed:
            closed.bind(("127.0.0.1", 0))
            c = KilnClient("http://127.0.0.1:%d" % closed.getsockname()[1], api_key="k", timeout=5)
            with self.assertRaises(KilnConnectionError) as cm:
                c.health()
        self.assertIsNone(cm.exception.status_code)

    def test_result_helpers(self):
        png = PNG_SIGNATURE + b"rest"
        r = ExecutionResult.from_json({
            "status": "error", "exit_code": 1, "stdout": "a\n", "stderr": "",
            "outputs": [
                {"output_type": "display_data", "data": {"image/png": base64.b64encode(png).decode(),
                                                          "text/plain": "<Figure>"}},
                {"output_type": "display_data", "data": {"text/plain": "shown"}},
                {"output_type": "execute_result", "data": {"text/plain": "'v'"}},
                {"output_type": "error", "ename": "E", "evalue": "x", "traceback": []}],
            "error": {"name": "ValueError", "value": "bad", "traceback": ["Traceback...\n"]},
            "files": [{"path": "o.bin", "size": 2, "content_base64": "AAE="}],
            "reason": "exited 1", "extra": 1})
        self.assertEqual(r.images, [png])
        self.assertEqual(r.result_text, "'v'")
        self.assertEqual(r.files, {"o.bin": b"\x00\x01"})
        self.assertEqual(r.raw["extra"], 1)
        t = r.text()
        for piece in ("[stdout]\na", "[display] shown", "[result] 'v'", "ValueError: bad",
                      "1 PNG image"):
            self.assertIn(piece, t)
        exited = ExecutionResult.from_json({"status": "error", "exit_code": 3, "reason": "exited 3"})
        self.assertEqual(exited.text(), "[status] error (exited 3)")
        long = ExecutionResult.from_json({"status": "ok", "stdout": "x" * 100000})
        self.assertLess(len(long.text(max_chars=1000)), 1200)
        self.assertEqual(ExecutionResult.from_json({"status": "ok"}).text(), "(no output)")


if __name__ == "__main__":
    unittest.main()
