"""The import policy: the static check (in process) and the run-time hook (in the runtime)."""

import ast
import os
import unittest

from kiln_runtime import policy as kp
from tests.harness import STRICT, RuntimeTestCase, of_type, reply, requires

DENY_OS = {"mode": "denylist", "modules": ["os"]}


def static(code, mode="denylist", modules=kp.STRICT_DENYLIST):
    return kp.check_tree(ast.parse(code), kp.Policy(mode, modules))


class MatchingTest(unittest.TestCase):
    def test_entries_match_dotted_submodules(self):
        deny = kp.Policy("denylist", ["os"])
        self.assertIsNotNone(deny.refusal("os"))
        self.assertIsNotNone(deny.refusal("os.path"))
        self.assertIsNone(deny.refusal("osx"))
        self.assertIsNone(deny.refusal("posixpath"))
        allow = kp.Policy("allowlist", ["numpy"])
        self.assertIsNone(allow.refusal("numpy"))
        self.assertIsNone(allow.refusal("numpy.linalg"))
        self.assertIsNotNone(allow.refusal("numpyx"))
        self.assertIsNotNone(allow.refusal("pandas"))

    def test_future_is_always_allowed(self):
        self.assertIsNone(kp.Policy("allowlist", []).refusal("__future__"))

    def test_open_allows_everything(self):
        self.assertIsNone(kp.OPEN.check_import("os"))
        self.assertIsNone(static("import os", "open", []))

    def test_from_request(self):
        self.assertIs(kp.Policy.from_request(None), kp.OPEN)
        self.assertIs(kp.Policy.from_request({"mode": "open", "modules": ["os"]}), kp.OPEN)
        pol = kp.Policy.from_request({"mode": "allowlist", "modules": ["math"]})
        self.assertEqual((pol.mode, pol.modules), ("allowlist", ("math",)))
        for bad in ([], {"mode": "strict"}, {"mode": "denylist", "modules": "os"},
                    {"mode": "denylist", "modules": [1]}, {"mode": 1}):
            with self.subTest(bad=bad):
                with self.assertRaises(ValueError):
                    kp.Policy.from_request(bad)

    def test_strict_denylist(self):
        self.assertEqual(kp.STRICT_DENYLIST, ("os", "subprocess", "socket", "sys", "ctypes",
                                              "importlib", "pkgutil", "shutil"))


class StaticCheckTest(unittest.TestCase):
    def test_import_forms(self):
        cases = {
            "import os": ("os", 1),
            "x = 1\nimport os as o": ("os", 2),
            "from os import path": ("os", 1),
            "from os.path import join": ("os.path", 1),
            "import os.path": ("os.path", 1),
            "import json, socket": ("socket", 1),
            "def f():\n    import subprocess": ("subprocess", 2),
            "__import__('os')": ("os", 1),
            "import builtins\nbuiltins.__import__('ctypes')": ("ctypes", 2),
            "m = __import__(name='shutil')": ("shutil", 1),
        }
        for code, (module, line) in cases.items():
            with self.subTest(code=code):
                self.assertEqual(static(code)[:2], (module, line))

    def test_import_module_literal(self):
        self.assertEqual(static("import importlib\nimportlib.import_module('os')",
                                modules=["os"])[:2], ("os", 2))
        self.assertEqual(static("from importlib import import_module as im\n"
                                "import_module('os.path')", modules=["os"])[:2], ("os.path", 2))

    def test_first_violation_in_source_order(self):
        self.assertEqual(static("import json\nimport sys\nimport os")[:2], ("sys", 2))

    def test_message_names_module_and_entry(self):
        module, line, message = static("import os.path")
        self.assertIn("'os.path'", message)
        self.assertIn("'os'", message)

    def test_not_flagged(self):
        for code in ("import json", "from . import os", "from .os import x",
                     "__import__('os', globals(), None, (), 1)", "__import__(name)",
                     "import importlib\nimportlib.import_module('.sub', 'pkg')",
                     "from __future__ import annotations", "print('import os')"):
            with self.subTest(code=code):
                self.assertIsNone(static(code, modules=["os"]))

    def test_denylist_dotted_entry_catches_from_import(self):
        self.assertEqual(static("from os import path", modules=["os.path"])[:2],
                         ("os.path", 1))
        self.assertIsNone(static("from os import getcwd, sep", modules=["os.path"]))

    def test_allowlist(self):
        allow = ["math", "numpy"]
        self.assertIsNone(static("import math\nfrom math import pi\nimport numpy.linalg",
                                 "allowlist", allow))
        self.assertEqual(static("import math\nimport json", "allowlist", allow)[:2], ("json", 2))
        self.assertEqual(static("from os import path", "allowlist", allow)[:2], ("os", 1))
        self.assertIsNone(static("from os import path", "allowlist", ["os.path"]))


class StaticPolicyRuntimeTest(RuntimeTestCase):
    def violation(self, code, pol=STRICT):
        frames = self.rt.execute(code, policy=pol)
        self.assertEqual([f["type"] for f in frames], ["policy_violation", "execute_reply"])
        self.assertEqual(reply(frames)["status"], "policy_violation")
        self.assertEqual(reply(frames)["exit_code"], 1)
        return frames[0]

    def test_strict_catches_every_static_form(self):
        forms = {
            "import os": "os",
            "import os as o": "os",
            "from os import path": "os",
            "from os.path import join": "os.path",
            "import os.path": "os.path",
            "import subprocess": "subprocess",
            "m = __import__('ctypes')": "ctypes",
        }
        for stmt, module in forms.items():
            with self.subTest(stmt=stmt):
                v = self.violation("print('ran')\n" + stmt)
                self.assertEqual((v["module"], v["line"]), (module, 2))
                self.assertIn(module, v["message"])
        self.assertEqual(self.rt.shutdown(), 1)
        self.assertEqual(self.rt.stdout, "")  # no print of any cell ran

    def test_import_module_literal(self):
        v = self.violation("import importlib\nimportlib.import_module('os')", DENY_OS)
        self.assertEqual((v["module"], v["line"]), ("os", 2))

    def test_state_is_untouched_by_a_refused_cell(self):
        self.rt.execute("x = 1")
        self.violation("x = 2\nimport os")
        frames = self.rt.execute("x")
        self.assertEqual(of_type(frames, "execute_result")[0]["data"]["text/plain"], "1")


class RuntimeHookTest(RuntimeTestCase):
    def runtime_violation(self, code, pol=STRICT):
        frames = self.rt.execute(code, policy=pol)
        self.assertEqual([f["type"] for f in frames], ["policy_violation", "execute_reply"])
        self.assertEqual(reply(frames)["status"], "policy_violation")
        return frames[0]

    def test_dynamic_dunder_import(self):
        v = self.runtime_violation("print('ran')\nm = __import__('o' + 's')")
        self.assertEqual((v["module"], v["line"]), ("os", 2))
        self.rt.shutdown()
        self.assertEqual(self.rt.stdout, "ran\n")  # a run-time refusal: line 1 did run

    def test_dynamic_import_module(self):
        v = self.runtime_violation("import importlib\nname = 'o' + 's'\n"
                                   "importlib.import_module(name)", DENY_OS)
        self.assertEqual((v["module"], v["line"]), ("os", 3))

    def test_dynamic_import_module_imported_by_name(self):
        v = self.runtime_violation("from importlib import import_module\n"
                                   "import_module('o' + 's.path')", DENY_OS)
        self.assertEqual((v["module"], v["line"]), ("os.path", 2))

    def test_importlib_dunder_import(self):
        v = self.runtime_violation("import importlib\nimportlib.__import__('o' + 's')", DENY_OS)
        self.assertEqual(v["module"], "os")

    def test_exec_of_a_string(self):
        v = self.runtime_violation("x = 0\nexec('import o' + 's')")
        self.assertEqual((v["module"], v["line"]), ("os", 2))
        v = self.runtime_violation("exec('import o' + 's', {})")
        self.assertEqual(v["module"], "os")

    def test_inside_a_function_from_an_earlier_cell(self):
        self.rt.execute("def f(name):\n    return __import__(name)", policy=STRICT)
        v = self.runtime_violation("f('shu' + 'til')")
        self.assertEqual((v["module"], v["line"]), ("shutil", 2))

    def test_workspace_modules_are_checked(self):
        with open(os.path.join(self.rt.workspace, "helper.py"), "w") as f:
            f.write("import json\nimport os\n")
        v = self.runtime_violation("x = 1\nimport helper")
        self.assertEqual((v["module"], v["line"]), ("os", 2))
        self.assertIn("helper.py, line 2", v["message"])

    def test_refusal_is_an_import_error_the_cell_can_catch(self):
        frames = self.rt.execute("try:\n    __import__('o' + 's')\nexcept ImportError as e:\n"
                                 "    print(type(e).__name__, e.name)", policy=STRICT)
        self.assertEqual(reply(frames)["status"], "ok")
        self.rt.shutdown()
        self.assertEqual(self.rt.stdout, "KilnPolicyError os\n")

    @requires("pandas")
    def test_libraries_may_import_denied_modules(self):
        frames = self.rt.execute("import json\njson.dumps({'a': 1})", policy=STRICT)
        self.assertEqual(of_type(frames, "execute_result")[0]["data"]["text/plain"],
                         "'{\"a\": 1}'")
        frames = self.rt.execute("import pandas as pd\npd.DataFrame({'a': [1, 2]}).shape",
                                 policy=STRICT)
        self.assertEqual(of_type(frames, "execute_result")[0]["data"]["text/plain"], "(2, 1)")
        self.assertEqual(reply(frames)["status"], "ok")

    def test_lazy_imports_of_c_extensions_are_not_the_users(self):
        # datetime's C strptime imports _strptime with the calling cell's globals.
        frames = self.rt.execute("import datetime\ndatetime.datetime.strptime('2020', '%Y').year",
                                 policy={"mode": "allowlist", "modules": ["datetime"]})
        self.assertEqual(reply(frames)["status"], "ok", frames)
        self.assertEqual(of_type(frames, "execute_result")[0]["data"]["text/plain"], "2020")

    def test_allowlist(self):
        allow = {"mode": "allowlist", "modules": ["math", "json", "os"]}
        frames = self.rt.execute("import math, json\nfrom math import pi\nimport os.path\n"
                                 "os.path.join('a', 'b')", policy=allow)
        self.assertEqual(of_type(frames, "execute_result")[0]["data"]["text/plain"], "'a/b'")
        v = self.runtime_violation("import math\nm = __import__('coll' + 'ections')", allow)
        self.assertEqual((v["module"], v["line"]), ("collections", 2))
        frames = self.rt.execute("import math\nimport numpy", policy=allow)
        self.assertEqual((frames[0]["type"], frames[0]["module"], frames[0]["line"]),
                         ("policy_violation", "numpy", 2))

    def test_relative_imports_are_not_policy_matters(self):
        frames = self.rt.execute("from . import os", policy=STRICT)
        self.assertEqual(reply(frames)["status"], "error")
        self.assertEqual(of_type(frames, "error")[0]["ename"], "ImportError")

    def test_policy_follows_each_request(self):
        self.runtime_violation("__import__('o' + 's')")
        frames = self.rt.execute("import os\nos.sep", policy={"mode": "open", "modules": []})
        self.assertEqual(of_type(frames, "execute_result")[0]["data"]["text/plain"], "'/'")
        self.runtime_violation("__import__('o' + 's')")

    def test_replacing_the_hook_does_not_switch_it_off(self):
        frames = self.rt.execute("import builtins, importlib._bootstrap as b\n"
                                 "builtins.__import__ = b.__import__", policy=DENY_OS)
        self.assertEqual(reply(frames)["status"], "ok")
        v = self.runtime_violation("m = __import__('o' + 's')", DENY_OS)
        self.assertEqual(v["module"], "os")


if __name__ == "__main__":
    unittest.main()
