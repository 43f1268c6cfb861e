"""The family of an idea: a hash of its model code with literals and local names stripped.

Agents re-roll: the same idea again with another width, another constant, renamed
variables, a new comment, a reordered docstring. Each re-roll is another draw of the
test, so the service groups them (PROTOCOL.md 6: a report says how many attempts of
its family came before it) by hashing the code's syntax tree after

- docstrings and comments are dropped (comments never reach the tree),
- every literal becomes a placeholder of its kind (number, string, bytes, ...), and a
  list, tuple, set or dict of literals alone (a grid, a shape) one placeholder,
- every name the file binds itself (functions, classes, arguments, variables,
  attributes it assigns on ``self``) becomes a placeholder, numbered in order of
  first appearance, while imported names and the attributes of library objects
  (``nn.Linear``, ``torch.tanh``) stay: they are what the idea *does*.

A different architecture (another layer, another activation) is another family: this is a
grouping of re-rolls, not a judge of novelty, and the false-discovery accounting over
every idea of a track (``bench.stats.bh_qvalues``) does not depend on it.
"""

from __future__ import annotations

import ast
import hashlib
import json
from typing import Any

from bench import pyast

SCHEME = "ast-v1"


class _Normalizer(ast.NodeTransformer):
    def __init__(self, imported: set[str], own: set[str]) -> None:
        self.imported = imported
        self.own = own
        self.names: dict[str, str] = {}

    def _name(self, name: str) -> str:
        if name in self.imported or name not in self.own:
            return name  # a library's name, or a builtin: part of what the code does
        return self.names.setdefault(name, f"_{len(self.names)}")

    def _literals(self, node: ast.List | ast.Tuple | ast.Set | ast.Dict) -> ast.AST:
        """A container of literals only (a grid, a shape) is one literal, whatever its length."""
        items = [*node.keys, *node.values] if isinstance(node, ast.Dict) else node.elts
        if items and all(isinstance(item, ast.Constant) for item in items):
            return ast.copy_location(ast.Constant(value=f"<{type(node).__name__}>"), node)
        self.generic_visit(node)
        return node

    visit_List = _literals
    visit_Tuple = _literals
    visit_Set = _literals
    visit_Dict = _literals

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        kind = "None" if node.value is None else type(node.value).__name__
        return ast.copy_location(ast.Constant(value=f"<{kind}>"), node)

    def visit_Name(self, node: ast.Name) -> ast.AST:
        node.id = self._name(node.id)
        return node

    def visit_arg(self, node: ast.arg) -> ast.AST:
        node.arg = self._name(node.arg)
        node.annotation = None
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        self.generic_visit(node)
        node.attr = self._name(node.attr)
        return node

    def visit_keyword(self, node: ast.keyword) -> ast.AST:
        self.generic_visit(node)
        if node.arg is not None:
            node.arg = self._name(node.arg)
        return node

    def _body(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> ast.AST:
        node.name = self._name(node.name)
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            node.body = body[1:] or [ast.Pass()]  # the docstring
        if not isinstance(node, ast.ClassDef):
            node.returns = None
        self.generic_visit(node)
        return node

    visit_FunctionDef = _body
    visit_AsyncFunctionDef = _body
    visit_ClassDef = _body


def _bound_names(tree: ast.Module) -> tuple[set[str], set[str]]:
    """(names bound by imports, names the file binds itself)."""
    imported: set[str] = set()
    own: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                imported.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            own.add(node.name)
        elif isinstance(node, ast.arg):
            own.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            own.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            own.add(node.attr)  # self.encoder = ...: the file's own attribute
        elif isinstance(node, ast.keyword) and node.arg is not None:
            pass  # keyword names belong to the callee
    return imported, own - imported


def normalized(code: str, tree: ast.Module | None = None) -> str:
    """The normalized syntax tree of ``code`` as text (what ``family_of`` hashes); ``tree``:
    the file already parsed, which this then normalizes in place (saves a second parse)."""
    tree = tree if tree is not None else pyast.parse(code)
    body = tree.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        tree.body = body[1:]  # the module docstring
    imported, own = _bound_names(tree)
    _Normalizer(imported, own).visit(tree)
    return ast.dump(tree, annotate_fields=False, include_attributes=False)


def family_of(code: str, tree: ast.Module | None = None) -> str:
    """``ast-v1:`` + the first 16 hex digits of sha256 of the normalized tree; code that
    does not parse falls back to the hash of its text (it is refused before judging).
    ``tree``: ``code`` already parsed, consumed here (see ``normalized``)."""
    try:
        text = normalized(code, tree)
    except (SyntaxError, ValueError, RecursionError):
        text = code
    return f"{SCHEME}:{hashlib.sha256(text.encode()).hexdigest()[:16]}"


GRAPH_SCHEME = "graph-v1"
ZERO = "<zero>"
# Ops that hand their first input on unchanged (a copy, an alias, a view of the same data: a
# shape is a literal the family ignores anyway).
PASS_THROUGH = frozenset({
    "aten.clone.default", "aten.alias.default", "aten.detach.default", "aten.contiguous.default",
    "aten.lift_fresh_copy.default", "aten.view.default", "aten.reshape.default", "aten._unsafe_view.default",
    "aten.flatten.using_ints", "aten.dropout.default",
})
# binary op -> (the literal operand that makes it the other operand, whether it may stand first)
NEUTRAL = {"aten.add.Tensor": (0, True), "aten.sub.Tensor": (0, False), "aten.mul.Tensor": (1, True),
           "aten.div.Tensor": (1, False)}


# Ops whose second application undoes the first (``-(-h)``), ops whose second application adds
# nothing (``relu(relu(h))``), and a literal's operation undone by its inverse with a literal
# (``h * 2 / 2``, ``h + c - c``): folded to what the first was applied to, or to the first
# (red team, session 36: each was bit for bit the same model and a fresh family). The family only
# counts attempts, so folding two near-equal models (``h * 3 / 3``, ``h * a / b``) into one is the
# conservative side: more attempts of one hypothesis, never fewer.
INVOLUTIONS = frozenset({"aten.neg.default"})
IDEMPOTENT = frozenset({"aten.relu.default", "aten.abs.default", "aten.sign.default", "aten.floor.default",
                        "aten.ceil.default", "aten.trunc.default", "aten.round.default"})
INVERSE = {"aten.mul.Tensor": "aten.div.Tensor", "aten.div.Tensor": "aten.mul.Tensor",
           "aten.add.Tensor": "aten.sub.Tensor", "aten.sub.Tensor": "aten.add.Tensor"}


def _alpha(node: dict[str, Any]) -> Any:
    """A node's ``alpha`` keyword (1 when it has none, or its keywords are not a mapping)."""
    kwargs = node.get("kwargs")
    return kwargs.get("alpha", 1) if isinstance(kwargs, dict) else 1


def _applied(node: dict[str, Any], memo: dict[str, str]) -> tuple[str, str] | None:
    """(op, the hash it was applied to) of a node ``_identity_of`` may undo: one of
    ``INVOLUTIONS`` or ``IDEMPOTENT`` on a node, or one of ``INVERSE`` of a node and a literal
    number (either side for a product or a sum, the node first otherwise); else None."""
    target, args = node.get("target"), node.get("args")
    if not isinstance(target, str) or not isinstance(args, list) or not args:
        return None
    nodes = [memo.get(str(a["$node"])) if isinstance(a, dict) and "$node" in a else None for a in args]
    if target in INVOLUTIONS or target in IDEMPOTENT:
        return (target, nodes[0]) if len(args) == 1 and nodes[0] is not None else None
    if target not in INVERSE or len(args) != 2 or _alpha(node) != 1:
        return None
    literal = [isinstance(a, int | float) and not isinstance(a, bool) for a in args]
    if nodes[0] is not None and literal[1]:
        return target, nodes[0]
    if target in ("aten.mul.Tensor", "aten.add.Tensor") and literal[0] and nodes[1] is not None:
        return target, nodes[1]
    return None


def _identity_of(node: dict[str, Any], memo: dict[str, str],
                 made: dict[str, tuple[str, str]] | None = None) -> str | None:
    """The hash ``node`` equals when it computes an exact no-op of one input (``PASS_THROUGH``;
    adding or subtracting 0 or a zero, multiplying or dividing by 1), ``ZERO`` when it is a
    product with 0, or what it undoes or repeats (``made``: each folded-able node's ``_applied``
    by its hash); else None."""
    target, args = node.get("target"), node.get("args")
    if not isinstance(target, str) or not isinstance(args, list) or not args:
        return None

    def ref(value: Any) -> str | None:
        return memo.get(str(value["$node"])) if isinstance(value, dict) and "$node" in value else None

    def number(value: Any) -> float | None:
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

    applied = _applied(node, memo) if made is not None else None
    if applied is not None and made is not None:
        op, of = applied
        before = made.get(of)
        if op in IDEMPOTENT and before is not None and before[0] == op:
            return of  # relu(relu(h)) is relu(h)
        if before is not None and (op in INVOLUTIONS and before[0] == op or before[0] == INVERSE.get(op)):
            return before[1]  # -(-h), h * c / c, h + c - c: h
    if target in PASS_THROUGH:
        rate = number(args[1]) if len(args) > 1 else None
        return ref(args[0]) if target != "aten.dropout.default" or rate == 0 else None
    if target not in NEUTRAL or len(args) != 2 or _alpha(node) != 1:
        return None
    neutral, commutes = NEUTRAL[target]
    for other, this in ((args[0], args[1]), (args[1], args[0])) if commutes else ((args[0], args[1]),):
        kept = ref(other)
        if kept is None:
            continue
        if number(this) == neutral or (neutral == 0 and ref(this) == ZERO):
            return kept
        if target == "aten.mul.Tensor" and (number(this) == 0 or ref(this) == ZERO):
            return ZERO
    return None


def graph_family(doc: dict[str, Any]) -> str:
    """``graph-v1:`` + 16 hex digits: the family of a captured model (issue 25.6), from its
    graph (``bench.graph``'s document), not its text. What the source family missed (an import
    alias, a no-op statement, reordered statements, an added ``nn.Identity()``) leaves no trace
    in a graph; this hash then drops what a re-roll changes:

    - every literal becomes its kind (a width, a constant, a shape: ``<int>``, ``<float>``; a
      list of numbers one ``<ints>``), dtypes and devices stay (they are what an op does);
    - tensor inputs are their kind (parameter, buffer, constant), without names or shapes;
    - each node is hashed from its op and its inputs' hashes (a Merkle tree from the
      outputs), so independent branches in another order, renamed nodes and dead code
      are the same family;
    - an exact no-op is its input (``_identity_of``: copies, aliases, views, adding 0 or a
      product with 0, multiplying or dividing by 1): the red team's ``y + 0.0`` applied k
      times, a number of times the file drew from the clock, was k families; and an op undone
      or repeated is folded (``INVOLUTIONS``, ``IDEMPOTENT``, ``INVERSE``: ``-(-h)``,
      ``relu(relu(h))``, ``h * 2 / 2``).

    A graph the parent already checked (``build_graph``) is what it is given; anything else
    still hashes (a bounded walk), never raises on its shape."""
    inputs = {str(i.get("name", "")): f"<{i.get('kind')}>" for i in doc.get("inputs", []) if isinstance(i, dict)}
    memo: dict[str, str] = {}  # node name -> its hash; a checked graph names only earlier nodes
    made: dict[str, tuple[str, str]] = {}  # a hash -> the op and the hash it applied (``_applied``)

    def literal(value: Any) -> Any:
        if isinstance(value, dict):
            if "$node" in value:
                return memo.get(str(value["$node"]), "<unknown>")
            if "$tuple" in value:
                return literal(value["$tuple"])
            if "$float" in value:
                return "<float>"
            return {str(k): literal(v) for k, v in value.items()}  # dtype, device, layout: kept
        if isinstance(value, list):
            if value and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value):
                return "<ints>" if all(isinstance(v, int) for v in value) else "<floats>"
            return [literal(v) for v in value]
        if isinstance(value, bool) or value is None:
            return value
        return f"<{type(value).__name__}>"

    outputs = []
    for node in doc.get("nodes", []):
        if not isinstance(node, dict):
            continue
        name = str(node.get("name"))
        if node.get("op") == "placeholder":
            memo[name] = inputs.get(name, "<input>")
        elif node.get("op") == "output":
            outputs.append(literal(node.get("args")))
        else:
            same = _identity_of(node, memo, made)
            if same is not None:  # an exact no-op: the node is its input (red team: y + 0.0, k times)
                memo[name] = same
                continue
            body = json.dumps([node.get("target"), literal(node.get("args")), literal(node.get("kwargs"))],
                              sort_keys=True)
            memo[name] = hashlib.sha256(body.encode()).hexdigest()
            applied = _applied(node, memo)
            if applied is not None:
                made.setdefault(memo[name], applied)
    text = json.dumps([GRAPH_SCHEME, outputs], sort_keys=True)
    return f"{GRAPH_SCHEME}:{hashlib.sha256(text.encode()).hexdigest()[:16]}"
