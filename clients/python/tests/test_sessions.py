"""Sessions and streaming against a real `kiln serve` (started once for the class)."""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

import hashlib  # noqa: E402
import importlib.util  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import unittest  # noqa: E402

from kiln_client import (BadRequest, ExecutionResult, KilnClient, NotFound,  # noqa: E402
                         Session, SessionBusy, SessionGone, SessionInfo, StreamEvent,
                         WorkspaceFile)

from kiln_server import KilnServer, find_kiln, require_modules  # noqa: E402

EXAMPLES = os.path.join(HERE, "..", "examples")


def load_example(name: str):
    spec = importlib.util.spec_from_file_location(name, os.path.join(EXAMPLES, name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Worker(threading.Thread):
    """Runs fn() in a thread and keeps its return value or exception."""

    def __init__(self, fn) -> None:
        super().__init__(daemon=True)
        self.fn = fn
        self.value = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.value = self.fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test thread
            self.error = e

    def result(self, timeout: float):
        self.join(timeout)
        if self.is_alive():
            raise AssertionError(f"the worker did not finish within {timeout} s")
        if self.error is not None:
            raise self.error
        return self.value


class SessionsAgainstServer(unittest.TestCase):
    server: KilnServer
    client: KilnClient

    @classmethod
    def setUpClass(cls):
        cls.server = KilnServer(find_kiln())
        cls.client = KilnClient(cls.server.url, api_key=cls.server.key, timeout=120, retries=3)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def new_session(self, **options) -> Session:
        session = self.client.create_session(**options)
        self.addCleanup(session.delete, missing_ok=True)
        return session

    # --- state ------------------------------------------------------------------

    def test_create_describes_the_session(self):
        s = self.new_session(timeout=20, idle_ttl=120)
        info = s.last_info
        self.assertTrue(s.id)
        self.assertEqual(info.id, s.id)
        self.assertEqual(info.profile, "default")
        self.assertEqual(info.state, "idle")
        self.assertEqual(info.executions, 0)
        self.assertEqual(info.timeout, 20.0)
        self.assertEqual(info.idle_ttl, 120.0)
        self.assertIsNotNone(info.created_at)
        self.assertIsNotNone(info.expires_at)
        self.assertGreater(info.expires_at, info.created_at)
        self.assertIn("memory_bytes", info.limits)

    def test_state_persists_across_cells(self):
        s = self.new_session()
        first = s.execute("import math\nx = 41\ndef twice(v):\n    return 2 * v\n")
        self.assertIsInstance(first, ExecutionResult)
        self.assertTrue(first.ok, first.text())
        self.assertEqual(first.session_state, "kept")
        self.assertEqual(first.session_id, s.id)
        second = s.execute("twice(x + 1) // 2 + int(math.sqrt(0))")
        self.assertTrue(second.ok, second.text())
        self.assertEqual(second.result_text, "42")
        self.assertTrue(second.session_kept)
        self.assertEqual(second.execution_count, first.execution_count + 1)
        self.assertNotEqual(first.id, second.id)
        # files written by one cell are there for the next one
        s.execute("open('note.txt', 'w').write('kept')")
        self.assertEqual(s.execute("open('note.txt').read()").result_text, "'kept'")
        self.assertEqual(s.info().executions, 4)

    def test_error_cell_keeps_state(self):
        s = self.new_session()
        s.execute("y = 'still here'")
        r = s.execute("1 / 0")
        self.assertEqual(r.status, "error")
        self.assertEqual(r.error["name"], "ZeroDivisionError")
        self.assertEqual(r.session_state, "kept")
        self.assertEqual(s.execute("y").result_text, "'still here'")

    def test_exiting_interpreter_loses_the_session(self):
        s = self.new_session()
        r = s.execute("import os\nos._exit(3)")
        self.assertEqual(r.session_state, "lost", r)
        self.assertFalse(r.session_kept)
        with self.assertRaises(SessionGone) as cm:
            s.execute("1")
        self.assertEqual(cm.exception.status_code, 410)
        self.assertIn("gone", cm.exception.message)

    # --- streaming -----------------------------------------------------------------

    def test_stream_events_arrive_while_the_cell_runs(self):
        s = self.new_session()
        s.execute("z = 5")
        code = "import time\nprint('first')\ntime.sleep(2.0)\nprint('second')\nz * 2"
        arrivals: list[tuple[StreamEvent, float]] = []
        with s.stream(code) as events:
            for event in events:
                arrivals.append((event, time.monotonic()))
        names = [e.name for e, _ in arrivals]
        self.assertEqual(names[0], "stdout", names)
        self.assertEqual(arrivals[0][0].text, "first\n")
        self.assertEqual(names[-1], "done", names)
        self.assertIn("result", names)
        first_at, done_at = arrivals[0][1], arrivals[-1][1]
        # The first line came before the 2 s sleep ended, not with the rest at the end
        # (a second to spare for a busy host).
        self.assertGreaterEqual(done_at - first_at, 1.0, [(e.name, t - first_at) for e, t in arrivals])
        stdout = "".join(e.text for e, _ in arrivals if e.name == "stdout")
        self.assertEqual(stdout, "first\nsecond\n")
        result = arrivals[-1][0].data
        self.assertIsInstance(result, ExecutionResult)
        self.assertIs(events.result, result)
        self.assertTrue(result.ok, result.text())
        self.assertEqual(result.stdout, "first\nsecond\n")
        self.assertEqual(result.result_text, "10")
        self.assertEqual(result.session_state, "kept")
        self.assertEqual(result.session_id, s.id)

    def test_stream_of_a_failing_cell(self):
        s = self.new_session()
        events = list(s.stream("import sys\nprint('oops', file=sys.stderr)\nraise ValueError('bad')"))
        by_name = {e.name: e for e in events}
        self.assertEqual(by_name["stderr"].text.splitlines()[0], "oops")
        self.assertEqual(by_name["error"].data.get("ename"), "ValueError")
        self.assertEqual(events[-1].name, "done")
        self.assertEqual(events[-1].data.status, "error")
        self.assertEqual(events[-1].data.error["value"], "bad")

    def test_stream_wait_returns_the_result(self):
        s = self.new_session()
        result = s.stream("print('w')").wait()
        self.assertEqual(result.stdout, "w\n")
        self.assertEqual(s.execute("1 + 1").result_text, "2")

    def test_execute_stream_one_shot(self):
        code = "import time\nprint('a', flush=True)\ntime.sleep(2.0)\nprint('b')\n6 * 7"
        t0 = time.monotonic()
        events = []
        for event in self.client.execute_stream(code, timeout=20, files={"in.txt": "x"}):
            events.append((event, time.monotonic() - t0))
        self.assertEqual(events[0][0], StreamEvent("stdout", {"text": "a\n"}))
        self.assertEqual(events[-1][0].name, "done")
        self.assertGreaterEqual(events[-1][1] - events[0][1], 1.0)  # before the 2 s sleep ended
        result = events[-1][0].data
        self.assertTrue(result.ok, result.text())
        self.assertEqual(result.stdout, "a\nb\n")
        self.assertEqual(result.result_text, "42")
        self.assertIsNone(result.session_state)

    def test_execute_stream_refused_before_it_starts(self):
        with self.assertRaises(BadRequest) as cm:
            self.client.execute_stream("print(1)", profile="no-such-profile")
        self.assertEqual(cm.exception.status_code, 400)
        self.assertEqual(cm.exception.field, "profile")

    # --- interrupt --------------------------------------------------------------------

    def test_interrupt_a_sleeping_cell_keeps_state(self):
        s = self.new_session()
        s.execute("y = 7")
        self.assertFalse(s.interrupt())  # nothing runs
        worker = Worker(lambda: s.execute("import time\ntime.sleep(30)\ny = 0"))
        t0 = time.monotonic()
        worker.start()
        time.sleep(0.5)  # let the cell reach its sleep
        # interrupt() answers whether a cell ran: poll it (GET /v1/sessions/{id} would
        # race with the cell's start, see test_status_polls_do_not_make_a_cell_busy)
        while not s.interrupt():
            self.assertTrue(worker.is_alive(), worker.error)
            self.assertLess(time.monotonic() - t0, 15, "the cell did not start within 15 s")
            time.sleep(0.05)
        r = worker.result(timeout=20)
        self.assertLess(time.monotonic() - t0, 20)
        self.assertEqual(r.status, "interrupted", r)
        self.assertEqual(r.session_state, "kept")
        self.assertEqual(r.error["name"], "KeyboardInterrupt")
        self.assertEqual(s.execute("y").result_text, "7")

    def test_interrupt_a_streamed_cell(self):
        s = self.new_session()
        started = threading.Event()

        def run():
            events = []
            for event in s.stream("import time\nprint('started')\ntime.sleep(30)"):
                events.append(event)
                if event.name == "stdout":
                    started.set()
            return events

        worker = Worker(run)
        worker.start()
        self.assertTrue(started.wait(15), "no stdout event within 15 s")
        self.assertTrue(s.interrupt())
        events = worker.result(timeout=20)
        self.assertEqual(events[-1].data.status, "interrupted")
        self.assertEqual(s.execute("'alive'").result_text, "'alive'")

    # --- busy and gone ----------------------------------------------------------------

    def test_concurrent_execute_is_session_busy(self):
        s = self.new_session()
        started = threading.Event()

        def run():
            with s.stream("import time\nprint('started')\ntime.sleep(2)\n'slow'") as events:
                for event in events:
                    if event.name == "stdout":
                        started.set()
                return events.result

        worker = Worker(run)
        worker.start()
        self.assertTrue(started.wait(15), f"the cell did not start within 15 s ({worker.error!r})")
        with self.assertRaises(SessionBusy) as cm:
            s.execute("'fast'")
        self.assertEqual((cm.exception.status_code, cm.exception.code), (409, "session_busy"))
        with self.assertRaises(SessionBusy):
            s.stream("'fast'")
        with self.assertRaises(SessionBusy):
            s.upload("f.txt", b"x")
        self.assertEqual(s.info().state, "busy")
        self.assertEqual(worker.result(timeout=30).result_text, "'slow'")
        self.assertEqual(s.execute("'after'").result_text, "'after'")

    def test_status_polls_do_not_make_a_cell_busy(self):
        s = self.new_session()
        stop = threading.Event()

        def poll():
            while not stop.is_set():
                s.info()
                self.client.sessions()

        poller = Worker(poll)
        poller.start()
        try:
            for i in range(30):
                self.assertEqual(s.execute(f"{i} * 2").result_text, str(i * 2))
        finally:
            stop.set()
            poller.result(timeout=10)

    def test_session_gone_after_delete(self):
        s = self.new_session()
        s.execute("a = 1")
        s.delete()
        with self.assertRaises(SessionGone) as cm:
            s.execute("a")
        self.assertEqual(cm.exception.status_code, 410)
        with self.assertRaises(SessionGone):
            s.stream("a")
        with self.assertRaises(SessionGone):
            s.upload("x.txt", b"x")
        s.delete(missing_ok=True)  # no error
        self.assertNotIn(s.id, [x.id for x in self.client.sessions()])

    def test_context_manager_deletes_the_session(self):
        with self.client.create_session() as s:
            self.assertIsInstance(s, Session)
            s.execute("v = 1")
            self.assertIn(s.id, [x.id for x in self.client.sessions()])
        self.assertNotIn(s.id, [x.id for x in self.client.sessions()])
        with self.assertRaises((SessionGone, NotFound)):
            s.execute("v")

    def test_context_manager_deletes_on_exception(self):
        with self.assertRaises(RuntimeError):
            with self.client.create_session() as s:
                raise RuntimeError("boom")
        self.assertNotIn(s.id, [x.id for x in self.client.sessions()])

    def test_listing_and_get_session(self):
        a = self.new_session()
        b = self.new_session(profile="datascience")
        listed = {x.id: x for x in self.client.sessions()}
        self.assertIn(a.id, listed)
        self.assertEqual(listed[b.id].last_info.profile, "datascience")
        again = self.client.get_session(a.id)
        again.execute("shared = 'yes'")
        self.assertEqual(a.execute("shared").result_text, "'yes'")

    def test_unknown_session_is_not_found(self):
        with self.assertRaises(NotFound) as cm:
            self.client.get_session("0" * 32)
        self.assertEqual(cm.exception.status_code, 404)
        handle = Session(self.client._http, SessionInfo(id="f" * 32))  # an id the server never gave
        with self.assertRaises(NotFound):
            handle.execute("1")
        with self.assertRaises(NotFound):
            handle.download("x")

    # --- files ----------------------------------------------------------------------------

    def test_five_mb_binary_round_trip(self):
        s = self.new_session()
        data = os.urandom(5 * 1024 * 1024)
        entry = s.upload("data/random blob.bin", data)
        self.assertEqual(entry, WorkspaceFile("data/random blob.bin", len(data), False))
        self.assertEqual(s.download("data/random blob.bin"), data)
        # the cell sees the same bytes
        r = s.execute("import hashlib\n"
                      "hashlib.sha256(open('data/random blob.bin', 'rb').read()).hexdigest()")
        self.assertEqual(r.result_text, repr(hashlib.sha256(data).hexdigest()))
        files = {f.path: f for f in s.list_files()}
        self.assertEqual(files["data/random blob.bin"].size, len(data))
        self.assertFalse(files["data/random blob.bin"].directory)
        self.assertTrue(files["data"].directory)
        # a file object uploads too, and a file the code writes downloads
        with open(__file__, "rb") as f:
            s.upload("copy.py", f)
            f.seek(0)
            self.assertEqual(s.download("copy.py"), f.read())
        s.execute("open('out.bin', 'wb').write(bytes(range(256)) * 3)")
        self.assertEqual(s.download("out.bin"), bytes(range(256)) * 3)
        s.delete_file("data/random blob.bin")
        with self.assertRaises(NotFound):
            s.download("data/random blob.bin")

    def test_unicode_and_special_characters_in_paths(self):
        s = self.new_session()
        for path in ("caf\u00e9/na\u00efve #1?.txt", "100%.txt", "a+b=c&d.txt"):
            s.upload(path, path.encode())
            self.assertEqual(s.download(path), path.encode(), path)
        listed = {f.path for f in s.list_files()}
        self.assertIn("caf\u00e9/na\u00efve #1?.txt", listed)
        self.assertIn("100%.txt", listed)

    def test_bad_paths_raise_bad_request(self):
        s = self.new_session()
        for path in ("../escape.txt", "a/../../escape.txt", "/etc/passwd", "nul\0byte.txt"):
            with self.subTest(path=path):
                with self.assertRaises(BadRequest) as cm:
                    s.upload(path, b"x")
                self.assertEqual(cm.exception.status_code, 400)
                self.assertEqual(cm.exception.field, "path")
                with self.assertRaises(BadRequest):
                    s.download(path)
        with self.assertRaises(NotFound):
            s.download("missing.txt")
        with self.assertRaises(NotFound):
            s.delete_file("missing.txt")
        with self.assertRaises(TypeError):
            s.upload("text.txt", "not bytes")

    # --- the agent tool ----------------------------------------------------------------------

    def test_langchain_style_stateful_tool(self):
        require_modules("numpy")
        mod = load_example("langchain_tool")
        with mod.StatefulPythonSandboxTool(self.client) as tool:
            self.assertEqual(tool.name, "python_session")
            self.assertEqual(tool.args_schema["required"], ["code"])
            self.assertIn("[result] 1", tool.run("import numpy as np\ncounter = 1\ncounter"))
            self.assertIn("[result] 2", tool.run({"code": "counter += 1\ncounter"}))
            self.assertIn("ZeroDivisionError", tool.run(code="1/0"))
            self.assertIn("[result] 3", tool.run("counter + 1"))
            session_id = tool.session_id
            self.assertIn(session_id, [x.id for x in self.client.sessions()])
            # a lost session is replaced, and the model is told its state is gone
            out = tool.run("import os\nos._exit(1)")
            self.assertIn("session", out.lower())
            self.assertIn("NameError", tool.run("counter"))
            self.assertNotEqual(tool.session_id, session_id)
        self.assertNotIn(tool.session_id, [x.id for x in self.client.sessions()])


if __name__ == "__main__":
    unittest.main()
