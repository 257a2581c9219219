"""An import-linter contract of turnback's own: no import cycle, of any length, anywhere.

import-linter's ``layers`` contract finds an import going up between layers, and its
``acyclic_siblings`` a cycle between the packages of one parent; neither sees a cycle through a
package's ``__init__`` and a module below it, nor says what a cycle is made of. This one takes
every import grimp found (at a module's top, inside a function, or under ``TYPE_CHECKING``) and
fails on each group of modules that import each other, printing one cycle of it, import by
import, with the line of each.
"""

from __future__ import annotations

from collections import deque

import grimp
from importlinter.application import output
from importlinter.domain.contract import Contract, ContractCheck


def cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """One shortest cycle of each group of modules that import each other (a strongly connected
    component of more than one module), each as the modules in import order."""
    found: list[list[str]] = []
    for group in _components(graph):
        start = min(group)
        found.append(_shortest_cycle(graph, start, group))
    return sorted(found)


def _components(graph: grimp.ImportGraph) -> list[set[str]]:
    """Tarjan's algorithm, iteratively: the strongly connected components of more than one."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, imported = work[-1]
            for other in imported:
                if other not in index:
                    index[other] = low[other] = len(index)
                    stack.append(other)
                    on_stack.add(other)
                    work.append(
                        (other, iter(sorted(graph.find_modules_directly_imported_by(other))))
                    )
                    break
                if other in on_stack:
                    low[module] = min(low[module], index[other])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[module])
                if low[module] == index[module]:
                    group = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.add(member)
                        if member == module:
                            break
                    if len(group) > 1:
                        groups.append(group)
    return groups


def _shortest_cycle(graph: grimp.ImportGraph, start: str, group: set[str]) -> list[str]:
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        module = queue.popleft()
        for other in sorted(graph.find_modules_directly_imported_by(module) & group):
            if other == start:
                path = [module]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return path[::-1]
            if other not in came_from:
                came_from[other] = module
                queue.append(other)
    raise AssertionError(f"{start} is in no cycle")  # a component always has one


class AcyclicContract(Contract):
    """Contract type ``acyclic``: no module imports itself through others."""

    type_name = "acyclic"

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        found = cycles(graph)
        lines = {
            (a, b): sorted(
                {d["line_number"] for d in graph.get_import_details(importer=a, imported=b)}
            )
            for cycle in found
            for a, b in zip(cycle, [*cycle[1:], cycle[0]], strict=True)
        }
        return ContractCheck(kept=not found, metadata={"cycles": found, "lines": lines})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for cycle in check.metadata["cycles"]:
            output.print_error(f"{cycle[0]} imports itself:", bold=True)
            for a, b in zip(cycle, [*cycle[1:], cycle[0]], strict=True):
                where = ", ".join(f"l.{n}" for n in check.metadata["lines"][(a, b)])
                output.indent_cursor()
                output.print_error(f"{a} -> {b} ({where})")
            output.new_line()
