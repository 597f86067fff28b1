"""Start-up cost: what the ok path imports, the -S site replacement, the _json codec."""

import importlib.util
import json
import os
import site
import subprocess
import unittest

import _ast
import _json

from kiln_runtime import protocol, runner
from tests.harness import PYTHON, PYTHON_FLAGS, Runtime, of_type, reply

# What a successful cell must not cost (json pulls in re and enum; traceback
# pulls in linecache, tokenize, ...).
HEAVY = ("json", "re", "ast", "tokenize", "traceback", "linecache", "textwrap", "enum",
         "__future__", "types", "os", "importlib", "collections", "functools", "contextlib")

# Everything the runtime itself may import until a print(1) cell has been answered.
# atexit: builtin (C), for the `exiting` frame after the program's own exit work.
OK_PATH = {"kiln_runtime", "kiln_runtime.protocol", "kiln_runtime.runner",
           "kiln_runtime.policy", "kiln_runtime.display", "_json", "_ast", "_sitebuiltins",
           "atexit"}


def _imported_modules(importtime_stderr):
    names = set()
    for line in importtime_stderr.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            name = line.split("|")[2].strip()
            if name != "imported package":
                names.add(name)
    return names


def _installed(name):
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def result_text(frames):
    results = of_type(frames, "execute_result")
    return results[0]["data"]["text/plain"] if results else None


class OkPathTest(unittest.TestCase):
    def runtime(self, *args, **kwargs):
        rt = Runtime(*args, **kwargs)
        self.addCleanup(rt.kill)
        rt.hello()
        return rt

    def test_an_ok_cell_imports_nothing_heavy(self):
        rt = self.runtime()
        self.assertEqual(reply(rt.execute("print(1)"))["status"], "ok")
        # The check itself is an ok cell: it would see what either cell imported.
        frames = rt.execute("import sys\nsorted(m for m in %r if m in sys.modules)" % (HEAVY,))
        self.assertEqual(result_text(frames), "[]")
        self.assertEqual(rt.shutdown(), 0)
        self.assertEqual(rt.stdout, "1\n")

    def test_the_ok_path_imports_only_its_own_modules(self):
        bare = subprocess.run([PYTHON, *PYTHON_FLAGS, "-X", "importtime", "-c", "pass"],
                              capture_output=True, text=True, timeout=60)
        interpreter = _imported_modules(bare.stderr)
        rt = self.runtime(python_flags=("-X", "importtime"))
        self.assertEqual(reply(rt.execute("print(1)"))["status"], "ok")
        self.assertEqual(rt.shutdown(), 0)
        extra = _imported_modules(rt.stderr) - interpreter
        self.assertLessEqual(extra, OK_PATH)
        self.assertIn("_json", extra)  # the C codec, not the json fallback

    def test_the_error_path_still_formats_full_tracebacks(self):
        rt = self.runtime()
        self.assertEqual(reply(rt.execute("print(1)"))["status"], "ok")
        err = of_type(rt.execute("def f():\n    raise ValueError('v')\nf()"), "error")[0]
        self.assertEqual(err["traceback"][0], "Traceback (most recent call last):")
        self.assertEqual(err["traceback"][1], '  File "<cell>", line 3, in <module>\n    f()')
        self.assertEqual(err["traceback"][-1], "ValueError: v")

    def test_a_program_module_named_like_the_runtimes_imports_is_left_to_the_program(self):
        rt = self.runtime()
        for name in ("traceback", "linecache", "tokenize"):
            with open(os.path.join(rt.workspace, name + ".py"), "w") as f:
                f.write("MINE = %r\n" % name)
        frames = rt.execute("import traceback, linecache, tokenize\n"
                            "(traceback.MINE, linecache.MINE, tokenize.MINE)")
        self.assertEqual(result_text(frames), "('traceback', 'linecache', 'tokenize')")
        err = of_type(rt.execute("x = 1\n1/0"), "error")[0]
        self.assertEqual(err["traceback"][0], "Traceback (most recent call last):")
        self.assertTrue(err["traceback"][1].startswith(
            '  File "<cell>", line 2, in <module>\n    1/0'), err["traceback"])
        self.assertEqual(err["traceback"][-1], "ZeroDivisionError: division by zero")
        # The program still sees its own modules.
        self.assertEqual(result_text(rt.execute("import traceback\ntraceback.MINE")),
                         "'traceback'")

    def test_a_shadowing_importlib_does_not_break_the_policy_hook(self):
        rt = self.runtime()
        with open(os.path.join(rt.workspace, "importlib.py"), "w") as f:
            f.write("raise RuntimeError('shadowed')\n")
        strict = {"mode": "denylist", "modules": ["socket"]}
        self.assertEqual(reply(rt.execute("x = 1", policy=strict))["status"], "ok")
        frames = rt.execute("__import__('sock' + 'et')", policy=strict)
        self.assertEqual(of_type(frames, "policy_violation")[0]["module"], "socket")

    def test_warnings_show_the_cells_line_before_anything_loaded_linecache(self):
        rt = self.runtime()
        rt.execute("import sys\nassert 'linecache' not in sys.modules\n"
                   "import warnings\nwarnings.warn('careful')")
        self.assertEqual(rt.shutdown(), 0)
        self.assertIn("<cell>:4: UserWarning: careful\n  warnings.warn('careful')\n", rt.stderr)


class SiteTest(unittest.TestCase):
    """launch.py does what the programs rely on of site (the runtime runs with -S)."""

    @classmethod
    def setUpClass(cls):
        cls.rt = Runtime()
        cls.rt.hello()

    @classmethod
    def tearDownClass(cls):
        cls.rt.kill()

    def test_no_site_and_no_pth_code(self):
        frames = self.rt.execute("import sys\n(sys.flags.no_site, sorted(m for m in "
                                 "('site', '_distutils_hack', 'certifi') if m in sys.modules))")
        self.assertEqual(result_text(frames), "(1, [])")

    def test_sys_path_has_the_site_directories_in_sites_order(self):
        proc = subprocess.run([PYTHON, *PYTHON_FLAGS, "-c", "import sys; print(sys.path)"],
                              capture_output=True, text=True, timeout=60)
        stdlib = eval(proc.stdout)  # noqa: S307 - a list literal from our own interpreter
        sitedirs = [d for d in site.getsitepackages() if os.path.isdir(d)]
        self.assertTrue(sitedirs)
        frames = self.rt.execute("import sys\nsys.path[2:]")
        self.assertEqual(result_text(frames), repr(stdlib + sitedirs))

    def test_builtins_site_would_define(self):
        import builtins

        frames = self.rt.execute("(repr(exit), repr(quit), repr(help), repr(copyright),"
                                 " repr(credits), type(repr(license)).__name__)")
        self.assertEqual(result_text(frames), repr((
            repr(builtins.exit), repr(builtins.quit), repr(builtins.help),
            repr(builtins.copyright), repr(builtins.credits), "str")))

    def test_mpl_toolkits_mplot3d(self):
        if not _installed("matplotlib"):
            self.skipTest("matplotlib is not installed")
        frames = self.rt.execute("import sys, mpl_toolkits.mplot3d\n"
                                 "(mpl_toolkits.mplot3d.Axes3D.__name__,"
                                 " 'pkg_resources' in sys.modules)")
        # pkg_resources: Debian's mpl_toolkits/__init__.py imports it unless the
        # nspkg.pth (reproduced by launch.py) set the package up first.
        self.assertEqual(result_text(frames), "('Axes3D', False)")

    def test_the_scientific_stack_imports(self):
        names = [n for n in ("numpy", "pandas", "matplotlib.pyplot", "scipy.linalg",
                             "sklearn.linear_model", "PIL.Image") if _installed(n.split(".")[0])]
        if not names:
            self.skipTest("none of the scientific stack is installed")
        frames = self.rt.execute("import %s\n'imported'" % ", ".join(names))
        self.assertEqual(reply(frames)["status"], "ok", frames)
        self.assertEqual(result_text(frames), "'imported'")


class ExitBuiltinTest(unittest.TestCase):
    def run_cell(self, code):
        rt = Runtime()
        self.addCleanup(rt.kill)
        rt.hello()
        r = reply(rt.execute(code))
        return r["status"], r["exit_code"], rt.shutdown()

    def test_exit_with_a_code(self):
        self.assertEqual(self.run_cell("exit(3)"), ("exit", 3, 3))

    def test_quit_without_a_code(self):
        self.assertEqual(self.run_cell("print('x')\nquit()\nprint('not reached')"),
                         ("exit", 0, 0))


class CodecTest(unittest.TestCase):
    OBJECTS = [
        {"type": "execute", "cell": 1, "code": "print('h\u00e9llo')\n", "filename": "<cell>"},
        {"type": "x", "text": "\u00e9\u6f22\u5b57 \U0001f600 \u2028\u2029 \x00\x1f \"quoted\" \\ /"
                               " \x7f\x80\uffff", "\u00fcml\u00e4ut key": "\u00ff"},
        {"type": "nested", "a": [[], {}, [1, [2, [3, {"b": None, "c": [True, False]}]]]],
         "d": {"e": {"f": {"g": {"h": "deep"}}}}},
        {"type": "ints", "v": [0, -1, 2 ** 31, 2 ** 63, -(2 ** 64) - 1, 2 ** 200, 10 ** 300]},
        {"type": "floats", "v": [0.1, -0.0, 1e308, 5e-324, 1.7976931348623157e308,
                                 123456789.123456789, -2.5e-10, 1.0, 3.0e20]},
        {"type": "keys", 7: "int key", 2.5: "float key", False: "bool key", None: "null key"},
        {"type": "", "empty": "", "list": [], "obj": {}},
    ]

    @staticmethod
    def reference(obj):
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":"),
                          allow_nan=False).encode("utf-8", "replace")

    def test_the_c_codec_is_in_use(self):
        self.assertEqual(protocol._get_codec()[0].__qualname__, "_c_codec.<locals>.dumps")

    def test_encode_matches_json_dumps(self):
        for obj in self.OBJECTS:
            with self.subTest(obj=obj):
                self.assertEqual(protocol.encode(obj), self.reference(obj))

    def test_decode_matches_json_loads(self):
        for obj in self.OBJECTS:
            for text in (json.dumps(obj), json.dumps(obj, ensure_ascii=False, indent=2),
                         " \t\r\n" + json.dumps(obj) + "\n\n "):
                with self.subTest(text=text):
                    got = protocol.decode(text.encode("utf-8"))
                    # dumps again: tells 1 from 1.0 and -0.0 from 0.0
                    self.assertEqual(json.dumps(got), json.dumps(json.loads(text)))

    def test_round_trip(self):
        for obj in self.OBJECTS:
            with self.subTest(obj=obj):
                self.assertEqual(json.dumps(protocol.decode(protocol.encode(obj))),
                                 json.dumps(json.loads(self.reference(obj))))

    def test_decode_accepts_what_json_loads_accepts(self):
        text = '{"type":"t","e":"\\u00e9\\ud83d\\ude00\\ud800","n":NaN,"i":-Infinity,"x":1E400}'
        got = protocol.decode(bytearray(text.encode("ascii")))
        self.assertEqual(repr(got), repr(json.loads(text)))

    def test_never_emits_invalid_json_or_invalid_utf8(self):
        for bad in (float("nan"), float("inf"), -float("inf")):
            with self.subTest(value=bad), self.assertRaises(ValueError):
                protocol.encode({"type": "x", "v": [bad]})
        self.assertEqual(protocol.encode({"type": "\ud800x"}), b'{"type":"?x"}')
        with self.assertRaises(TypeError):
            protocol.encode({"type": "x", "v": object()})
        loop = []
        loop.append(loop)
        with self.assertRaises(ValueError):
            protocol.encode({"type": "x", "v": loop})
        # A failed encoding leaves nothing behind.
        shared = [1]
        with self.assertRaises(TypeError):
            protocol.encode({"type": "x", "a": [shared, object()]})
        self.assertEqual(protocol.encode({"type": "x", "a": shared}), b'{"type":"x","a":[1]}')

    def test_malformed_frames(self):
        for payload in (b"", b"  ", b"{} x", b"{}{}", b"\xef\xbb\xbf{}", b"[1,", b'{"type":"x"',
                        b'{"type":"a\x01"}', b"\xff", b"[" * 100000, b"nul", b'{"type":"x",}'):
            with self.subTest(payload=payload[:20]), self.assertRaises(protocol.ProtocolError):
                protocol.decode(payload)
        for payload, message in ((b"[1]", "not a JSON object"), (b'{"type":1}', "'type'")):
            with self.assertRaises(protocol.ProtocolError) as ctx:
                protocol.decode(payload)
            self.assertIn(message, str(ctx.exception))

    def test_the_json_fallback_agrees(self):
        fast, slow = protocol._c_codec(_json), protocol._json_module_codec()
        for obj in self.OBJECTS:
            with self.subTest(obj=obj):
                self.assertEqual(fast[0](obj), slow[0](obj))
                text = fast[0](obj)
                self.assertEqual(json.dumps(fast[1](text)), json.dumps(slow[1](text)))


class CompileTest(unittest.TestCase):
    def test_future_flags_constant(self):
        import __future__

        mask = 0
        for name in __future__.all_feature_names:
            mask |= getattr(__future__, name).compiler_flag
        self.assertEqual(runner.FUTURE_FLAGS, mask)

    def test_trailing_semicolon(self):
        cases = [("1;", True), ("1 ;  # c", True), ("x = 3\nx;\n\n", True), ("1  # ;", False),
                 ("'x;'", False), ("z = 1; z", False), ('"""a;\n;"""', False),
                 ("(1 +\n 2);", True), ("(1 +\n 2)  # ;\n", False), ("1 \\\n;", True),
                 ("\u00e9 = 1\n'\u00fc\u6f22' ;# \u00fc", True), ("'\u00fc'", False),
                 ("1;\r\n", True), ("x = 1\r\nx\r\n", False), ("s = '''a\x0cb'''\n1 + 1;", True),
                 ("s = '''a\x0cb'''\ns;  # \x0c", True), ("if 1:\n    pass\n1;", True),
                 ("[1,\n 2,\n]\n", False), ("f(\n);\n# end", True)]
        for code, expected in cases:
            with self.subTest(code=code):
                tree = compile(code, "<cell>", "exec", _ast.PyCF_ONLY_AST, dont_inherit=True)
                self.assertEqual(runner._ends_with_semicolon(code, tree.body[-1]), expected)

    def test_form_feed_in_an_earlier_line(self):
        rt = Runtime()
        self.addCleanup(rt.kill)
        rt.hello()
        self.assertEqual(of_type(rt.execute("s = '''a\x0cb'''\n1 + 1;"), "execute_result"), [])
        self.assertEqual(result_text(rt.execute("s = '''a\x0cb'''\n1 + 1")), "2")


if __name__ == "__main__":
    unittest.main()


class SeccompFromEnvTest(unittest.TestCase):
    """--seccomp-from-env (the gVisor backend): kiln's filter, or no start at all."""

    def _launch(self, env_value):
        from tests.harness import LAUNCH
        env = {"PATH": "/usr/bin:/bin"}
        if env_value is not None:
            env["KILN_SECCOMP_BPF"] = env_value
        # No runtime channel on fd 3: a launcher that got past the filter says so (125).
        return subprocess.run([PYTHON, *PYTHON_FLAGS, LAUNCH, "--seccomp-from-env"], env=env,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)

    def test_a_missing_or_malformed_program_stops_the_start(self):
        for value in (None, "", "zz", "0600"):
            with self.subTest(value=value):
                p = self._launch(value)
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertIn("seccomp filter not installed", p.stderr)

    def test_a_well_formed_program_is_installed(self):
        # One instruction: BPF_RET | BPF_K, SECCOMP_RET_ALLOW (struct sock_filter, little-endian).
        allow = (0x06).to_bytes(2, "little") + bytes(2) + (0x7FFF0000).to_bytes(4, "little")
        p = self._launch(allow.hex())
        self.assertEqual(p.returncode, 125, p.stderr)
        self.assertIn("no runtime channel", p.stderr)
