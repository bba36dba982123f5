"""Pictures of register layouts: which thread holds each tile element, in which slot.

    print(tilus.visualize_layout(tilus.spatial([4, 8]) * tilus.local([2, 1])))
    tilus.visualize_layout(layout, file="layout.svg")     # also .png, with matplotlib

NVIDIA Tilus has ``visualize_layout(layout)`` returning the same kind of table as text; this one
also draws it.
"""
import colorsys
import html
import os
import re

from ._C import CompileError, RegisterLayout

_CELL_W, _CELL_H, _MARGIN = 56, 30, 28


def _grid(layout):
    """The layout's tile as rows x columns of cells, each the sorted list of (thread, slot) that
    hold the element. A rank-1 tile is one row; leading dims of a higher rank fold into rows."""
    shape = list(layout.shape) or [1]
    cols = shape[-1]
    rows = 1
    for s in shape[:-1]:
        rows *= s
    cells = [[[] for _ in range(cols)] for _ in range(rows)]
    for thread in range(layout.num_threads):
        for slot in range(layout.local_size):
            index = list(layout.map(thread, slot)) or [0]
            row = 0
            for d, i in enumerate(index[:-1]):
                row = row * shape[d] + i
            cells[row][index[-1]].append((thread, slot))
    for r in cells:
        for c in r:
            c.sort()
    return cells


def _label(owners):
    if not owners:
        return "-"
    threads = sorted({t for t, _ in owners})
    slots = sorted({s for _, s in owners})
    who = f"T{threads[0]}" if len(threads) == 1 else "T" + ",".join(str(t) for t in threads)
    return f"{who}:{slots[0]}" if len(slots) == 1 else f"{who}:{','.join(str(s) for s in slots)}"


def _color(thread):
    # Neighbouring threads in contrasting hues; light enough for black text.
    h = (thread * 0.618033988749895) % 1.0
    r, g, b = colorsys.hls_to_rgb(h, 0.82, 0.65)
    return f"#{int(r * 255):02x}{int(g * 255):02x}{int(b * 255):02x}"


def _text(layout, cells):
    labels = [[_label(c) for c in row] for row in cells]
    width = max(len(x) for row in labels for x in row)
    lines = [repr(layout)]
    for row in labels:
        lines.append(" ".join(x.rjust(width) for x in row))
    return "\n".join(lines)


def _svg(layout, cells):
    rows, cols = len(cells), len(cells[0])
    w, h = 2 * _MARGIN + cols * _CELL_W, 2 * _MARGIN + rows * _CELL_H + 20
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
           'font-family="monospace" font-size="11">',
           f'<title>{html.escape(repr(layout))}</title>',
           f'<text x="{_MARGIN}" y="16">{html.escape(repr(layout))}</text>']
    for c in range(cols):
        out.append(f'<text x="{_MARGIN + c * _CELL_W + _CELL_W // 2}" y="{_MARGIN + 14}" text-anchor="middle" '
                   f'fill="#666">{c}</text>')
    for r in range(rows):
        y = _MARGIN + 20 + r * _CELL_H
        out.append(f'<text x="{_MARGIN - 6}" y="{y + _CELL_H // 2 + 4}" text-anchor="end" fill="#666">{r}</text>')
        for c in range(cols):
            owners = cells[r][c]
            x = _MARGIN + c * _CELL_W
            fill = _color(owners[0][0]) if owners else "#ffffff"
            out.append(f'<rect x="{x}" y="{y}" width="{_CELL_W}" height="{_CELL_H}" fill="{fill}" stroke="#333" '
                       'stroke-width="0.5"/>')
            out.append(f'<text x="{x + _CELL_W // 2}" y="{y + _CELL_H // 2 + 4}" text-anchor="middle" '
                       f'data-row="{r}" data-col="{c}">{html.escape(_label(owners))}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _png(layout, cells, file):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Rectangle
    except ImportError:
        raise ImportError("tilus.visualize_layout: writing a PNG needs matplotlib (pip install matplotlib); "
                          "an .svg file needs nothing") from None
    rows, cols = len(cells), len(cells[0])
    fig, ax = plt.subplots(figsize=(max(2.0, cols * 0.7), max(1.5, rows * 0.4 + 0.6)))
    for r in range(rows):
        for c in range(cols):
            owners = cells[r][c]
            fill = _color(owners[0][0]) if owners else "#ffffff"
            ax.add_patch(Rectangle((c, rows - 1 - r), 1, 1, facecolor=fill, edgecolor="#333", linewidth=0.5))
            ax.text(c + 0.5, rows - 0.5 - r, _label(owners), ha="center", va="center", fontsize=7, family="monospace")
    ax.set_xlim(0, cols)
    ax.set_ylim(0, rows)
    ax.set_xticks([c + 0.5 for c in range(cols)], [str(c) for c in range(cols)])
    ax.set_yticks([rows - 0.5 - r for r in range(rows)], [str(r) for r in range(rows)])
    ax.set_title(repr(layout), fontsize=8)
    ax.set_aspect("auto")
    fig.tight_layout()
    fig.savefig(file, dpi=150)
    plt.close(fig)


# A layout as the IR prints it: layout(shape=[...], modes=[...], spatial=[...], local=[...]),
# a replicated spatial axis of n threads as rn.
_PRINTED = re.compile(r"layout\(shape=\[([^\]]*)\], modes=\[([^\]]*)\], spatial=\[([^\]]*)\], "
                      r"local=\[([^\]]*)\]\)")


def _layout(layout):
    """A RegisterLayout from one, or from the text the IR prints for one (what ``k.ir(...)`` shows
    for the layouts the compiler inferred)."""
    if isinstance(layout, RegisterLayout):
        return layout
    if isinstance(layout, str):
        found = _PRINTED.findall(layout)
        if len(found) == 1:
            def ints(text):
                return [-int(x[1:]) if x.startswith("r") else int(x) for x in text.replace(" ", "").split(",") if x]
            shape, modes, spatial, local = (ints(t) for t in found[0])
            return RegisterLayout(shape, modes, spatial, local)
        why = "none" if not found else f"{len(found)}"
        raise CompileError(f"tilus.visualize_layout: a layout's text holds one 'layout(shape=[...], modes=[...], "
                           f"spatial=[...], local=[...])' as the IR prints it; this one holds {why}: {layout[:200]!r}")
    raise CompileError(f"tilus.visualize_layout: expects a RegisterLayout (tilus.spatial(...), ...) or the text of one "
                       f"as the IR prints it (k.ir(...)), got {type(layout).__name__}")


def visualize_layout(layout, file=None):
    """A table of a register layout's tile: each cell shows the thread that holds the element and
    the slot it holds it in ("T5:1": thread 5, slot 1; a replicated element lists every thread).
    A rank-1 tile is one row; the leading dims of a higher rank fold into rows.

    ``layout`` is a RegisterLayout (``tilus.spatial(4, 8) * tilus.local(2, 1)``, ...) or its text
    as the IR prints it: a layout the compiler inferred, copied from ``k.ir(*args)["infer_layouts"]``
    (one ``layout(shape=..., modes=..., spatial=..., local=...)``, or a whole line that holds one).

    Returns the table as text. With ``file``, also draws it: ``*.svg`` (no dependencies), or
    ``*.png`` (needs matplotlib; ImportError without it), each thread in its own colour.
    """
    layout = _layout(layout)
    cells = _grid(layout)
    if file is not None:
        ext = os.path.splitext(str(file))[1].lower()
        if ext == ".svg":
            with open(file, "w") as f:
                f.write(_svg(layout, cells))
        elif ext == ".png":
            _png(layout, cells, file)
        else:
            raise ValueError(f"tilus.visualize_layout: file must end in .svg or .png, got {file!r}")
    return _text(layout, cells)
