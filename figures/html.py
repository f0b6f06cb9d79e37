"""The one place HTML blocks of a figure are written (``View.html``): tables, lists and
code to copy. Every piece of text is escaped here, so a figure never writes markup by
hand. Like ``svg``, output is ASCII (other characters become character references)."""
from html import escape


def _text(value):
    return escape(str(value)).encode("ascii", "xmlcharrefreplace").decode("ascii")


def _attributes(attributes):
    parts = []
    for name, value in attributes.items():
        if value is None or value is False:
            continue
        name = name.rstrip("_").replace("_", "-")
        parts.append(f" {name}" if value is True else f' {name}="{_text(value)}"')
    return "".join(parts)


def table(headers, rows, *, caption=None, label=None, row_classes=None, numeric=(), name_column=0, **attributes):
    """A ``<table>``: ``headers`` a sequence of column titles, ``rows`` sequences of cells
    (any value; shown as text). ``row_classes`` optionally gives each row a class (for
    example ``"chosen"`` or ``"does-not-fit"``). The table scrolls sideways inside a
    region named by ``caption`` (shown) or ``label`` (read out only): one is required,
    and it must tell this table from every other on the page. ``numeric``: the indices of
    columns of numbers, right-aligned with figures of one width. ``name_column``: the
    column that names each row (the plan, the axis), held in view while the rest scrolls.

    The caption is shown above the scrolling frame, never inside it (a caption as wide as
    the table was cut off on a phone); the table keeps it as its own, unseen, caption."""
    if not (caption or label):
        raise ValueError("a table needs a caption or a label naming it")
    row_classes = row_classes or [None] * len(rows)

    def cell_class(i):
        names = " ".join(name for name, on in (("num", i in numeric), ("name", i == name_column)) if on)
        return f' class="{names}"' if names else ""

    head = "".join(f'<th scope="col"{cell_class(i)}>{_text(h)}</th>' for i, h in enumerate(headers))
    body = "".join(
        f"<tr{_attributes({'class': cls})}>" + "".join(f"<td{cell_class(i)}>{_text(cell)}</td>" for i, cell in enumerate(row))
        + "</tr>" for row, cls in zip(rows, row_classes)
    )
    shown = f'<p class="table-caption" aria-hidden="true">{_text(caption)}</p>' if caption else ""
    title = f"<caption>{_text(caption)}</caption>" if caption else ""  # unseen: playbook.css
    # the wrapper scrolls sideways on a phone: keyboard users must be able to reach it
    region = _attributes({"class": "table-wrap", "tabindex": "0", "role": "region", "aria-label": caption or label})
    return (f'{shown}<div{region}><table{_attributes({"class": "figure-table", **attributes})}>{title}'
            f'<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>')


def items(entries, *, ordered=False, **attributes):
    """A list of sentences."""
    tag = "ol" if ordered else "ul"
    return f"<{tag}{_attributes(attributes)}>" + "".join(f"<li>{_text(e)}</li>" for e in entries) + f"</{tag}>"


def heading(text, **attributes):
    """A small heading inside a figure (not part of the page outline)."""
    return f'<p{_attributes({"class": "figure-subhead", **attributes})}>{_text(text)}</p>'


def paragraph(text, **attributes):
    return f"<p{_attributes(attributes)}>{_text(text)}</p>"


def code(text, *, label, copy=True):
    """A block of code (command-line arguments, a config file) with a copy button; the
    page's script copies the ``<pre>``'s text when the button is pressed. The block scrolls
    sideways rather than wrap: it takes focus, so a keyboard can scroll it too."""
    button = f'<button type="button" class="copy-button" data-copy>{_text("Copy " + label)}</button>' if copy else ""
    return f'<div class="code-block">{button}<pre tabindex="0" aria-label="{_text(label)}"><code>{_text(text)}</code></pre></div>'


def fold(summary, *blocks, **attributes):
    """Blocks folded behind a one-line summary the reader opens (a long reference table
    that would push everything after it a screen down)."""
    return (f'<details{_attributes({"class": "figure-fold", **attributes})}><summary>{_text(summary)}</summary>'
            + join(*blocks) + "</details>")


def join(*blocks):
    """Blocks made by this module, in order."""
    return "".join(block for block in blocks if block)
