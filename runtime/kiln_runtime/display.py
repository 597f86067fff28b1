"""Rich output: MIME bundles, ``display()``, matplotlib figures, the image caps.

A bundle is {mime: str}: ``text/plain`` (``repr``) always; ``text/html``,
``text/markdown``, ``text/latex``, ``image/svg+xml``, ``image/png`` and
``image/jpeg`` from the object's ``_repr_mimebundle_`` / ``_repr_*_`` methods
(IPython's protocol); ``image/png`` for PIL images and matplotlib figures;
``text/html`` for pandas DataFrame (its own ``_repr_html_``) and Series
(rendered as a one-column table).  Binary images are base64 text.
Non-string values (``application/json`` objects) are left out: the protocol's
bundles hold strings only.

The caps (the execute frame's ``limits``): per cell at most ``max_images``
outputs carrying an image and ``max_image_bytes`` of image data in total
(decoded bytes).  An output over a cap loses its images: a ``display_data``
left with only ``text/plain`` is not sent at all, an ``execute_result`` keeps
its text; either way it counts once in the reply's ``dropped``.

Nothing here imports matplotlib, PIL or pandas: they are only looked up in
``sys.modules`` (an object of theirs cannot exist before they are imported).
"""

import sys

_REPR_METHODS = (
    ("_repr_html_", "text/html"),
    ("_repr_markdown_", "text/markdown"),
    ("_repr_latex_", "text/latex"),
    ("_repr_svg_", "image/svg+xml"),
    ("_repr_png_", "image/png"),
    ("_repr_jpeg_", "image/jpeg"),
)
_BINARY_MIMES = frozenset(("image/png", "image/jpeg", "image/gif", "image/webp"))
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

DEFAULT_MAX_IMAGES = 16
DEFAULT_MAX_IMAGE_BYTES = 8 << 20

_current = None  # the CellOutput of the running cell, set by the runner


class CellOutput:
    """Where one cell's rich outputs go, and their caps."""

    def __init__(self, send, cell, max_images=DEFAULT_MAX_IMAGES,
                 max_image_bytes=DEFAULT_MAX_IMAGE_BYTES):
        self.send = send  # frame -> the frame sent (possibly shrunk) or None
        self.cell = cell
        self.max_images = max_images
        self.max_image_bytes = max_image_bytes
        self.images = 0
        self.image_bytes = 0
        self.dropped = 0
        self.shown_figures = []

    def publish(self, data, metadata=None, execution_count=None):
        """Send a display_data (or, with ``execution_count``, the execute_result)."""
        data = dict(data)
        metadata = dict(metadata or {})
        images = [k for k in data if k.startswith("image/")]
        counted = False
        if images:
            size = sum(_image_size(k, data[k]) for k in images)
            if (self.images >= self.max_images
                    or self.image_bytes + size > self.max_image_bytes):
                self.dropped += 1
                for k in images:
                    del data[k]
                    metadata.pop(k, None)
                if execution_count is None and set(data) <= {"text/plain"}:
                    return False
                images = []
            else:
                self.images += 1
                self.image_bytes += size
                counted = True
        if execution_count is None:
            frame = {"type": "display_data", "cell": self.cell, "data": data,
                     "metadata": metadata}
        else:
            frame = {"type": "execute_result", "cell": self.cell,
                     "execution_count": execution_count, "data": data, "metadata": metadata}
        sent = self.send(frame)
        if sent is None or (sent is not frame and set(frame["data"]) - set(sent["data"])):
            # Too large for a frame: dropped (display_data) or cut to text (execute_result).
            self.dropped += 1
            if counted:
                self.images -= 1
                self.image_bytes -= size
        return sent is not None


def begin_cell(send, cell, max_images=DEFAULT_MAX_IMAGES, max_image_bytes=DEFAULT_MAX_IMAGE_BYTES):
    global _current
    _current = CellOutput(send, cell, max_images, max_image_bytes)
    return _current


def end_cell():
    global _current
    _current = None


# -- bundles ------------------------------------------------------------------------

def _b64(raw):
    import binascii

    return binascii.b2a_base64(raw, newline=False).decode("ascii")


def _image_size(mime, value):
    if mime in _BINARY_MIMES:
        n = len(value)
        return n * 3 // 4 - (2 if value.endswith("==") else 1 if value.endswith("=") else 0)
    return len(value.encode("utf-8", "replace"))


def png_size(raw):
    """(width, height) from a PNG's IHDR, or None."""
    if len(raw) >= 24 and raw[:8] == _PNG_SIGNATURE and raw[12:16] == b"IHDR":
        return int.from_bytes(raw[16:20], "big"), int.from_bytes(raw[20:24], "big")
    return None


def _add_png(data, metadata, raw):
    data["image/png"] = _b64(raw)
    size = png_size(raw)
    if size is not None:
        metadata["image/png"] = {"width": size[0], "height": size[1]}


def _warn(what, exc):
    try:
        sys.stderr.write("kiln: %s failed: %s: %s\n" % (what, type(exc).__name__, exc))
    except Exception:  # noqa: BLE001 - a broken sys.stderr must not end the cell
        pass


def _is_policy_error(exc):
    mod = sys.modules.get("kiln_runtime.policy")
    return mod is not None and isinstance(exc, mod.KilnPolicyError)


def _figure_class():
    mod = sys.modules.get("matplotlib.figure")
    return getattr(mod, "Figure", None) if mod is not None else None


def render_figure(fig):
    """The figure as PNG bytes, at its own size and dpi (no tight bbox)."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    try:
        fig.stale = False  # drawn as it is now: the end-of-cell flush need not repeat it
    except Exception:  # noqa: BLE001
        pass
    return buf.getvalue()


def figure_bundle(fig):
    data, metadata = {}, {}
    _add_png(data, metadata, render_figure(fig))
    data["text/plain"] = repr(fig)
    sink = _current
    if sink is not None:
        sink.shown_figures.append(fig)
    return data, metadata


def _pil_png(img):
    import io

    buf = io.BytesIO()
    try:
        img.save(buf, format="PNG")
    except Exception:  # noqa: BLE001 - modes PNG cannot store (CMYK, F, ...)
        buf = io.BytesIO()
        img.convert("RGBA").save(buf, format="PNG")
    return buf.getvalue()


def _call_repr(obj, name):
    method = getattr(type(obj), name, None)
    if method is None or not callable(method):
        return None
    return getattr(obj, name)()


def _put(data, metadata, mime, value):
    """Store one formatter result (value or (value, metadata)) as a string."""
    if isinstance(value, tuple) and len(value) == 2:
        value, md = value
        if isinstance(md, dict) and md:
            metadata[mime] = md
    if value is None:
        return
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        if mime == "image/png":
            _add_png(data, metadata, raw)
        elif mime in _BINARY_MIMES:
            data[mime] = _b64(raw)
        else:
            data[mime] = raw.decode("utf-8", "replace")
    elif isinstance(value, str):
        data[mime] = value


def build_bundle(obj):
    """(data, metadata) for ``obj``.  ``repr`` errors propagate; rich formatter errors
    are reported on stderr and that format is skipped."""
    data, metadata = {}, {}
    if not isinstance(obj, type):  # a class's _repr_html_ is an unbound function
        fig_cls = _figure_class()
        pil = sys.modules.get("PIL.Image")
        if fig_cls is not None and isinstance(obj, fig_cls):
            return figure_bundle(obj)
        if pil is not None and isinstance(obj, pil.Image):
            _add_png(data, metadata, _pil_png(obj))
            data["text/plain"] = repr(obj)
            return data, metadata
        try:
            bundle = _call_repr_mimebundle(obj)
        except Exception as exc:  # noqa: BLE001
            if _is_policy_error(exc):
                raise
            _warn("%s._repr_mimebundle_" % type(obj).__name__, exc)
            bundle = None
        if bundle is not None:
            md = {}
            if isinstance(bundle, tuple) and len(bundle) == 2:
                bundle, md = bundle
            if isinstance(bundle, dict):
                for mime, value in bundle.items():
                    if type(mime) is str:
                        _put(data, metadata, mime, value)
            if isinstance(md, dict):
                for mime, value in md.items():
                    if type(mime) is str and mime in data:
                        metadata[mime] = value
        for name, mime in _REPR_METHODS:
            if mime in data:
                continue
            try:
                _put(data, metadata, mime, _call_repr(obj, name))
            except Exception as exc:  # noqa: BLE001
                if _is_policy_error(exc):
                    raise
                _warn("%s.%s" % (type(obj).__name__, name), exc)
        pd = sys.modules.get("pandas")
        if "text/html" not in data and pd is not None and isinstance(obj, pd.Series):
            try:
                _put(data, metadata, "text/html", obj.to_frame()._repr_html_())
            except Exception as exc:  # noqa: BLE001
                _warn("Series HTML", exc)
    if "text/plain" not in data:
        data["text/plain"] = repr(obj)
    return data, metadata


def _call_repr_mimebundle(obj):
    method = getattr(type(obj), "_repr_mimebundle_", None)
    if method is None or not callable(method):
        return None
    return obj._repr_mimebundle_(include=None, exclude=None)


# -- display() -----------------------------------------------------------------

def _json_ok(value):
    from kiln_runtime import protocol

    try:
        protocol.encode(value)
        return True
    except (TypeError, ValueError, RecursionError):
        return False


def display(*objs, raw=False, metadata=None, **kwargs):
    """Show each object as a display_data output (IPython's ``display``).

    ``raw=True``: each object is already a MIME bundle {mime: str}.
    ``metadata``: merged into each output's metadata.  Other IPython keywords
    (include, exclude, display_id, ...) are accepted and ignored.
    """
    if metadata is not None and not (isinstance(metadata, dict) and _json_ok(metadata)):
        _warn("display(metadata=...)", TypeError("metadata is not a JSON object"))
        metadata = None
    for obj in objs:
        if raw:
            if not isinstance(obj, dict):
                raise TypeError("display(raw=True) takes MIME bundles (dicts)")
            data, md = {}, {}
            for mime, value in obj.items():
                if type(mime) is str:
                    _put(data, md, mime, value)
            if not data:
                continue
        else:
            data, md = build_bundle(obj)
        if metadata:
            md.update(metadata)
        sink = _current
        if sink is None:
            # No cell is running (a thread after its cell, a forked child): plain text.
            text = data.get("text/plain")
            if text is not None:
                print(text)
            continue
        sink.publish(data, md)


# -- matplotlib ---------------------------------------------------------------------

def show_figure(fig):
    """Send one figure as display_data (``Figure.show()``); it stays open."""
    sink = _current
    if sink is None:
        return
    data, md = figure_bundle(fig)
    sink.publish(data, md)


def flush_figures(end_of_cell=False):
    """Send every open pyplot figure as display_data and close it.

    ``plt.show()`` (end_of_cell False): all figures; errors propagate to the
    caller, like any ``show()``.  End of cell: figures already displayed in
    this cell and not changed since are closed without repeating them;
    a figure that cannot be drawn is reported on stderr and closed.
    Without a running cell (no channel) nothing is shown and nothing closed,
    like Agg.  Never imports matplotlib.
    """
    plt = sys.modules.get("matplotlib.pyplot")
    helpers = sys.modules.get("matplotlib._pylab_helpers")
    sink = _current
    if plt is None or helpers is None or sink is None:
        return
    managers = list(helpers.Gcf.get_all_fig_managers())
    try:
        for manager in managers:
            fig = manager.canvas.figure
            if end_of_cell and not getattr(fig, "stale", True) and any(
                    f is fig for f in sink.shown_figures):
                continue
            if end_of_cell:
                try:
                    data, md = figure_bundle(fig)
                except Exception as exc:  # noqa: BLE001
                    if _is_policy_error(exc):
                        raise
                    _warn("drawing figure %s" % manager.num, exc)
                    continue
            else:
                data, md = figure_bundle(fig)
            sink.publish(data, md)
    finally:
        for manager in managers:
            try:
                plt.close(manager.canvas.figure)
            except Exception:  # noqa: BLE001
                pass
