"""hello, startup imports, --preload, exit codes, malformed frames, stdio flushing."""

import os
import select
import subprocess
import unittest

from tests.harness import LAUNCH, PYTHON, PYTHON_FLAGS, Runtime, of_type, reply


def _imported_modules(importtime_stderr):
    """Module names from `python3 -X importtime` output."""
    names = set()
    for line in importtime_stderr.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            name = line.split("|")[2].strip()
            if name != "imported package":
                names.add(name)
    return names


class HelloTest(unittest.TestCase):
    def test_hello_is_the_first_frame(self):
        rt = Runtime()
        self.addCleanup(rt.kill)
        frame = rt.recv()
        self.assertEqual(frame["type"], "hello")
        self.assertEqual(frame["protocol"], 2)
        self.assertRegex(frame["python"], r"^3\.\d+\.\d+$")
        self.assertEqual(frame["pid"], rt.proc.pid)
        self.assertEqual(rt.close_channel(), 0)

    def test_hello_path_imports_nothing_heavy(self):
        # Everything the runtime imports until it has sent hello and seen EOF.
        rt = Runtime(python_flags=("-X", "importtime"))
        self.addCleanup(rt.kill)
        rt.hello()
        self.assertEqual(rt.close_channel(), 0)
        imported = _imported_modules(rt.stderr)
        self.assertIn("kiln_runtime.protocol", imported)  # the parser works
        heavy = {"ast", "tokenize", "traceback", "linecache", "pandas", "numpy",
                 "matplotlib", "PIL", "kiln_runtime.display"}
        self.assertEqual(heavy & imported, set())

    def test_preload_waits_for_the_first_execute(self):
        rt = Runtime("--preload", "colorsys", python_flags=("-X", "importtime"))
        self.addCleanup(rt.kill)
        rt.hello()
        self.assertEqual(rt.close_channel(), 0)
        self.assertNotIn("colorsys", _imported_modules(rt.stderr))

    def test_preload_is_imported_on_the_first_execute(self):
        rt = Runtime("--preload", "colorsys,fractions")
        self.addCleanup(rt.kill)
        rt.hello()
        frames = rt.execute('import sys\n[m in sys.modules for m in ("colorsys", "fractions")]')
        self.assertEqual(of_type(frames, "execute_result")[0]["data"]["text/plain"],
                         "[True, True]")

    def test_preload_before_hello_is_imported_before_hello(self):
        # decimal's C half is a shared object: in the maps once imported, and
        # only a preload imports it before any cell.
        for early in (False, True):
            args = ("--preload", "decimal") + (("--preload-before-hello",) if early else ())
            rt = Runtime(*args)
            self.addCleanup(rt.kill)
            rt.hello()
            with open("/proc/%d/maps" % rt.proc.pid) as f:
                self.assertEqual("_decimal" in f.read(), early, args)
            self.assertEqual(rt.close_channel(), 0)

    def test_nothing_printed_before_hello_reaches_the_jobs_output(self):
        # `this` prints the Zen of Python on import; a missing module is reported once,
        # by the first execute, in its stderr.
        rt = Runtime("--preload", "this,no_such_module_for_kiln", "--preload-before-hello")
        self.addCleanup(rt.kill)
        rt.hello()
        self.assertEqual(reply(rt.execute("print('job')"))["status"], "ok")
        self.assertEqual(rt.shutdown(), 0)
        self.assertEqual(rt.stdout, "job\n")
        self.assertEqual(rt.stderr.count("--preload no_such_module_for_kiln failed"), 1, rt.stderr)

    def test_failing_preload_is_reported_not_fatal(self):
        rt = Runtime("--preload", "no_such_module_for_kiln")
        self.addCleanup(rt.kill)
        rt.hello()
        self.assertEqual(reply(rt.execute("1"))["status"], "ok")
        self.assertEqual(rt.shutdown(), 0)
        self.assertIn("--preload no_such_module_for_kiln failed: ModuleNotFoundError", rt.stderr)

    def test_without_a_channel_the_launcher_fails_cleanly(self):
        if not os.access(PYTHON, os.X_OK):
            self.skipTest("%s is not installed" % PYTHON)
        proc = subprocess.run([PYTHON, *PYTHON_FLAGS, LAUNCH], capture_output=True, text=True,
                              timeout=60)
        self.assertEqual(proc.returncode, 125)
        self.assertEqual(proc.stderr.count("\n"), 1, proc.stderr)
        self.assertIn("no runtime channel on fd 3", proc.stderr)

    def test_without_preload_nothing_is_imported(self):
        rt = Runtime()
        self.addCleanup(rt.kill)
        rt.hello()
        frames = rt.execute('import sys\n'
                            'sorted(m for m in ("colorsys", "pandas", "numpy", "matplotlib",'
                            ' "PIL") if m in sys.modules)')
        self.assertEqual(of_type(frames, "execute_result")[0]["data"]["text/plain"], "[]")


class ExitCodeTest(unittest.TestCase):
    def run_cells(self, cells, end="shutdown"):
        rt = Runtime()
        self.addCleanup(rt.kill)
        rt.hello()
        replies = [reply(rt.execute(code)) for code in cells]
        rc = rt.shutdown() if end == "shutdown" else rt.close_channel()
        return rc, replies, rt

    def test_no_cells(self):
        self.assertEqual(self.run_cells([], "shutdown")[0], 0)
        self.assertEqual(self.run_cells([], "eof")[0], 0)

    def test_ok_cell(self):
        rc, replies, _ = self.run_cells(["x = 1"], "eof")
        self.assertEqual((rc, replies[0]["status"], replies[0]["exit_code"]), (0, "ok", 0))

    def test_error_cell(self):
        for end in ("shutdown", "eof"):
            rc, replies, _ = self.run_cells(["1/0"], end)
            self.assertEqual((rc, replies[0]["status"], replies[0]["exit_code"]), (1, "error", 1))

    def test_policy_violation_cell(self):
        rt = Runtime()
        self.addCleanup(rt.kill)
        rt.hello()
        frames = rt.execute("import socket", policy={"mode": "denylist", "modules": ["socket"]})
        self.assertEqual(reply(frames)["status"], "policy_violation")
        self.assertEqual(rt.shutdown(), 1)

    def test_the_last_cell_decides(self):
        rc, replies, _ = self.run_cells(["1/0", "x = 2"])
        self.assertEqual([r["status"] for r in replies], ["error", "ok"])
        self.assertEqual(rc, 0)

    def test_sys_exit_code(self):
        rc, replies, _ = self.run_cells(["import sys\nsys.exit(3)"])
        self.assertEqual((replies[0]["status"], replies[0]["exit_code"]), ("exit", 3))
        self.assertEqual(rc, 3)

    def test_exit_builtin_and_bare_system_exit(self):
        rc, replies, _ = self.run_cells(["exit(5)"], "eof")
        self.assertEqual((replies[0]["status"], replies[0]["exit_code"], rc), ("exit", 5, 5))
        rc, replies, _ = self.run_cells(["raise SystemExit"])
        self.assertEqual((replies[0]["status"], replies[0]["exit_code"], rc), ("exit", 0, 0))

    def test_system_exit_with_a_message(self):
        rc, replies, rt = self.run_cells(["raise SystemExit('bye now')"])
        self.assertEqual((replies[0]["status"], replies[0]["exit_code"], rc), ("exit", 1, 1))
        self.assertIn("bye now\n", rt.stderr)
        self.assertNotIn("Traceback", rt.stderr)

    def test_exit_code_is_taken_modulo_256(self):
        rc, replies, _ = self.run_cells(["raise SystemExit(256 + 7)"])
        self.assertEqual((replies[0]["exit_code"], rc), (7, 7))

    def test_exit_produces_no_error_frame(self):
        rt = Runtime()
        self.addCleanup(rt.kill)
        rt.hello()
        frames = rt.execute("print('a')\nraise SystemExit(2)\nprint('b')")
        self.assertEqual([f["type"] for f in frames], ["execute_reply"])
        self.assertEqual(rt.shutdown(), 2)
        self.assertEqual(rt.stdout, "a\n")


class MalformedFrameTest(unittest.TestCase):
    def expect_fatal(self, send):
        rt = Runtime()
        self.addCleanup(rt.kill)
        rt.hello()
        send(rt)
        rc = rt.finish()
        self.assertEqual(rc, 125)
        self.assertNotIn("Traceback", rt.stderr)
        lines = rt.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, rt.stderr)
        self.assertIn("protocol error", lines[0])
        return lines[0]

    def test_not_json(self):
        self.expect_fatal(lambda rt: rt.send_raw(b"this is not json"))

    def test_not_utf8(self):
        self.expect_fatal(lambda rt: rt.send_raw(b'{"type": "\xff"}'))

    def test_not_an_object(self):
        self.expect_fatal(lambda rt: rt.send_raw(b"[1, 2]"))

    def test_no_type(self):
        self.expect_fatal(lambda rt: rt.send_raw(b'{"cell": 1}'))

    def test_unknown_type(self):
        self.expect_fatal(lambda rt: rt.send({"type": "launch_missiles"}))

    def test_wrong_member_type(self):
        line = self.expect_fatal(lambda rt: rt.send({"type": "execute", "cell": "1", "code": "1"}))
        self.assertIn("cell", line)
        self.expect_fatal(lambda rt: rt.send({"type": "execute", "cell": 1, "code": "1",
                                              "import_policy": {"mode": "sometimes"}}))
        self.expect_fatal(lambda rt: rt.send({"type": "execute", "cell": 1, "code": "1",
                                              "limits": {"max_images": -1}}))

    def test_oversized_length(self):
        line = self.expect_fatal(lambda rt: rt.send_raw(b"", length=(256 << 20) + 1))
        self.assertIn("limit", line)

    def test_eof_inside_a_frame(self):
        def send(rt):
            rt.send_raw(b'{"type"', length=100)
            rt.sock.shutdown(2)
        line = self.expect_fatal(send)
        self.assertIn("EOF", line)


class FlushTest(unittest.TestCase):
    def read_pipe_now(self, pipe):
        ready, _, _ = select.select([pipe], [], [], 5)
        return os.read(pipe.fileno(), 4096).decode() if ready else ""

    def test_stdio_is_flushed_before_the_reply(self):
        rt = Runtime()
        self.addCleanup(rt.kill)
        rt.hello()
        # No newline: only an explicit flush gets these into the pipes.
        rt.execute("import sys\nprint('partial', end='')\nsys.stderr.write('err-partial')")
        self.assertEqual(self.read_pipe_now(rt.proc.stdout), "partial")
        self.assertEqual(self.read_pipe_now(rt.proc.stderr), "err-partial")

    def test_stdout_is_flushed_before_a_display_frame(self):
        rt = Runtime()
        self.addCleanup(rt.kill)
        rt.hello()
        rt.send({"type": "execute", "cell": 1, "filename": "<cell>",
                 "code": "print('before', end='')\ndisplay(1)\nimport time\ntime.sleep(1)"})
        frame = rt.recv()
        self.assertEqual(frame["type"], "display_data")
        # The cell is still sleeping: only the flush before the frame can explain this.
        self.assertEqual(self.read_pipe_now(rt.proc.stdout), "before")

    def test_stdout_is_line_buffered(self):
        rt = Runtime()
        self.addCleanup(rt.kill)
        rt.hello()
        # The cell waits for a file the test creates only once it has seen the line.
        rt.send({"type": "execute", "cell": 1, "filename": "<cell>",
                 "code": "import os, time\nprint('early')\n"
                         "for _ in range(500):\n"
                         "    if os.path.exists('go'):\n        break\n    time.sleep(0.01)\n"
                         "'done'"})
        early = self.read_pipe_now(rt.proc.stdout)
        open(os.path.join(rt.workspace, "go"), "w").close()
        self.assertEqual(early, "early\n")
        self.assertEqual(rt.recv()["data"]["text/plain"], "'done'")

    def test_child_processes_do_not_inherit_the_channel(self):
        rt = Runtime()
        self.addCleanup(rt.kill)
        rt.hello()
        probe = ("import os\ntry:\n    os.fstat(3)\n    print('open')\n"
                 "except OSError:\n    print('closed')")
        frames = rt.execute("import subprocess, sys\n"
                            "subprocess.run([sys.executable, '-c', %r], close_fds=False,"
                            " capture_output=True, text=True).stdout" % probe)
        self.assertEqual(of_type(frames, "execute_result")[0]["data"]["text/plain"],
                         repr("closed\n"))

if __name__ == "__main__":
    unittest.main()


class ExitingFrameTest(unittest.TestCase):
    """After shutdown: `exiting` with the exit code, once threads and atexit are done."""

    def test_exiting_comes_last_with_the_exit_code(self):
        rt = Runtime()
        self.addCleanup(rt.kill)
        rt.hello()
        code = ("import atexit, threading, time\n"
                "atexit.register(lambda: print('atexit ran', flush=True))\n"
                "def late():\n    time.sleep(0.3)\n    print('thread done', flush=True)\n"
                "threading.Thread(target=late).start()\n"
                "raise SystemExit(3)\n")
        self.assertEqual(reply(rt.execute(code))["status"], "exit")
        rt.send({"type": "shutdown"})
        frame = rt.recv()
        self.assertEqual(frame, {"type": "exiting", "exit_code": 3})
        self.assertEqual(rt.finish(), 3)
        # Everything the program printed on its way out came before the frame.
        self.assertIn("thread done", rt.stdout)
        self.assertIn("atexit ran", rt.stdout)
