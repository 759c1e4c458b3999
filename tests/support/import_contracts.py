"""import-linter contract types for what import-linter cannot say by itself.

import-linter squashes an external package into one node (``aiohttp``), so its own
contracts cannot say "``aiohttp.web`` only here, the ``aiohttp`` client elsewhere too".
:class:`SubmoduleProtectedContract` reads the import statements of every module that
imports the package and refuses those that reach a protected submodule from outside
the allowed importers.

Its ``acyclic_siblings`` contract counts a package with everything inside it as one node,
so a package holding two floors (``gateway.rollout``: pure policy below the store, its
mechanism above) reads as a circle. :class:`AcyclicModulesContract` looks at modules:
no module may import, directly or through others, a module that imports it back.
Configured in ``pyproject.toml`` (``[tool.importlinter]``).
"""

from __future__ import annotations

import ast
import copy
import importlib.util
from typing import Any

from importlinter import Contract, ContractCheck, fields, output

__all__ = ["AcyclicModulesContract", "SubmoduleProtectedContract"]


class SubmoduleProtectedContract(Contract):
    """Only ``allowed_importers`` (packages or modules) import ``protected_submodule``.

    ``protected_submodule`` is a dotted name inside an external package, e.g.
    ``aiohttp.web``; ``aiohttp.web_request`` and the like count as part of it.
    """

    type_name = "submodule_protected"

    protected_submodule = fields.StringField()
    allowed_importers = fields.ListField(subfield=fields.StringField())

    def check(self, graph: Any, verbose: bool) -> ContractCheck:
        protected = str(self.protected_submodule)
        package = protected.split(".")[0]
        allowed = [str(name) for name in self.allowed_importers]  # type: ignore[attr-defined]
        illegal = []
        for importer in sorted(graph.find_modules_that_directly_import(package)):
            if any(importer == a or importer.startswith(f"{a}.") for a in allowed):
                continue
            illegal.extend((importer, line) for line in _reaches(importer, protected))
        return ContractCheck(kept=not illegal, metadata={"illegal": illegal})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for importer, line in check.metadata["illegal"]:
            output.print_error(f"- {importer} -> {self.protected_submodule} (l.{line})")
            output.new_line()


def _reaches(module: str, protected: str) -> list[int]:
    """Line numbers where ``module`` imports ``protected`` (or one of its ``_`` siblings)."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return []
    with open(spec.origin, encoding="utf-8") as source:
        tree = ast.parse(source.read())
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        else:
            continue
        if any(_within(name, protected) for name in names):
            lines.append(node.lineno)
    return lines


def _within(name: str, protected: str) -> bool:
    return name == protected or name.startswith((f"{protected}.", f"{protected}_"))


class AcyclicModulesContract(Contract):
    """No import cycle among the modules of ``packages`` (TYPE_CHECKING imports count)."""

    type_name = "acyclic_modules"

    packages = fields.ListField(subfield=fields.StringField())
    ignore_imports = fields.ListField(subfield=fields.StringField(), required=False)

    def check(self, graph: Any, verbose: bool) -> ContractCheck:
        roots = {str(name) for name in self.packages}  # type: ignore[attr-defined]
        graph = copy.deepcopy(graph)
        for ignored in self.ignore_imports or ():  # type: ignore[attr-defined]
            importer, imported = (part.strip() for part in str(ignored).split("->"))
            graph.remove_import(importer=importer, imported=imported)
        cycles = []
        for module in sorted(m for m in graph.modules if m.split(".")[0] in roots):
            for imported in sorted(graph.find_modules_directly_imported_by(module)):
                if imported.split(".")[0] not in roots:
                    continue
                back = graph.find_shortest_chain(importer=imported, imported=module)
                if back is not None:  # module -> imported -> ... -> module
                    cycles.append((module, *back))
        return ContractCheck(kept=not cycles, metadata={"cycles": cycles})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for cycle in check.metadata["cycles"]:
            output.print_error("- " + " -> ".join(cycle))
            output.new_line()
