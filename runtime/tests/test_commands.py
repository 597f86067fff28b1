"""Commands, code contexts and a cell's environment (docs/protocol.md, "execute")."""

import os
import signal
import tempfile
import threading
import time
import unittest

from tests.harness import RuntimeTestCase, of_type, reply


def result_text(frames):
    results = of_type(frames, "execute_result")
    return results[0]["data"]["text/plain"] if results else None


def bash(script, cwd=None, env=None):
    return {"argv": ["/bin/bash", "-c", script], "cwd": cwd, "env": env or {}}


@unittest.skipUnless(os.access("/bin/bash", os.X_OK), "/bin/bash is not installed")
class CommandTest(RuntimeTestCase):
    def test_exit_code_and_both_streams(self):
        frames = self.rt.execute("", command=bash("echo out; echo err >&2; exit 3"))
        self.assertEqual([f["type"] for f in frames], ["command_started", "execute_reply"])
        self.assertIsInstance(frames[0]["pid"], int)
        self.assertEqual(frames[0]["cell"], 1)
        r = reply(frames)
        self.assertEqual((r["status"], r["exit_code"], r["execution_count"]), ("command", 3, None))
        # A command's exit code is not the program's: the runtime still exits 0.
        self.assertEqual(self.rt.shutdown(), 0)
        self.assertEqual(self.rt.stdout, "out\n")
        self.assertEqual(self.rt.stderr, "err\n")

    def test_runs_in_the_workspace_and_sees_the_cells_files_and_env(self):
        self.rt.execute("open('made.txt', 'w').write('by a cell')")
        frames = self.rt.execute("", command=bash("cat made.txt; printf ' %s %s' \"$A\" \"$B\"",
                                                   env={"A": "1"}), env={"B": "2"})
        self.assertEqual(reply(frames)["exit_code"], 0)
        self.rt.shutdown()
        self.assertEqual(self.rt.stdout, "by a cell 1 2")

    def test_cwd_and_a_signal(self):
        frames = self.rt.execute("", command=bash("pwd; kill -TERM $$", cwd="/"))
        self.assertEqual(reply(frames)["exit_code"], 128 + signal.SIGTERM)
        self.rt.shutdown()
        self.assertEqual(self.rt.stdout, "/\n")

    def test_does_not_count_as_a_cell(self):
        self.rt.execute("1")
        self.rt.execute("", command=bash("true"))
        self.assertEqual(reply(self.rt.execute("2"))["execution_count"], 2)

    def test_a_command_that_cannot_start_is_an_error(self):
        frames = self.rt.execute("", command={"argv": ["/nonexistent/program"]})
        self.assertEqual(of_type(frames, "error")[0]["ename"], "FileNotFoundError")
        self.assertEqual(reply(frames)["status"], "error")
        frames = self.rt.execute("", command=bash("true", cwd="/nonexistent"))
        self.assertEqual(reply(frames)["status"], "error")
        self.assertEqual(reply(self.rt.execute("'alive'"))["status"], "ok")

    def test_interrupt_kills_the_command_and_its_children(self):
        started = threading.Event()

        def interrupt():
            started.wait(10)
            time.sleep(0.2)
            self.rt.proc.send_signal(signal.SIGINT)

        t = threading.Thread(target=interrupt)
        t.start()
        self.rt.send({"type": "execute", "cell": 1, "code": "",
                      "command": bash("sleep 60 & sleep 60; echo not reached")})
        first = self.rt.recv()
        self.assertEqual(first["type"], "command_started")
        started.set()
        frames = [self.rt.recv(), self.rt.recv()]
        t.join()
        self.assertEqual(frames[0]["ename"], "KeyboardInterrupt")
        self.assertEqual(reply(frames)["status"], "error")
        # The whole group was killed (the background sleep too): once its
        # orphans are reaped, no process of it is left.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.killpg(first["pid"], 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        else:
            self.fail("the command's process group is still there")
        self.assertEqual(reply(self.rt.execute("'alive'", cell=2))["status"], "ok")

    def test_malformed_commands_end_the_runtime(self):
        for bad in ({"argv": []}, {"argv": "ls"}, {"argv": ["ls"], "env": {"A": 1}},
                    {"argv": ["ls"], "cwd": 3}, {"argv": ["a\0b"]}, "ls"):
            with self.subTest(command=bad):
                rt = type(self.rt)()
                self.addCleanup(rt.kill)
                rt.hello()
                rt.send({"type": "execute", "cell": 1, "code": "", "command": bad})
                self.assertEqual(rt.finish(), 125)
                self.assertIn("execute.command", rt.stderr)


class CwdTest(RuntimeTestCase):
    def test_the_first_cell_with_a_cwd_moves_there_and_later_chdirs_last(self):
        here = tempfile.mkdtemp()
        self.addCleanup(os.rmdir, here)
        frames = self.rt.execute("import os\nos.getcwd()", cwd=here)
        self.assertEqual(result_text(frames), repr(here))
        # The cell's own chdir lasts: the cwd is the session's start only.
        self.rt.execute("os.chdir('/')", cwd=here)
        self.assertEqual(result_text(self.rt.execute("os.getcwd()", cwd=here)), "'/'")

    def test_a_missing_cwd_is_the_cells_error_and_the_runtime_goes_on(self):
        frames = self.rt.execute("1", cwd="/nonexistent/dir")
        self.assertEqual(of_type(frames, "error")[0]["ename"], "FileNotFoundError")
        self.assertEqual(reply(frames)["status"], "error")
        self.assertEqual(reply(self.rt.execute("'alive'"))["status"], "ok")

    def test_a_relative_cwd_ends_the_runtime(self):
        self.rt.send({"type": "execute", "cell": 1, "code": "", "cwd": "relative"})
        self.assertEqual(self.rt.finish(), 125)
        self.assertIn("execute.cwd", self.rt.stderr)


class ContextTest(RuntimeTestCase):
    def test_contexts_keep_separate_state_and_counts(self):
        self.rt.execute("x = 'default'")
        self.rt.execute("x = 'other'", context="c1")
        self.assertEqual(result_text(self.rt.execute("x")), "'default'")
        self.assertEqual(result_text(self.rt.execute("x", context="c1")), "'other'")
        frames = self.rt.execute("x", context="c2")
        self.assertEqual(of_type(frames, "error")[0]["ename"], "NameError")
        self.assertEqual(reply(frames)["execution_count"], 1)
        self.assertEqual(reply(self.rt.execute("1", context="c1"))["execution_count"], 3)
        self.assertEqual(reply(self.rt.execute("1"))["execution_count"], 3)

    def test_reset_empties_one_context_only(self):
        self.rt.execute("x = 1")
        self.rt.execute("y = 2", context="c1")
        frames = self.rt.execute("'y' in dir()", context="c1", reset_contexts=["c1"])
        self.assertEqual(result_text(frames), "False")
        self.assertEqual(reply(frames)["execution_count"], 1)
        self.assertEqual(result_text(self.rt.execute("x")), "1")
        # The default context too: emptied in place, still __main__.
        frames = self.rt.execute("import sys\n'x' in dir(), sys.modules['__main__'].__dict__ is "
                                 "globals()", reset_contexts=["default"])
        self.assertEqual(result_text(frames), "(False, True)")

    def test_the_policy_covers_every_context(self):
        policy = {"mode": "denylist", "modules": ["socket"]}
        for context in ("c1", "default", "c2"):
            with self.subTest(context=context):
                frames = self.rt.execute("import socket", policy=policy, context=context)
                self.assertEqual(reply(frames)["status"], "policy_violation")


class CellEnvTest(RuntimeTestCase):
    def test_env_is_set_for_the_cell_and_restored(self):
        code = "import os, subprocess\n(os.environ.get('K'), os.environ['LANG'], " \
               "subprocess.run(['/bin/sh', '-c', 'printf %s \"$K\"'], capture_output=True)" \
               ".stdout.decode())"
        frames = self.rt.execute(code, env={"K": "v", "LANG": "C"})
        self.assertEqual(result_text(frames), "('v', 'C', 'v')")
        frames = self.rt.execute(code)
        self.assertEqual(result_text(frames), "(None, 'C.UTF-8', '')")

    def test_restored_after_an_error(self):
        self.rt.execute("raise ValueError", env={"K": "v"})
        self.assertEqual(result_text(self.rt.execute("import os\nos.environ.get('K')")), None)


if __name__ == "__main__":
    unittest.main()
