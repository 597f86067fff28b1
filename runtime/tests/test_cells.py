"""Cell semantics: the last value, ';', None, state, execution_count, the namespace."""

import os
import unittest

from tests.harness import RuntimeTestCase, of_type, reply


def result_text(frames):
    results = of_type(frames, "execute_result")
    return results[0]["data"]["text/plain"] if results else None


class LastValueTest(RuntimeTestCase):
    def test_last_expression_is_the_result(self):
        frames = self.rt.execute("x = 40\nx + 2")
        self.assertEqual([f["type"] for f in frames], ["execute_result", "execute_reply"])
        result = frames[0]
        self.assertEqual(result["data"], {"text/plain": "42"})
        self.assertEqual(result["cell"], 1)
        self.assertEqual(result["execution_count"], reply(frames)["execution_count"])

    def test_text_plain_is_the_repr(self):
        self.assertEqual(result_text(self.rt.execute("'ab' * 2")), "'abab'")

    def test_multiline_last_expression(self):
        self.assertEqual(result_text(self.rt.execute("y = 1\n(y +\n 2)")), "3")

    def test_semicolon_suppresses(self):
        for code in ("1 + 1;", "1 + 1 ;  # a comment", "x = 3\nx;\n\n", "print('ran');"):
            with self.subTest(code=code):
                frames = self.rt.execute(code)
                self.assertEqual(of_type(frames, "execute_result"), [])
                self.assertEqual(reply(frames)["status"], "ok")

    def test_semicolon_only_counts_as_the_last_token(self):
        for code, shown in (("1 + 1  # ;", "2"), ("'x;'", "'x;'"), ("z = 1; z", "1"),
                            ('"""a;\n;"""', "'a;\\n;'")):
            with self.subTest(code=code):
                self.assertEqual(result_text(self.rt.execute(code)), shown)

    def test_suppressed_expression_still_runs(self):
        self.rt.execute("hits = []\nhits.append(1);")
        self.assertEqual(result_text(self.rt.execute("hits")), "[1]")

    def test_none_is_not_shown(self):
        for code in ("None", "print('p')", "[].append(1)", "x = 5", "def f():\n    return 1"):
            with self.subTest(code=code):
                self.assertEqual(of_type(self.rt.execute(code), "execute_result"), [])

    def test_underscore_is_the_last_value(self):
        self.rt.execute("'first'")
        self.assertEqual(result_text(self.rt.execute("_ * 2")), "'firstfirst'")


class StateTest(RuntimeTestCase):
    def test_state_persists_across_cells(self):
        self.rt.execute("a = 20")
        self.rt.execute("def f():\n    return a + 1")
        self.assertEqual(result_text(self.rt.execute("f()")), "21")

    def test_execution_count_increments_on_every_request(self):
        counts = []
        for code in ("1", "1/0", "x = (", "2"):
            counts.append(reply(self.rt.execute(code))["execution_count"])
        self.assertEqual(counts, [1, 2, 3, 4])

    def test_reply_names_the_requested_cell(self):
        frames = self.rt.execute("7", cell=41)
        self.assertEqual([f["cell"] for f in frames], [41, 41])

    def test_main_namespace(self):
        self.assertEqual(result_text(self.rt.execute("__name__")), "'__main__'")
        self.assertEqual(result_text(self.rt.execute(
            "import sys\nsys.modules['__main__'].__dict__ is globals()")), "True")

    def test_classes_pickle_through_main(self):
        frames = self.rt.execute("import pickle\nclass P:\n    pass\n"
                                 "type(pickle.loads(pickle.dumps(P()))).__name__")
        self.assertEqual(result_text(frames), "'P'")

    def test_future_import_persists(self):
        self.rt.execute("from __future__ import annotations")
        frames = self.rt.execute("def f(x: not_defined_anywhere):\n    pass\n"
                                 "f.__annotations__['x']")
        self.assertEqual(result_text(frames), "'not_defined_anywhere'")

    def test_script_filename_sets_file_and_argv(self):
        frames = self.rt.execute("import sys\n(__file__, sys.argv[0])", filename="script.py")
        expected = repr((os.path.join(self.rt.workspace, "script.py"), "script.py"))
        self.assertEqual(result_text(frames), expected)


class WorkspaceTest(RuntimeTestCase):
    def test_workspace_is_first_on_sys_path_and_importable(self):
        with open(os.path.join(self.rt.workspace, "mymod.py"), "w") as f:
            f.write("VALUE = 'from the workspace'\n")
        frames = self.rt.execute("import sys, mymod\n(sys.path[0], mymod.VALUE)")
        self.assertEqual(result_text(frames), repr((self.rt.workspace, "from the workspace")))

    def test_workspace_modules_do_not_shadow_the_runtimes_imports(self):
        for name in ("ast", "tokenize", "traceback", "linecache", "types", "__future__", "re",
                     "enum", "json", "functools", "collections", "contextlib", "importlib"):
            with open(os.path.join(self.rt.workspace, name + ".py"), "w") as f:
                f.write("raise RuntimeError('shadowed')\n")
        self.assertEqual(result_text(self.rt.execute("1 + 1")), "2")
        frames = self.rt.execute("1/0")
        err = of_type(frames, "error")[0]
        self.assertEqual(err["ename"], "ZeroDivisionError")
        # A complete traceback: the runtime's late imports came from the standard library.
        self.assertEqual(err["traceback"][0], "Traceback (most recent call last):")
        self.assertEqual(err["traceback"][-1], "ZeroDivisionError: division by zero")

    def test_runtime_root_follows_the_workspace(self):
        frames = self.rt.execute("import sys, kiln_runtime, os\n"
                                 "os.path.dirname(os.path.dirname(kiln_runtime.__file__))"
                                 " == sys.path[1]")
        self.assertEqual(result_text(frames), "True")


if __name__ == "__main__":
    unittest.main()


class StreamOrderTest(RuntimeTestCase):
    def test_switching_streams_syncs_with_the_supervisor(self):
        # stdout -> stderr -> stdout: two switches, each a sync round trip, so
        # the supervisor has read both pipes up to each switch.
        before = self.rt.syncs
        frames = self.rt.execute("import sys\nprint('a')\nprint('b', file=sys.stderr)\nprint('c')")
        self.assertEqual(reply(frames)["status"], "ok")
        self.assertEqual(self.rt.syncs - before, 2)

    def test_one_stream_needs_no_sync(self):
        before = self.rt.syncs
        frames = self.rt.execute("for i in range(100):\n    print(i)")
        self.assertEqual(reply(frames)["status"], "ok")
        self.assertEqual(self.rt.syncs - before, 0)

    def test_streams_keep_their_file_api(self):
        frames = self.rt.execute(
            "import sys\nprint(sys.stdout.fileno(), sys.stderr.fileno(), sys.stdout.isatty())\n"
            "sys.stdout.buffer.write(b'raw\\n')")
        self.assertEqual(reply(frames)["status"], "ok")
