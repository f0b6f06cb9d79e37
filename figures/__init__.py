"""Figures of the article: one module per figure (``figNN_slug.py``), found by name.

``registry()`` imports every figure module and returns ``{number: Figure}``; ``load(n)``
imports just one. The build, the tests and the browser's worker use them, so a new figure
needs no registration beyond its file.
"""
import importlib
import inspect
import pkgutil
import re

from figures.contract import Figure

_MODULE_NAME = re.compile(r"^fig(\d\d)_([a-z0-9_]+)$")
_registry = None


def _load(module_name):
    match = _MODULE_NAME.match(module_name)
    module = importlib.import_module(f"figures.{module_name}")
    number = int(match.group(1))
    if module.NUMBER != number:
        raise ValueError(f"figures/{module_name}.py declares NUMBER={module.NUMBER}, its file name says {number}")
    return Figure(
        number=number,
        slug=match.group(2).replace("_", "-"),
        title=module.TITLE,
        caption=module.CAPTION,
        controls=tuple(module.CONTROLS),
        render=_layout_aware(module.render),
        constrain=getattr(module, "constrain", None),
        prepare=getattr(module, "prepare", None),
        limits=getattr(module, "limits", None),
        note=getattr(module, "NOTE", ""),
        tries=tuple(getattr(module, "TRIES", ())),
        primary=tuple(getattr(module, "PRIMARY", ())),
        groups=tuple(getattr(module, "GROUPS", ())),
        lays_out_narrow="narrow" in inspect.signature(module.render).parameters,
        lays_out_short="short" in inspect.signature(module.render).parameters,
        readouts_first=bool(getattr(module, "READOUTS_FIRST", False)),
        hints=getattr(module, "hints", None),
        folds=tuple(getattr(module, "FOLDS", ())),
    )


def _layout_aware(render):
    """``render(state, narrow=False, short=False)`` for every figure: a module's ``render``
    takes either only if its view differs there, and is asked only what it takes."""
    takes = {name for name in ("narrow", "short") if name in inspect.signature(render).parameters}
    if takes == {"narrow", "short"}:
        return render

    def render_any_size(state, narrow=False, short=False):
        asked = {"narrow": narrow, "short": short}
        return render(state, **{name: True for name in takes if asked[name]})

    render_any_size.__wrapped__ = render
    return render_any_size


def module_names():
    """``{number: module name}`` of every figure, found by file name without importing any."""
    names = (info.name for info in pkgutil.iter_modules(__path__) if _MODULE_NAME.match(info.name))
    return {int(_MODULE_NAME.match(name).group(1)): name for name in sorted(names)}


_loaded = {}


def load(number):
    """One figure, importing only its module (the browser's worker starts faster when it
    imports a figure the first time the page needs it)."""
    if number not in _loaded:
        _loaded[number] = _load(module_names()[number])
    return _loaded[number]


def registry():
    global _registry
    if _registry is None:
        _registry = {number: load(number) for number in module_names()}
    return _registry
