"""The import graph, from the source (``ast``): dependencies run one way, and the worker has no circle.

- no module of ``worker/`` imports another that (directly or not) imports it back, type-checking
  imports included: each part of a worker can be read and tested on its own;
- ``nstorm/`` (the API, the CLI, the records every package shares) never imports ``nimbus/``,
  ``supervisor/``, ``worker/``, ``scheduler_otd/``, ``kvstore/`` or ``ui/``, except the CLI commands
  that run a daemon or a job, which import it inside the command (a lazy entry point);
- ``worker/`` never imports a daemon (``nimbus/``, ``supervisor/``, ``ui/``).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).parents[2]
PACKAGES = ("nstorm", "nimbus", "supervisor", "worker", "scheduler_otd", "kvstore", "ui")


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> list[tuple[str, bool]]:
    """``(imported module, at module level)`` for every import of our packages in ``path``."""
    tree = ast.parse(path.read_text(), str(path))
    top_level = {id(node) for node in tree.body}
    for node in tree.body:  # `if TYPE_CHECKING:` blocks count as module level
        if isinstance(node, ast.If):
            top_level.update(id(n) for n in ast.walk(node))
    out = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            if name.split(".")[0] in PACKAGES:
                out.append((name, id(node) in top_level))
    return out


def _graph() -> dict[str, list[tuple[str, bool]]]:
    modules = {_module(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        graph[name] = [(target, top) for target, top in _imports(path) if target in modules and target != name]
    return graph


def test_the_worker_modules_import_each_other_without_a_circle() -> None:
    graph = {m: {t for t, _ in edges if t.startswith("worker.")} for m, edges in _graph().items() if m.startswith("worker.")}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        stack.append(module)
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                circle = stack[stack.index(target):] + [target]
                raise AssertionError("import circle: " + " -> ".join(circle))
            if target not in state:
                visit(target)
        stack.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)


def test_nstorm_never_imports_the_daemons_but_from_a_cli_command() -> None:
    daemons = ("nimbus", "supervisor", "worker", "scheduler_otd", "kvstore", "ui")
    wrong = []
    for module, edges in _graph().items():
        if not module.startswith("nstorm"):
            continue
        for target, top in edges:
            if target.split(".")[0] in daemons and (top or not module.startswith("nstorm.cli.")):
                wrong.append(f"{module} imports {target}")
    assert not wrong, wrong


def test_the_worker_never_imports_a_daemon() -> None:
    wrong = [f"{m} imports {t}" for m, edges in _graph().items() if m.startswith("worker")
             for t, _ in edges if t.split(".")[0] in ("nimbus", "supervisor", "ui")]
    assert not wrong, wrong
