"""``models/`` stands alone: it imports the standard library and itself, nothing else
(not ``figures/``, which imports it), so the cost model runs, and is tested, anywhere."""
import ast
import sys
from pathlib import Path

MODELS = Path(__file__).resolve().parents[2] / "models"


def test_models_import_only_the_standard_library_and_models():
    imported = set()
    for path in sorted(MODELS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                imported |= {(path.name, alias.name) for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and not node.level:
                imported.add((path.name, node.module))
    outside = sorted((name, module) for name, module in imported
                     if module.split(".")[0] != "models" and module.split(".")[0] not in sys.stdlib_module_names)
    assert imported and outside == []
