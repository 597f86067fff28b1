"""Rich outputs: pandas HTML, PIL and matplotlib PNGs, display(), the image caps."""

import unittest

from tests.harness import RuntimeTestCase, of_type, png_of, reply, requires

PLT = "import matplotlib.pyplot as plt\n"


@requires("pandas")
class PandasTest(RuntimeTestCase):
    def test_dataframe_has_html(self):
        frames = self.rt.execute("import pandas as pd\npd.DataFrame({'colA': [1, 2]})")
        data = of_type(frames, "execute_result")[0]["data"]
        self.assertIn("<table", data["text/html"])
        self.assertIn("colA", data["text/html"])
        self.assertIn("colA", data["text/plain"])

    def test_series_has_html(self):
        frames = self.rt.execute("import pandas as pd\npd.Series([1, 2], name='ser')")
        data = of_type(frames, "execute_result")[0]["data"]
        self.assertIn("<table", data["text/html"])
        self.assertIn("Name: ser", data["text/plain"])


@requires("PIL")
class PilTest(RuntimeTestCase):
    def test_image_is_png(self):
        frames = self.rt.execute("from PIL import Image\nImage.new('RGB', (7, 5), 'red')")
        result = of_type(frames, "execute_result")[0]
        _, width, height = png_of(result)
        self.assertEqual((width, height), (7, 5))
        self.assertTrue(result["data"]["text/plain"].startswith("<PIL.Image.Image"))
        self.assertEqual(result["metadata"]["image/png"], {"width": 7, "height": 5})

    def test_mode_png_cannot_store_is_converted(self):
        frames = self.rt.execute("from PIL import Image\nImage.new('CMYK', (3, 2))")
        _, width, height = png_of(of_type(frames, "execute_result")[0])
        self.assertEqual((width, height), (3, 2))


class MatplotlibTest(RuntimeTestCase):
    @requires("matplotlib")
    def test_backend_is_kilns(self):
        frames = self.rt.execute("import matplotlib\nmatplotlib.get_backend()")
        self.assertEqual(of_type(frames, "execute_result")[0]["data"]["text/plain"],
                         "'module://kiln_runtime.mpl_backend'")

    @requires("matplotlib")
    def test_open_figure_is_shown_and_closed_at_the_end(self):
        frames = self.rt.execute(PLT + "fig = plt.figure(figsize=(4, 3), dpi=100)\n"
                                 "plt.plot([1, 2, 3]);")
        shown = of_type(frames, "display_data")
        self.assertEqual(len(shown), 1)
        _, width, height = png_of(shown[0])
        self.assertEqual((width, height), (400, 300))
        self.assertEqual(shown[0]["metadata"], {"image/png": {"width": 400, "height": 300}})
        self.assertEqual(shown[0]["data"]["text/plain"], "<Figure size 400x300 with 1 Axes>")
        frames = self.rt.execute("plt.get_fignums()")
        self.assertEqual(of_type(frames, "execute_result")[0]["data"]["text/plain"], "[]")
        self.assertEqual(of_type(frames, "display_data"), [])

    @requires("matplotlib")
    def test_figures_come_before_the_result(self):
        frames = self.rt.execute(PLT + "plt.figure(figsize=(1, 1), dpi=20)\n'value'")
        self.assertEqual([f["type"] for f in frames],
                         ["display_data", "execute_result", "execute_reply"])

    @requires("matplotlib")
    def test_plt_show_sends_and_closes(self):
        frames = self.rt.execute(PLT + "plt.figure(figsize=(2, 1), dpi=50)\nplt.plot([1, 2])\n"
                                 "plt.show()\nlen(plt.get_fignums())")
        shown = of_type(frames, "display_data")
        self.assertEqual(len(shown), 1)
        self.assertEqual(png_of(shown[0])[1:], (100, 50))
        self.assertEqual(of_type(frames, "execute_result")[0]["data"]["text/plain"], "0")

    @requires("matplotlib")
    def test_figure_as_the_value_is_shown_once(self):
        frames = self.rt.execute(PLT + "fig, ax = plt.subplots(figsize=(3, 2), dpi=100)\nfig")
        self.assertEqual(of_type(frames, "display_data"), [])
        result = of_type(frames, "execute_result")[0]
        self.assertEqual(png_of(result)[1:], (300, 200))
        frames = self.rt.execute("plt.get_fignums()")
        self.assertEqual(of_type(frames, "execute_result")[0]["data"]["text/plain"], "[]")

    @requires("matplotlib")
    def test_figure_changed_after_display_is_shown_again(self):
        frames = self.rt.execute(PLT + "fig, ax = plt.subplots(figsize=(1, 1), dpi=30)\n"
                                 "display(fig)\nax.plot([1, 2])\nNone")
        self.assertEqual(len(of_type(frames, "display_data")), 2)
        frames = self.rt.execute("fig2, ax2 = plt.subplots(figsize=(1, 1), dpi=30)\n"
                                 "display(fig2)")
        self.assertEqual(len(of_type(frames, "display_data")), 1)

    @requires("matplotlib")
    def test_figure_show_method(self):
        frames = self.rt.execute(PLT + "fig = plt.figure(figsize=(1, 1), dpi=40)\nfig.show()\n"
                                 "len(plt.get_fignums())")
        self.assertEqual(len(of_type(frames, "display_data")), 1)
        self.assertEqual(of_type(frames, "execute_result")[0]["data"]["text/plain"], "1")

    @requires("matplotlib")
    def test_figures_are_shown_when_the_cell_fails(self):
        frames = self.rt.execute(PLT + "plt.figure(figsize=(1, 1), dpi=10)\n1/0")
        self.assertEqual([f["type"] for f in frames],
                         ["display_data", "error", "execute_reply"])

    def test_children_get_agg(self):
        frames = self.rt.execute(
            "import subprocess, sys\n"
            "probe = 'import os; print(os.environ.get(\"MPLBACKEND\"))'\n"
            "subprocess.run([sys.executable, '-c', probe], capture_output=True,"
            " text=True).stdout.strip()")
        self.assertEqual(of_type(frames, "execute_result")[0]["data"]["text/plain"], "'agg'")


class DisplayTest(RuntimeTestCase):
    @requires("pandas")
    def test_display_sends_display_data(self):
        frames = self.rt.execute("display('hi', 3)\nimport pandas as pd\n"
                                 "display(pd.DataFrame({'a': [1]}))\n'end'")
        shown = of_type(frames, "display_data")
        self.assertEqual([f["data"]["text/plain"] for f in shown[:2]], ["'hi'", "3"])
        self.assertIn("<table", shown[2]["data"]["text/html"])
        self.assertEqual([f["type"] for f in frames][-2:], ["execute_result", "execute_reply"])
        self.assertEqual(shown[0]["cell"], 1)

    def test_display_returns_none(self):
        frames = self.rt.execute("display(1)")
        self.assertEqual([f["type"] for f in frames], ["display_data", "execute_reply"])

    def test_repr_methods(self):
        frames = self.rt.execute(
            "class R:\n"
            "    def _repr_html_(self):\n        return '<b>r</b>'\n"
            "    def _repr_markdown_(self):\n        return '**r**'\n"
            "    def _repr_json_(self):\n        return {'not': 'a string'}\n"
            "    def __repr__(self):\n        return 'R()'\n"
            "R()")
        data = of_type(frames, "execute_result")[0]["data"]
        self.assertEqual(data, {"text/plain": "R()", "text/html": "<b>r</b>",
                                "text/markdown": "**r**"})

    def test_mimebundle_and_classes(self):
        frames = self.rt.execute(
            "class M:\n"
            "    def _repr_mimebundle_(self, include=None, exclude=None):\n"
            "        return {'text/html': '<i>m</i>', 'text/plain': 'plain m'}\n"
            "    def _repr_html_(self):\n        return 'not used'\n"
            "display(M())\nM")
        shown = of_type(frames, "display_data")[0]
        self.assertEqual(shown["data"], {"text/html": "<i>m</i>", "text/plain": "plain m"})
        result = of_type(frames, "execute_result")[0]
        self.assertEqual(set(result["data"]), {"text/plain"})  # the class, not an instance

    @requires("PIL")
    def test_png_from_repr_png(self):
        frames = self.rt.execute(
            "from PIL import Image\nimport io\n"
            "class P:\n    def _repr_png_(self):\n"
            "        b = io.BytesIO(); Image.new('L', (4, 6)).save(b, 'PNG'); return b.getvalue()\n"
            "P()")
        self.assertEqual(png_of(of_type(frames, "execute_result")[0])[1:], (4, 6))

    def test_failing_rich_repr_keeps_text(self):
        frames = self.rt.execute(
            "class F:\n    def _repr_html_(self):\n        raise ValueError('html broke')\n"
            "    def __repr__(self):\n        return 'F()'\nF()")
        self.assertEqual(of_type(frames, "execute_result")[0]["data"], {"text/plain": "F()"})
        self.assertEqual(reply(frames)["status"], "ok")
        self.rt.shutdown()
        self.assertIn("html broke", self.rt.stderr)

    def test_raw_bundle(self):
        frames = self.rt.execute("display({'text/markdown': '# t', 'text/plain': 't'}, raw=True)")
        self.assertEqual(of_type(frames, "display_data")[0]["data"],
                         {"text/markdown": "# t", "text/plain": "t"})

    def test_huge_result_is_cut_to_fit_a_frame(self):
        frames = self.rt.execute("'x' * (40 << 20)")
        text = of_type(frames, "execute_result")[0]["data"]["text/plain"]
        self.assertLess(len(text), 2 << 20)
        self.assertIn("more characters not shown", text)
        self.assertEqual(reply(frames)["status"], "ok")


class CapsTest(RuntimeTestCase):
    FIGS = PLT + "for i in range(4):\n    plt.figure(figsize=(1, 1), dpi=20)\n"

    @requires("matplotlib")
    def test_max_images(self):
        frames = self.rt.execute(self.FIGS, limits={"max_images": 2, "max_image_bytes": 1 << 20})
        self.assertEqual(len(of_type(frames, "display_data")), 2)
        self.assertEqual(reply(frames)["dropped"], 2)

    @requires("matplotlib")
    def test_caps_are_per_cell(self):
        limits = {"max_images": 1, "max_image_bytes": 1 << 20}
        for _ in range(2):
            frames = self.rt.execute(self.FIGS, limits=limits)
            self.assertEqual((len(of_type(frames, "display_data")), reply(frames)["dropped"]),
                             (1, 3))

    @requires("matplotlib")
    def test_max_image_bytes(self):
        frames = self.rt.execute(self.FIGS, limits={"max_images": 16, "max_image_bytes": 100})
        self.assertEqual(of_type(frames, "display_data"), [])
        self.assertEqual(reply(frames)["dropped"], 4)

    @requires("PIL")
    def test_result_over_the_cap_keeps_its_text(self):
        frames = self.rt.execute("from PIL import Image\nImage.new('RGB', (2, 2))",
                                 limits={"max_images": 0, "max_image_bytes": 1 << 20})
        result = of_type(frames, "execute_result")[0]
        self.assertEqual(set(result["data"]), {"text/plain"})
        self.assertEqual(result["metadata"], {})
        self.assertEqual(reply(frames)["dropped"], 1)

    @requires("pandas")
    def test_text_outputs_are_not_images(self):
        frames = self.rt.execute("display('a')\nimport pandas as pd\npd.DataFrame({'a': [1]})",
                                 limits={"max_images": 0, "max_image_bytes": 0})
        self.assertEqual(len(of_type(frames, "display_data")), 1)
        self.assertIn("text/html", of_type(frames, "execute_result")[0]["data"])
        self.assertEqual(reply(frames)["dropped"], 0)

    @requires("matplotlib")
    def test_default_caps(self):
        frames = self.rt.execute(
            PLT + "for i in range(18):\n    plt.figure(figsize=(1, 1), dpi=10)\n", limits={})
        self.assertEqual(len(of_type(frames, "display_data")), 16)
        self.assertEqual(reply(frames)["dropped"], 2)


if __name__ == "__main__":
    unittest.main()
