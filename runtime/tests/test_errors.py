"""error frames: tracebacks from the user's code, SyntaxError before anything runs."""

import unittest

from tests.harness import RuntimeTestCase, of_type, reply

RUNTIME_MARKERS = ("kiln_runtime", "runner.py", "launch.py", "tracebacks.py", "policy.py")


class TracebackTest(RuntimeTestCase):
    def error_of(self, frames):
        errors = of_type(frames, "error")
        self.assertEqual(len(errors), 1, frames)
        self.assertEqual(reply(frames)["status"], "error")
        self.assertEqual(reply(frames)["exit_code"], 1)
        tb = errors[0]["traceback"]
        self.assertTrue(all(isinstance(entry, str) for entry in tb))
        for entry in tb:
            for marker in RUNTIME_MARKERS:
                self.assertNotIn(marker, entry)
            self.assertNotIn("\x1b[", entry)  # plain text
        return errors[0]

    def test_traceback_starts_at_the_users_line(self):
        err = self.error_of(self.rt.execute("x = 1\ny = 2\n1/0"))
        self.assertEqual((err["ename"], err["evalue"]), ("ZeroDivisionError", "division by zero"))
        tb = err["traceback"]
        self.assertEqual(tb[0], "Traceback (most recent call last):")
        self.assertTrue(tb[1].startswith('  File "<cell>", line 3, in <module>\n    1/0'), tb[1])
        self.assertEqual(tb[-1], "ZeroDivisionError: division by zero")
        self.assertEqual(len(tb), 3)

    def test_error_in_the_last_expression(self):
        err = self.error_of(self.rt.execute("d = {}\nd['missing']"))
        self.assertEqual(err["ename"], "KeyError")
        self.assertIn('line 2, in <module>', err["traceback"][1])

    def test_functions_from_earlier_cells_show_their_own_lines(self):
        self.rt.execute("def g():\n    x = 1\n    raise ValueError('bad')")
        err = self.error_of(self.rt.execute("y = 0\ng()"))
        tb = err["traceback"]
        self.assertEqual(tb[1], '  File "<cell>", line 2, in <module>\n    g()')
        self.assertTrue(tb[2].startswith(
            '  File "<cell>", line 3, in g\n    raise ValueError(\'bad\')'), tb[2])
        self.assertEqual(tb[-1], "ValueError: bad")

    def test_library_frames_are_kept(self):
        err = self.error_of(self.rt.execute("import json\njson.loads('{')"))
        self.assertEqual(err["ename"], "JSONDecodeError")
        self.assertIn('File "<cell>", line 2', err["traceback"][1])
        self.assertTrue(any("json" in e and "decoder.py" in e for e in err["traceback"][2:]))

    def test_chained_exceptions(self):
        err = self.error_of(self.rt.execute(
            "try:\n    1/0\nexcept Exception as e:\n    raise KeyError('k') from e"))
        text = "\n".join(err["traceback"])
        self.assertIn("ZeroDivisionError: division by zero", text)
        self.assertIn("direct cause", text)
        self.assertIn('line 4, in <module>', text)
        self.assertEqual(err["traceback"][-1], "KeyError: 'k'")

    def test_keyboard_interrupt_is_an_error(self):
        err = self.error_of(self.rt.execute("raise KeyboardInterrupt"))
        self.assertEqual(err["ename"], "KeyboardInterrupt")

    def test_error_in_repr_of_the_result(self):
        err = self.error_of(self.rt.execute(
            "class Bad:\n    def __repr__(self):\n        raise RuntimeError('no repr')\nBad()"))
        self.assertEqual(err["ename"], "RuntimeError")
        self.assertIn('line 3, in __repr__', "\n".join(err["traceback"]))

    def test_output_before_the_error_is_kept(self):
        frames = self.rt.execute("print('before')\nraise ValueError('x')")
        self.error_of(frames)
        self.assertEqual(self.rt.shutdown(), 1)
        self.assertEqual(self.rt.stdout, "before\n")

    def test_script_filename_in_the_traceback(self):
        err = self.error_of(self.rt.execute("\n\nundefined_name", filename="script.py"))
        self.assertEqual(err["ename"], "NameError")
        self.assertTrue(err["traceback"][1].startswith('  File "script.py", line 3, in <module>'))


class SyntaxErrorTest(RuntimeTestCase):
    def syntax_error(self, code):
        frames = self.rt.execute(code)
        self.assertEqual([f["type"] for f in frames], ["error", "execute_reply"])
        self.assertEqual(reply(frames)["status"], "error")
        return frames[0]

    def test_nothing_runs(self):
        err = self.syntax_error("print('before')\nx = (1,\n")
        self.assertEqual(err["ename"], "SyntaxError")
        self.assertEqual(self.rt.shutdown(), 1)
        self.assertEqual(self.rt.stdout, "")

    def test_line_and_caret(self):
        err = self.syntax_error("a = 1\nb = 2 +* 3\n")
        tb = err["traceback"]
        self.assertIn('File "<cell>", line 2', tb[0])
        self.assertIn("b = 2 +* 3", tb[1])
        self.assertTrue(tb[2].strip().startswith("^"), tb)
        self.assertTrue(tb[-1].startswith("SyntaxError: "), tb)
        for entry in tb:
            self.assertNotIn("kiln_runtime", entry)

    def test_compile_stage_errors_also_run_nothing(self):
        # 'return' outside a function is found by the compiler, not the parser.
        err = self.syntax_error("print('before')\nreturn 5")
        self.assertEqual(err["ename"], "SyntaxError")
        self.assertIn("'return' outside function", err["evalue"])
        self.assertEqual(self.rt.shutdown(), 1)
        self.assertEqual(self.rt.stdout, "")

    def test_indentation_error(self):
        err = self.syntax_error("if True:\nprint('x')")
        self.assertEqual(err["ename"], "IndentationError")


if __name__ == "__main__":
    unittest.main()
