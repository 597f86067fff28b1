"""The profile's import policy: a static check of each cell and a run-time hook.

Modes (the execute frame's ``import_policy``): ``open`` (no checks), ``denylist``
(every module but the listed ones), ``allowlist`` (only the listed ones).  An
entry matches the module itself and its dotted submodules: "os" matches "os"
and "os.path"; allowlist "numpy" allows "numpy.linalg".  ``__future__`` is a
compiler directive and always allowed; relative imports (level > 0) are the
program's own modules and always allowed.

1. Before a cell runs, ``check_tree`` walks its AST: ``import a.b``, ``from a
   import b`` (``a`` and ``a.b`` are checked), and ``__import__("a")`` /
   ``importlib.import_module("a")`` calls with a literal name.  A violation
   means nothing of the cell runs.

2. While it runs, the hook (``install_hook``) wraps ``builtins.__import__``,
   ``importlib.import_module`` and ``importlib.__import__``: an import made from
   the program's own code (the cell's ``__main__`` namespace, a module loaded
   from the workspace, or an anonymous ``exec`` namespace) is checked with the
   same rules and refused with ``KilnPolicyError`` (an ImportError).  Imports
   made by libraries (pandas importing os) are not checked, nor are the lazy
   imports C extensions make through ``PyImport_Import`` (numpy importing
   numpy.core._methods from ``arr.sum()``), which CPython hands to
   ``__import__`` with the innermost Python frame's globals and an empty
   *list* as fromlist - an ``import`` statement never passes a list.

THIS IS NOT A SECURITY BOUNDARY.  A determined program can get around any
in-process hook (a library's module attributes, ``pickle``, an explicit empty
fromlist list, ``gc``, ...).  The jail (namespaces, seccomp, Landlock, cgroups)
is what contains the program; the policy is a guard rail that makes the
profile's intent visible and fails early and clearly.  The hook's state lives
in closures, not in module globals, so it is not switched off by accident or by
a one-liner.
"""

import sys

import _ast

# The reference design's `strict` profile (the supervisor sends it as a denylist).
STRICT_DENYLIST = ("os", "subprocess", "socket", "sys", "ctypes", "importlib", "pkgutil",
                   "shutil")

MODES = ("open", "denylist", "allowlist")


class KilnPolicyError(ImportError):
    """An import the profile's import policy forbids."""

    def __init__(self, module, message, filename=None, lineno=None):
        super().__init__(message, name=module)
        self.module = module
        self.filename = filename
        self.lineno = lineno


class Policy:
    """One import policy: a mode and its module entries."""

    __slots__ = ("mode", "modules", "_entries")

    def __init__(self, mode="open", modules=()):
        if mode not in MODES:
            raise ValueError("unknown import policy mode %r" % (mode,))
        self.mode = mode
        self.modules = tuple(modules)
        self._entries = frozenset(self.modules)

    @classmethod
    def from_request(cls, obj):
        """The policy of an execute frame's ``import_policy`` (absent: open).

        ValueError if it is malformed.
        """
        if obj is None:
            return OPEN
        if type(obj) is not dict:
            raise ValueError("import_policy is not an object")
        mode = obj.get("mode", "open")
        modules = obj.get("modules", [])
        if type(mode) is not str or mode not in MODES:
            raise ValueError("import_policy.mode is not one of %s" % "/".join(MODES))
        if type(modules) is not list or any(type(m) is not str for m in modules):
            raise ValueError("import_policy.modules is not a list of strings")
        if mode == "open":
            return OPEN
        return cls(mode, [m.strip() for m in modules if m.strip()])

    @property
    def is_open(self):
        return self.mode == "open"

    def _entry(self, name):
        """The entry matching ``name`` or one of its parent packages, or None."""
        entries = self._entries
        if name in entries:
            return name
        i = name.find(".")
        while i != -1:
            if name[:i] in entries:
                return name[:i]
            i = name.find(".", i + 1)
        return None

    def refusal(self, name):
        """Why importing module ``name`` is refused, or None if it is allowed."""
        if self.mode == "open" or name == "__future__":
            return None
        entry = self._entry(name)
        if self.mode == "denylist":
            if entry is None:
                return None
            return "import of '%s' is forbidden by the import policy (denylist entry '%s')" % (
                name, entry)
        if entry is not None:
            return None
        return "import of '%s' is forbidden by the import policy (not on the allowlist)" % name

    def check_import(self, module, fromlist=()):
        """``import module`` or ``from module import *fromlist``: (name, message) or None.

        Denylist: refused if ``module`` or any ``module.name`` is denied (a
        denylist entry "os.path" catches ``from os import path``).  Allowlist:
        allowed if ``module`` is allowed, or if every ``module.name`` is.
        """
        msg = self.refusal(module)
        if self.mode == "denylist":
            if msg is not None:
                return module, msg
            for name in fromlist or ():
                if type(name) is str and name != "*":
                    sub = module + "." + name
                    sub_msg = self.refusal(sub)
                    if sub_msg is not None:
                        return sub, sub_msg
            return None
        if msg is None:
            return None
        names = [n for n in fromlist or () if type(n) is str]
        if names and "*" not in names and all(self.refusal(module + "." + n) is None
                                              for n in names):
            return None
        return module, msg


OPEN = Policy()


# -- 1. the static check ------------------------------------------------------

def _const_str(node):
    return node.value if node.__class__.__name__ == "Constant" and type(node.value) is str else None


def _call_arg(call, index, keyword):
    if len(call.args) > index:
        return call.args[index]
    for kw in call.keywords:
        if kw.arg == keyword:
            return kw.value
    return None


def _literal_import_call(call):
    """(module, fromlist) for ``__import__("m")`` / ``import_module("m")`` with a literal name."""
    func = call.func
    if isinstance(func, _ast.Name):
        fname = func.id
    elif isinstance(func, _ast.Attribute):
        fname = func.attr
    else:
        return None
    if fname not in ("__import__", "import_module"):
        return None
    name_node = _call_arg(call, 0, "name")
    name = _const_str(name_node) if name_node is not None else None
    if not name or name.startswith("."):
        return None  # not a literal, or relative: left to the run-time hook
    if fname == "import_module":
        return name, ()
    level = _call_arg(call, 4, "level")
    if level is not None and not (isinstance(level, _ast.Constant) and level.value == 0):
        return None  # relative (or computed) level: the hook decides at run time
    fromlist = ()
    fl = _call_arg(call, 3, "fromlist")
    if isinstance(fl, (_ast.Tuple, _ast.List)):
        fromlist = tuple(s for s in (_const_str(e) for e in fl.elts) if s)
    return name, fromlist


def _walk(tree):
    """Every node of ``tree`` (ast.walk without the ast module: children via ``_fields``)."""
    AST = _ast.AST
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        for name in node._fields:
            value = getattr(node, name, None)
            if isinstance(value, AST):
                todo.append(value)
            elif isinstance(value, list):
                todo.extend(item for item in value if isinstance(item, AST))


def check_tree(tree, policy):
    """The first violation in ``tree`` (source order) as (module, line, message), or None."""
    if policy.is_open:
        return None
    found = []
    for node in _walk(tree):
        result = None
        if isinstance(node, _ast.Import):
            for alias in node.names:
                result = policy.check_import(alias.name)
                if result is not None:
                    break
        elif isinstance(node, _ast.ImportFrom):
            if node.level == 0 and node.module:
                result = policy.check_import(node.module, [a.name for a in node.names])
        elif isinstance(node, _ast.Call):
            call = _literal_import_call(node)
            if call is not None:
                result = policy.check_import(*call)
        if result is not None:
            found.append((node.lineno, node.col_offset, result[0], result[1]))
    if not found:
        return None
    line, _, module, message = min(found)
    return module, line, message


# -- 2. the run-time hook --------------------------------------------------------

def install_hook(main_dict, workspace):
    """Wrap the import functions; returns ``set_policy(policy)`` (None or open: checks off).

    ``set_policy`` also puts the wrappers back if the program replaced them.
    """
    import builtins

    import kiln_runtime

    importlib = kiln_runtime.runtime_import("importlib")
    getframe = sys._getframe
    prefix = workspace.rstrip("/") + "/"
    state = [None]  # the active Policy, or None

    def is_user(g):
        if g is main_dict:
            return True
        if type(g) is not dict:
            return False
        f = g.get("__file__")
        if type(f) is str:
            return f.startswith(prefix)
        # An anonymous namespace (exec(src, {})): no module ever has neither.
        return "__spec__" not in g and "__file__" not in g

    def check(name, fromlist, frame):
        result = state[0].check_import(name, fromlist)
        if result is not None:
            raise KilnPolicyError(result[0], result[1], frame.f_code.co_filename, frame.f_lineno)

    def wrap_import(original):
        def __import__(name, globals=None, locals=None, fromlist=(), level=0):
            if state[0] is not None and level == 0 and type(name) is str:
                # An empty *list* is CPython's PyImport_Import (C extension code),
                # never an import statement (those pass None or a tuple).
                if not (type(fromlist) is list and not fromlist):
                    frame = getframe(1)
                    if is_user(globals if globals is not None else frame.f_globals):
                        check(name, fromlist or (), frame)
            return original(name, globals, locals, fromlist, level)

        __import__.__doc__ = original.__doc__
        return __import__

    def wrap_import_module(original):
        def import_module(name, package=None):
            if state[0] is not None and type(name) is str and not name.startswith("."):
                frame = getframe(1)
                if is_user(frame.f_globals):
                    check(name, (), frame)
            return original(name, package)

        import_module.__doc__ = original.__doc__
        import_module.__module__ = "importlib"
        return import_module

    hooked_import = wrap_import(builtins.__import__)
    hooked_il_import = wrap_import(importlib.__import__)
    hooked_import_module = wrap_import_module(importlib.import_module)

    def set_policy(policy):
        state[0] = None if policy is None or policy.is_open else policy
        if state[0] is None:
            return
        if builtins.__import__ is not hooked_import:
            builtins.__import__ = hooked_import
        il = sys.modules.get("importlib")
        if il is not None:
            if getattr(il, "import_module", None) is not hooked_import_module:
                il.import_module = hooked_import_module
            if getattr(il, "__import__", None) is not hooked_il_import:
                il.__import__ = hooked_il_import

    return set_policy
