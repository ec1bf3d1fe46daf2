"""The shapes of a line's matrix-product operands, read from the line itself.

When a cell raises a shape error in a product, torch says "mat1 and mat2 shapes cannot be
multiplied (384x1 and 64x6)": sizes of flattened views, not the student's tensors. This
reads the line that raised (``a @ b``, ``torch.matmul(a, b)``, ``torch.bmm(a, b)``,
``a.matmul(b)``) and works out each operand's shape from the lesson's shapes (its spec's
``shapes``) through the usual reshaping calls (``.transpose``, ``.T``, ``.mT``,
``.permute``, ``.view``/``.reshape``, ``.unsqueeze``, ``.squeeze``, indexing), without
running anything. An operand it cannot read is left out; nothing is guessed.

Shape legend: shapes are tuples of ints, as ``lesson.shapes`` gives them.
"""

from __future__ import annotations

import ast

#: Calls that keep their tensor's shape.
_SAME = {"contiguous", "float", "double", "half", "clone", "detach", "to", "cpu", "abs",
         "exp", "relu", "softmax", "requires_grad_", "type"}


def _ints(nodes) -> list | None:
    out = []
    for n in nodes:
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub) and \
                isinstance(n.operand, ast.Constant) and isinstance(n.operand.value, int):
            out.append(-n.operand.value)
        elif isinstance(n, ast.Constant) and isinstance(n.value, int) and \
                not isinstance(n.value, bool):
            out.append(n.value)
        elif isinstance(n, (ast.Tuple, ast.List)):
            inner = _ints(n.elts)
            if inner is None:
                return None
            out.extend(inner)
        else:
            return None
    return out


def _matmul(a, b):
    if a is None or b is None or len(a) < 2 or len(b) < 2 or a[-1] != b[-2]:
        return None
    batch = a[:-2] if len(a) >= len(b) else b[:-2]
    return tuple(batch) + (a[-2], b[-1])


def _swap(shape, i, j):
    n = len(shape)
    if not (-n <= i < n and -n <= j < n):
        return None
    s = list(shape)
    s[i], s[j] = s[j], s[i]
    return tuple(s)


def shape_of(node, shapes: dict):
    """The shape of expression ``node`` (an ast node), or None when it cannot be read."""
    if isinstance(node, ast.Name):
        return tuple(shapes[node.id]) if node.id in shapes else None
    if isinstance(node, ast.Attribute):
        base = shape_of(node.value, shapes)
        if base is None:
            return None
        if node.attr == "T":
            return tuple(reversed(base))
        if node.attr == "mT":
            return _swap(base, -2, -1) if len(base) >= 2 else None
        return None
    if isinstance(node, ast.Subscript):
        base = shape_of(node.value, shapes)
        index = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if base is None or len(index) > len(base):
            return None
        out = []
        for axis, part in enumerate(index):
            if isinstance(part, ast.Slice) and part.lower is part.upper is part.step is None:
                out.append(base[axis])
            elif _ints([part]) is None:
                return None
        return tuple(out) + tuple(base[len(index):])
    if isinstance(node, ast.BinOp):
        left, right = shape_of(node.left, shapes), shape_of(node.right, shapes)
        if isinstance(node.op, ast.MatMult):
            return _matmul(left, right)
        return left if right is None else right if left is None else (
            left if left == right else None)
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute):
            owner = func.value
            is_module = isinstance(owner, ast.Name) and owner.id in ("torch", "np", "F")
            if is_module:
                args = [shape_of(a, shapes) for a in node.args]
                if func.attr in ("matmul", "bmm") and len(args) == 2:
                    return _matmul(*args)
                if func.attr in ("transpose", "swapaxes") and len(node.args) == 3:
                    axes = _ints(node.args[1:])
                    return _swap(args[0], *axes) if args[0] and axes else None
                return None
            base = shape_of(owner, shapes)
            if base is None:
                return None
            args = _ints(node.args)
            if func.attr in ("transpose", "swapaxes", "swapdims") and args and len(args) == 2:
                return _swap(base, *args)
            if func.attr == "permute" and args and sorted(a % len(base) for a in args) == \
                    list(range(len(base))):
                return tuple(base[a] for a in args)
            if func.attr in ("view", "reshape") and args:
                known = 1
                for a in args:
                    known *= a if a != -1 else 1
                total = 1
                for s in base:
                    total *= s
                return tuple(total // known if a == -1 else a for a in args)
            if func.attr == "unsqueeze" and args and len(args) == 1:
                d = args[0] % (len(base) + 1)
                return base[:d] + (1,) + base[d:]
            if func.attr == "squeeze":
                if not args:
                    return tuple(s for s in base if s != 1)
                d = args[0] % len(base)
                return base[:d] + base[d + 1:] if base[d] == 1 else base
            if func.attr in ("matmul", "bmm") and len(node.args) == 1:
                return _matmul(base, shape_of(node.args[0], shapes))
            if func.attr in _SAME:
                return base
        return None
    return None


def product_operands(line: str, shapes: dict) -> list:
    """[(left source, left shape, right source, right shape)] of each matrix product in
    ``line`` whose two operand shapes can be read (the line as written, stripped)."""
    try:
        tree = ast.parse(line.strip())
    except SyntaxError:
        return []
    out = []
    for node in ast.walk(tree):
        pair = None
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            pair = (node.left, node.right)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr in ("matmul", "bmm"):
            owner = node.func.value
            if isinstance(owner, ast.Name) and owner.id == "torch" and len(node.args) == 2:
                pair = tuple(node.args)
            elif not (isinstance(owner, ast.Name) and owner.id in ("torch", "np")) and \
                    len(node.args) == 1:
                pair = (owner, node.args[0])
        if pair:
            a, b = shape_of(pair[0], shapes), shape_of(pair[1], shapes)
            if a is not None and b is not None:
                out.append((ast.unparse(pair[0]), list(a), ast.unparse(pair[1]), list(b)))
    return out


def misfit(line: str, shapes: dict) -> str:
    """A sentence on the first product in ``line`` whose operands do not fit, with both
    shapes ("`query` is [1, 6, 64] and `key.transpose(0, 1)` is [6, 1, 64]: ..."), or ""."""
    for left, a, right, b in product_operands(line, shapes):
        if len(a) >= 2 and len(b) >= 2 and a[-1] != b[-2]:
            return (f"`{left}` is {a} and `{right}` is {b}: the last axis of the left "
                    f"({a[-1]}) must equal the second-to-last axis of the right ({b[-2]})")
    return ""


def swapped(line: str, shapes: dict) -> str:
    """"`v_heads` @ `head_weights`" when the first product in ``line`` whose operands do
    not fit would fit with its two operands the other way round, or ""."""
    for left, a, right, b in product_operands(line, shapes):
        if len(a) >= 2 and len(b) >= 2 and a[-1] != b[-2] and b[-1] == a[-2]:
            return f"`{left}` @ `{right}`"
    return ""


_TRANSPOSES = ("transpose", "swapaxes", "swapdims", "permute")


def _untransposed(node):
    """The tensor ``node`` transposes (``t.transpose(1, 2)``, ``t.T``, ``t.mT``,
    ``t.permute(...)``, ``torch.transpose(t, ...)``), or None."""
    if isinstance(node, ast.Attribute) and node.attr in ("T", "mT"):
        return node.value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
            node.func.attr in _TRANSPOSES:
        owner = node.func.value
        if isinstance(owner, ast.Name) and owner.id in ("torch", "np"):
            return node.args[0] if node.args else None
        return owner
    return None


def product_repair(line: str, shapes: dict, wants: dict | None = None):
    """The one small change that makes the first product in ``line`` whose operands do
    not fit work, or None: ``("swapped", "`a` @ `b`")`` (its two operands the other way
    round) or ``("transposed", "`b.transpose(1, 2)`")`` (an operand's transpose dropped).

    When the product is the whole right side of an assignment to a name of ``wants``
    ({name: shape}), a change counts only if its product has that name's shape. Two
    changes that both count name nothing: the caller says what is certain instead.
    """
    try:
        tree = ast.parse(line.strip())
    except SyntaxError:
        return None
    want = None
    if isinstance(tree.body[0] if tree.body else None, ast.Assign):
        stmt = tree.body[0]
        if len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            want = (stmt.value, (wants or {}).get(stmt.targets[0].id))
    for node in ast.walk(tree):
        pair = None
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            pair = (node.left, node.right)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr in ("matmul", "bmm"):
            owner = node.func.value
            if isinstance(owner, ast.Name) and owner.id == "torch" and len(node.args) == 2:
                pair = tuple(node.args)
            elif not (isinstance(owner, ast.Name) and owner.id in ("torch", "np")) and \
                    len(node.args) == 1:
                pair = (owner, node.args[0])
        if not pair:
            continue
        a, b = shape_of(pair[0], shapes), shape_of(pair[1], shapes)
        if a is None or b is None or _matmul(a, b) is not None:
            continue  # (this product fits, or cannot be read: the next one)
        target = want[1] if want and want[0] is node and want[1] else None
        found = []
        for change, result, operand in (
                ("swapped", _matmul(b, a), pair),
                ("transposed", _matmul(shape_of(_untransposed(pair[0]), shapes)
                                       if _untransposed(pair[0]) else None, b), pair[0]),
                ("transposed", _matmul(a, shape_of(_untransposed(pair[1]), shapes)
                                       if _untransposed(pair[1]) else None), pair[1])):
            if result is not None and (target is None or tuple(result) == tuple(target)):
                found.append((change, f"`{ast.unparse(operand[0])}` @ `{ast.unparse(operand[1])}`"
                              if change == "swapped" else f"`{ast.unparse(operand)}`"))
        return found[0] if len(found) == 1 else None
    return None


def _has_product(node) -> bool:
    return any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.MatMult) or (
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
        and n.func.attr in ("matmul", "bmm", "einsum")) for n in ast.walk(node))


def cropped(source: str, shapes: dict, wants: dict) -> list:
    """[(name, product source, its shape, the index)] for each top-level assignment in
    ``source`` to a name of ``wants`` ({name: shape}) whose value indexes a part out of a
    matrix product of another shape than that name's (``(query.T @ key)[:, :6, :6]``: a
    [1, 64, 64] product cut to [1, 6, 6]). Shapes are read as :func:`shape_of` reads them."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    out = []
    for stmt in tree.body:
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name) and stmt.targets[0].id in wants):
            continue
        for node in ast.walk(stmt.value):
            if isinstance(node, ast.Subscript) and _has_product(node.value):
                inner = shape_of(node.value, shapes)
                want = tuple(wants[stmt.targets[0].id])
                if inner is not None and len(inner) == len(want) and tuple(inner) != want:
                    index = node.slice.elts if isinstance(node.slice, ast.Tuple) else \
                        [node.slice]
                    out.append((stmt.targets[0].id, ast.unparse(node.value), list(inner),
                                ", ".join(ast.unparse(i) for i in index)))
                    break
    return out
