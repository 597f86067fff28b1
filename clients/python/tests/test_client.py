"""kiln_client against a real `kiln serve` (started once for the class)."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # kiln_server, with -t too

import importlib.util  # noqa: E402
import unittest  # noqa: E402

from kiln_client import PNG_SIGNATURE, ExecutionResult, KilnClient, KilnError

from kiln_server import KilnServer, find_kiln, require_modules

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples")


def load_example(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(EXAMPLES, name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class ClientAgainstServer(unittest.TestCase):
    server: KilnServer
    client: KilnClient

    @classmethod
    def setUpClass(cls):
        cls.server = KilnServer(find_kiln())
        cls.client = KilnClient(cls.server.url, api_key=cls.server.key, timeout=120, retries=3)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_health_and_ready(self):
        self.assertEqual(self.client.health(), {"status": "ok"})
        self.assertTrue(self.client.ready(), self.client.readiness())

    def test_ok_with_stdout(self):
        r = self.client.execute("print('hello from kiln')")
        self.assertIsInstance(r, ExecutionResult)
        self.assertTrue(r.ok, r)
        self.assertEqual(r.status, "ok")
        self.assertEqual(r.exit_code, 0)
        self.assertEqual(r.stdout, "hello from kiln\n")
        self.assertTrue(r.id)
        self.assertIsNone(r.error)
        self.assertIn("hello from kiln", r.text())

    def test_last_value_in_result_text(self):
        r = self.client.execute("x = 6\nx * 7")
        self.assertTrue(r.ok, r)
        self.assertEqual(r.result_text, "42")
        self.assertIn("42", r.text())

    def test_exception_is_status_error(self):
        r = self.client.execute("def f():\n    return 1 / 0\nf()")
        self.assertEqual(r.status, "error", r)
        self.assertFalse(r.ok)
        self.assertEqual(r.exit_code, 1)
        self.assertEqual(r.error["name"], "ZeroDivisionError")
        self.assertIn("division by zero", r.error["value"])
        text = r.text()
        self.assertIn("ZeroDivisionError", text)
        self.assertEqual(text.count("ZeroDivisionError: division by zero"), 1, text)

    def test_matplotlib_plot_is_one_png(self):
        require_modules("matplotlib")
        r = self.client.execute("import matplotlib.pyplot as plt\n"
                                "plt.plot([1, 2, 3], [1, 4, 9])\n"
                                "plt.show()\n")
        self.assertTrue(r.ok, r.text())
        self.assertEqual(len(r.images), 1, r.outputs)
        self.assertTrue(r.images[0].startswith(PNG_SIGNATURE))
        self.assertIn("1 PNG image", r.text())

    def test_files_in_and_out_round_trip_bytes(self):
        data = os.urandom(64 * 1024)
        r = self.client.execute(
            "import pathlib\n"
            "b = pathlib.Path('in/data.bin').read_bytes()\n"
            "pathlib.Path('out.bin').write_bytes(b[::-1])\n"
            "print(len(b), open('note.txt').read())\n",
            files={"in/data.bin": data, "note.txt": "h\u00e9llo"},
            return_files=["out.*"])
        self.assertTrue(r.ok, r.text())
        self.assertEqual(r.stdout, "65536 h\u00e9llo\n")
        self.assertEqual(set(r.files), {"out.bin"})
        self.assertEqual(r.files["out.bin"], data[::-1])
        r = self.client.execute("open('x.bin', 'wb').write(bytes(range(256)))",
                                files={"in/data.bin": data}, return_files=True)
        self.assertEqual(r.files.get("x.bin"), bytes(range(256)))
        self.assertEqual(r.files.get("in/data.bin"), data)

    def test_bad_key_is_401(self):
        bad = KilnClient(self.server.url, api_key="kiln_not_a_key")
        with self.assertRaises(KilnError) as cm:
            bad.execute("print(1)")
        self.assertEqual(cm.exception.status_code, 401)
        self.assertEqual(cm.exception.code, "unauthenticated")

    def test_bad_file_path_is_400_with_field(self):
        with self.assertRaises(KilnError) as cm:
            self.client.execute("print(1)", files={"ok.txt": "a", "../escape.txt": "b"})
        e = cm.exception
        self.assertEqual(e.status_code, 400)
        self.assertEqual(e.field, "files[1].path")
        self.assertTrue(e.message)

    def test_reference_execute(self):
        body = self.client.reference_execute("print('ref')", input_files={"a.txt": "x"})
        self.assertEqual(body["stdout"], "ref\n")
        self.assertEqual(body["exit_code"], 0)
        self.assertIsNone(body["output_files"])
        self.assertIn("task_id", body)

    def test_langchain_style_tool(self):
        require_modules("numpy")
        mod = load_example("langchain_tool")
        tool = mod.PythonSandboxTool(self.client)
        self.assertEqual(tool.name, "python_sandbox")
        self.assertEqual(tool.args_schema["required"], ["code"])
        out = tool.run("import numpy as np\nprint(int(np.arange(10).sum()))")
        self.assertIn("45", out)
        self.assertIn("ZeroDivisionError", tool.run({"code": "1/0"}))


if __name__ == "__main__":
    unittest.main()
