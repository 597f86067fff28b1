"""kiln's matplotlib backend: ``MPLBACKEND=module://kiln_runtime.mpl_backend``.

Figures render with Agg.  ``plt.show()`` sends every open figure as a
``display_data`` (image/png, metadata {"image/png": {"width", "height"}} in
pixels, plus text/plain) and closes them; ``fig.show()`` sends that one figure
and leaves it open.  The runner does the same as ``plt.show()`` at the end of
every cell for figures still open (display.flush_figures).  Outside a cell (no
channel) it behaves like Agg: nothing is shown.
"""

from matplotlib.backend_bases import FigureManagerBase, _Backend
from matplotlib.backends.backend_agg import FigureCanvasAgg

from kiln_runtime import display as _display


class FigureManagerKiln(FigureManagerBase):
    def show(self):
        _display.show_figure(self.canvas.figure)


class FigureCanvasKiln(FigureCanvasAgg):
    manager_class = FigureManagerKiln


@_Backend.export
class _BackendKiln(_Backend):
    backend_version = "1"
    FigureCanvas = FigureCanvasKiln
    FigureManager = FigureManagerKiln

    @staticmethod
    def show(*args, block=None, **kwargs):
        _display.flush_figures()
