"""Verdicts learner code cannot forge generically: disguised test names plus secret known-failing controls.

Every pass/fail is produced inside the process that runs learner code, so it could be forged there.
The grader therefore never trusts a verdict by its public name. Per grading batch it rewrites each
focused test module with a secret seed: every test function gets a fresh random name drawn like the
real ones, and a few "controls" are added: exact copies of real tests (same decorators, same body)
that end with a failing assertion. No honest implementation can pass a control. A forgery that makes
failures pass (patching pytest, the report plugin, the records, the verdict file) makes the controls
pass as well, and the submission is then flagged as tampering and scored zero. A forgery aimed at the
public test names finds none of them. What is left (reading the rewritten module to tell controls
apart) is described in docs/grading-threat-model.md.
"""

from __future__ import annotations

import ast
import copy
import random
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from pi_course_kit.core.records import TestRecord

CONTROL_SHARE = (
    0.25  # a quarter of the tests get a control: forging any one failure is a 1-in-4 gamble at best
)
MIN_CONTROLS = 4
ORDER_PLUGIN = "pi_course_order"

# Shuffles the collected items with a seed from the command line, so that a control's position next
# to its original does not give it away. Travels into the tree as tests/pi_course_order.py.
ORDER_PLUGIN_SOURCE = '''\
"""Run the collected tests in a seeded random order (written by `pi-course grade`)."""

import random


def pytest_addoption(parser):
    parser.addoption("--pi-course-order", default=None)


def pytest_collection_modifyitems(config, items):
    seed = config.getoption("--pi-course-order")
    if seed is not None:
        random.Random(seed).shuffle(items)
'''


@dataclass
class Disguise:
    """One module's secret renaming: disguised name -> public name, and which disguised names are controls."""

    names: dict[str, str] = field(default_factory=dict)
    controls: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class Verdicts:
    """The grader's reading of one run: real outcomes by public node id, and whether controls were forged."""

    by_node: dict[str, TestRecord]
    controls_expected: int
    controls_passed: int

    @property
    def tampering(self) -> bool:
        """True when a control test (which every honest implementation fails) was reported as passed."""
        return self.controls_passed > 0


def _returns_at_top(function: ast.FunctionDef) -> bool:
    """Whether the body can `return` (outside nested functions): a control must always reach its end."""
    stack: list[ast.AST] = list(function.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Return | ast.Yield | ast.YieldFrom):
            return True
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            continue
        stack.extend(ast.iter_child_nodes(node))
    return False


def _draw_name(rng: random.Random, words: list[str], taken: set[str]) -> str:
    """A fresh name made of the module's own test-name words, so controls and real tests look alike."""
    while True:
        chosen = rng.sample(words, k=min(len(words), rng.randint(5, 9)))
        name = "test_" + "_".join(chosen)
        if name not in taken:
            taken.add(name)
            return name


def disguise_module(source: str, rng: random.Random) -> tuple[str, Disguise]:
    """Rewrite a pytest module: random names for every top-level test, plus control copies."""
    tree = ast.parse(source)
    tests = [
        node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
    ]
    words = sorted({word for node in tests for word in node.name[5:].split("_") if word})
    words += [f"{word}s" for word in words[:8]] or ["case", "value", "result", "tool", "call"]
    taken = {node.name for node in tree.body if isinstance(node, ast.FunctionDef | ast.ClassDef)}
    disguise = Disguise()
    candidates = [node for node in tests if not _returns_at_top(node)]
    count = min(len(candidates), max(MIN_CONTROLS, round(CONTROL_SHARE * len(tests))))
    chosen = {id(node) for node in rng.sample(candidates, k=count)}
    controls: list[ast.FunctionDef] = []
    for node in tests:
        if id(node) in chosen:
            control = copy.deepcopy(node)
            control.name = _draw_name(rng, words, taken)
            failing = ast.parse(f"assert not {rng.choice(words)!r}")
            control.body = [*control.body, *failing.body]
            disguise.names[control.name] = node.name
            disguise.controls.add(control.name)
            controls.append(control)
        public = node.name
        node.name = _draw_name(rng, words, taken)
        disguise.names[node.name] = public
    # Controls go last, where every name their decorators use exists; the order plugin mixes them in.
    tree.body.extend(controls)
    ast.fix_missing_locations(tree)
    return ast.unparse(tree) + "\n", disguise


_NODE = re.compile(r"^(?P<file>[^:]+)::(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?P<rest>.*)$", re.DOTALL)


def disguised_nodes(nodes: Iterable[str], disguises: Mapping[str, Disguise]) -> list[str]:
    """The node ids a disguised run gives the public `nodes` (those of a module it does not disguise as
    given)."""
    found = []
    for node in nodes:
        match = _NODE.match(node)
        disguise = disguises.get(match["file"].rsplit("/", 1)[-1]) if match else None
        if match is None or disguise is None:
            found.append(node)
            continue
        secret = next((name for name, public in disguise.names.items() if public == match["name"]), None)
        found.append(f"{match['file']}::{secret or match['name']}{match['rest']}")
    return found


def read_verdicts(
    tests: Iterable[object], disguises: Mapping[str, Disguise], expected: Iterable[str]
) -> Verdicts:
    """Map the run's records back to public node ids; count the controls reported as passed.

    Each record is checked and cleaned as it is read (`TestRecord.from_json`): it comes from the process
    that ran the learner's code.
    """
    wanted = set(expected)
    by_node: dict[str, TestRecord] = {}
    control_outcomes: dict[str, str] = {}
    for data in tests:
        try:
            test = data if isinstance(data, TestRecord) else TestRecord.from_json(data)
        except ValueError:
            continue
        match = _NODE.match(test.nodeid)
        if match is None:
            continue
        disguise = disguises.get(match["file"].rsplit("/", 1)[-1])
        public_name = disguise.names.get(match["name"]) if disguise else None
        if disguise is None or public_name is None:
            continue  # a node id the grader did not write (a public name, or made up) counts for nothing
        node = f"{match['file']}::{public_name}{match['rest']}"
        if match["name"] in disguise.controls:
            # The worst report of a control wins: one "passed" among duplicates is enough to flag.
            if control_outcomes.get(node + "#" + match["name"]) != "passed":
                control_outcomes[node + "#" + match["name"]] = test.outcome
        elif node in wanted:
            # The first report of a real test wins, and only if it is not contradicted by a later one.
            previous = by_node.get(node)
            if previous is None:
                by_node[node] = replace(test, nodeid=node)
            elif previous.outcome != test.outcome:
                by_node[node] = replace(previous, outcome="failed", message="conflicting reports")
    passed = sum(1 for outcome in control_outcomes.values() if outcome == "passed")
    expected_controls = sum(len(d.controls) for d in disguises.values())
    return Verdicts(by_node, expected_controls, passed)
