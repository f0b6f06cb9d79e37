"""Figures of the article: one module per figure (``figNN_slug.py``), found by name.

``registry()`` imports every figure module and returns ``{number: Figure}``. The build,
the tests and the browser runtime all use it, so a new figure needs no registration
beyond its file.
"""
import importlib
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
        render=module.render,
        constrain=getattr(module, "constrain", None),
        render_ahead=getattr(module, "RENDER_AHEAD", True),
    )


def registry():
    global _registry
    if _registry is None:
        names = sorted(info.name for info in pkgutil.iter_modules(__path__) if _MODULE_NAME.match(info.name))
        figures = [_load(name) for name in names]
        _registry = {figure.number: figure for figure in figures}
    return _registry
