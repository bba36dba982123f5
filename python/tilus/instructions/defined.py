"""The methods of the definition-driven instructions, made from their definitions in the C++ core
(``tilus._C.instruction_defs()``, ``include/tilus/ir/inst_def.h``): an instruction that is data
alone (its operands, scalars and attributes) needs no Python code of its own. Its method takes
the operands and scalars in the definition's order, then the attributes as keywords with their
defaults; its docstring is the definition's summary and traits. A method of that name written by
hand (a richer signature) wins."""
import inspect

from .. import _C

_P = inspect.Parameter


def _doc(d):
    lines = [d["summary"][:1].upper() + d["summary"][1:] + "."]
    for o in d["operands"]:
        what = f"a {o['scopes']} tensor" + (f" of {o['dtype']}" if o["dtype"] else "")
        lines.append(f"``{o['name']}``: {o['doc'] or what}.")
    for s in d["scalars"]:
        lines.append(f"``{s['name']}``: {s['doc'] or ('an integer scalar' if s['integer'] else 'a scalar')}"
                     f"{' (optional)' if s['optional'] else ''}.")
    for a in d["attrs"]:
        allowed = f" (one of {', '.join(a['allowed'])})" if a["allowed"] else ""
        lines.append(f"``{a['name']}``: {a['type']}, default {a['default'] or 'required'}{allowed}.")
    if d["min_sm"]:
        lines.append(f"Needs sm_{d['min_sm']} or newer on the GPU.")
    return "\n".join(lines)


def _default(a):
    v = a["default"]
    if v == "":
        return _P.empty
    return {"int": int, "bool": lambda s: s == "true", "str": str}[a["type"]](v)


def _method(d, args):
    """The method of definition `d`; `args` converts the arguments (see install)."""
    params = [_P("self", _P.POSITIONAL_OR_KEYWORD)]
    params += [_P(o["name"], _P.POSITIONAL_OR_KEYWORD) for o in d["operands"]]
    params += [_P(s["name"], _P.POSITIONAL_OR_KEYWORD, default=None if s["optional"] else _P.empty)
               for s in d["scalars"]]
    params += [_P(a["name"], _P.KEYWORD_ONLY, default=_default(a)) for a in d["attrs"]]
    sig = inspect.Signature(params)
    name = d["name"]

    def method(self, *a, **kw):
        bound = sig.bind(self, *a, **kw)
        bound.apply_defaults()
        v = bound.arguments
        loc = args.here()
        tensors = {o["name"]: args.tensor(v[o["name"]], o, f"{name}: {o['name']}", loc) for o in d["operands"]}
        scalars = {s["name"]: None if v[s["name"]] is None else args.scalar(v[s["name"]], f"{name}: {s['name']}", loc)
                   for s in d["scalars"]}
        attrs = {a["name"]: (str(v[a["name"]]).lower() if a["type"] == "bool" else v[a["name"]]) for a in d["attrs"]}
        args.builder().defined(name, tensors, scalars, attrs, loc)

    method.__name__ = name
    method.__qualname__ = d["method"]
    method.__doc__ = _doc(d)
    method.__signature__ = sig
    return method


def install(script, groups, wrap, args):
    """Adds the definition-driven instructions' methods: to `script` (no group) or to the class
    `groups[group]`, each wrapped by `wrap(fn, pure)` as the hand-written methods are. `args` has
    here(), builder(), tensor(x, operand, what, loc) and scalar(x, what, loc)."""
    for d in _C.instruction_defs():
        if not d["defined"]:
            continue
        cls = script if not d["group"] else groups[d["group"]]
        if d["method"] in vars(cls):
            continue
        fn = _method(d, args)
        wrapped = wrap(fn, False)
        wrapped.__name__ = d["method"]
        wrapped.__signature__ = fn.__signature__
        setattr(cls, d["method"], wrapped)
