#!/usr/bin/env python3
"""Build The Parallelism Playbook into ``dist/`` (and optionally serve it).

    python build.py                      # build into dist/
    python build.py --serve [--port N]   # build, then serve at http://127.0.0.1:8000
    python build.py --base-url /playbook/   # for a deployment under a sub-path

The page is rendered from ``site/content/*.md`` (markdown + directives) with Jinja2
templates. Every figure is rendered once here, in CPython, with the same ``render`` the
browser runs later, so the page is complete before Python boots. The browser runtime
(Pyodide, plotly.js) is copied from ``node_modules``, the worker that runs Pyodide from
``site/static/worker.js``; our own Python reaches the browser as one zip archive.
Output is deterministic: same inputs, same bytes.
"""
import argparse
import base64
import functools
import gzip
import hashlib
import html
import http.server
import io
import json
import os
import re
import shutil
import struct
import sys
import traceback
import urllib.parse
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import jinja2
from latex2mathml.converter import convert as latex_to_mathml
from markdown_it import MarkdownIt
from mdit_py_plugins.colon_fence import colon_fence_plugin
from mdit_py_plugins.dollarmath import dollarmath_plugin

ROOT = Path(__file__).resolve().parent
SITE = ROOT / "site"
CONTENT = SITE / "content"
NODE_MODULES = ROOT / "node_modules"
PYTHON_PACKAGES = ("models", "figures")

PYODIDE_FILES = ("pyodide.mjs", "pyodide.asm.mjs", "pyodide.asm.wasm", "python_stdlib.zip", "pyodide-lock.json")
# plotly.js's smallest prebuilt bundle: bar, pie and scatter traces (the figures draw bars;
# tests/test_figures_render.py checks that every chart's traces are among these). The
# cartesian bundle's nine more trace types made its load one main-thread task of 330-490
# ms here, against 35 ms (its first chart then takes 110-180 ms, against 45-75).
PLOTLY_PACKAGE = "plotly.js-basic-dist-min"
PLOTLY_FILE = "plotly-basic.min.js"
PLOTLY_TRACES = ("bar", "pie", "scatter")
# V8's explicit compile hint (Chrome 136+; a comment elsewhere): compile every function
# of the file while it streams in, on a background thread. plotly.js runs most of its
# functions as it loads and on its first chart; compiled lazily, on the main thread,
# that made the cartesian bundle's load and first chart 690-960 ms here, and 380-500 ms
# with the hint.
EAGER_COMPILE_HINT = b"//# allFunctionsCalledOnLoad\n"

MIME_TYPES = {
    ".wasm": "application/wasm",
    ".mjs": "text/javascript",
    ".js": "text/javascript",
    ".json": "application/json",
    ".css": "text/css",
    ".html": "text/html; charset=utf-8",
    ".zip": "application/zip",
    ".svg": "image/svg+xml",
}

# The article after its first FIRST_HELD_CHAPTER chapters arrives held back (hidden by
# playbook.css) and playbook.js shows it a few blocks per task: laid out all at once, the
# page's 16k layout objects were one 100-400 ms task after first paint, when the reader
# could not scroll. The flag that holds it (html[data-hold]) is set by the page's one
# inline script, so a reader without JavaScript sees every chapter at once. The flag's
# value is a timer that drops it after HOLD_FALLBACK_MS, showing the whole article, in case
# playbook.js never runs; playbook.js cancels it. (playbook.js never drops the flag
# itself: that restyles the whole page, 60-110 ms.)
FIRST_HELD_CHAPTER = 2
HOLD_FALLBACK_MS = 15000
# An empty script before each held chapter: a point where the parser may yield. After its
# first few chunks, desktop Chromium parses with a 500 ms budget, so the ~630 kB after
# first paint were one 60-140 ms task; after a parser-blocking script in the body it
# yields within 10 ms (blink html_document_parser.cc, PumpTokenizer). Empty, it runs
# nothing, so the policy needs no hash for it.
PARSER_YIELD = "<script></script>"
HOLD_SCRIPT = ('var root=document.documentElement;root.setAttribute("data-hold",'
               'setTimeout(function(){root.removeAttribute("data-hold")},%d))' % HOLD_FALLBACK_MS)
HOLD_SCRIPT_HASH = "'sha256-%s'" % base64.b64encode(hashlib.sha256(HOLD_SCRIPT.encode()).digest()).decode()

# The page's Content-Security-Policy: scripts from this origin only, and one inline script
# (the hold flag above) allowed by its hash. The worker compiles Pyodide's WebAssembly
# ('wasm-unsafe-eval': a host that sends this policy as a header on every file gives it
# to the worker too). plotly.js injects <style>.
CONTENT_SECURITY_POLICY = "; ".join((
    "default-src 'self'",
    f"script-src 'self' {HOLD_SCRIPT_HASH} 'wasm-unsafe-eval'",
    "worker-src 'self'",
    "connect-src 'self'",
    "img-src 'self' data:",
    "style-src 'self' 'unsafe-inline'",
    "font-src 'self'",
    "object-src 'none'",
    "base-uri 'self'",
    "form-action 'none'",
))

# What a server sends with every file (build.py --serve does; README, "Hosting it", gives
# it for nginx and Caddy). The page's policy as a header, plus what a <meta> policy cannot
# say: frame-ancestors (no site may frame the page, so no click can be stolen through it).
# nosniff: a file is run or styled only as the type it is served as. no-referrer: a link
# out of the article tells the other site nothing of where the reader was.
SECURITY_HEADERS = (
    ("Content-Security-Policy", CONTENT_SECURITY_POLICY + "; frame-ancestors 'none'"),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
)

FIGURE_DIRECTIVE = "figure"
FIGURE_MARKER = re.compile(r"<!--\s*figure\s+(\d\d):\s*([^>]*?)\s*-->")
HEADING_ANCHOR = re.compile(r"\s*\{#([a-z0-9][a-z0-9-]*)\}\s*$")
CITATION = re.compile(r"\[@([A-Za-z0-9_-]+)\]")
# Prose quotes a figure's number as {{08.per_device_bytes}} (its default state) or
# {{08.ledger_fraction|N=8,stage=3}} (another state): the build writes the readout's text,
# so the prose and the figure cannot disagree.
READOUT_QUOTE = re.compile(r"\{\{(\d\d)\.([A-Za-z_][A-Za-z0-9_-]*)(?:\|([^}]*))?\}\}")
WORDS_PER_MINUTE = 230


class BuildError(Exception):
    """A problem in the sources, reported as ``file:line: message``."""


# ---------------------------------------------------------------------------
# Versions and vendored runtime


def npm_version(package):
    return json.loads((NODE_MODULES / package / "package.json").read_text())["version"]


@dataclass(frozen=True)
class Runtime:
    """Where each vendored piece lives under dist/ (versioned paths: never mixed)."""

    pyodide_dir: str
    plotly_file: str


def vendor_runtime(dist):
    pyodide = f"vendor/pyodide-{npm_version('pyodide')}"
    plotly = f"vendor/plotly-{npm_version(PLOTLY_PACKAGE)}"
    for name in PYODIDE_FILES:
        _copy(NODE_MODULES / "pyodide" / name, dist / pyodide / name)
    stdlib = dist / pyodide / "python_stdlib.zip"
    stdlib.write_bytes(stored_zip(stdlib.read_bytes()))
    _copy(NODE_MODULES / PLOTLY_PACKAGE / PLOTLY_FILE, dist / plotly / PLOTLY_FILE, prefix=EAGER_COMPILE_HINT)
    return Runtime(pyodide_dir=pyodide, plotly_file=f"{plotly}/{PLOTLY_FILE}")


def _copy(source, target, prefix=b""):
    """``source`` to ``target``, behind ``prefix`` (bytes) if given."""
    if not source.exists():
        raise BuildError(f"{source}: missing; run `npm ci` first")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(prefix + source.read_bytes())


def python_archive():
    """Our Python packages as one deterministic zip (fixed timestamps, sorted entries),
    stored: the transfer is compressed as a whole (see ``precompress``)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for package in PYTHON_PACKAGES:
            for path in sorted((ROOT / package).rglob("*.py")):
                info = zipfile.ZipInfo(path.relative_to(ROOT).as_posix(), date_time=(2020, 1, 1, 0, 0, 0))
                info.external_attr = 0o644 << 16
                archive.writestr(info, path.read_bytes())
    return buffer.getvalue()


def stored_zip(data):
    """The same zip with every entry stored instead of deflated. Compressed as one
    stream, an archive of many small files shrinks far more than each file deflated on
    its own (Pyodide's stdlib: 1.6 MB brotli against 2.5 MB as shipped), and Python
    then reads modules without inflating them."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as target:
        for info in source.infolist():
            entry = zipfile.ZipInfo(info.filename, date_time=info.date_time)
            entry.external_attr = info.external_attr
            target.writestr(entry, source.read(info))
    return buffer.getvalue()


# ---------------------------------------------------------------------------
# Compressed copies

# What a static host should send compressed (the README says how to configure one).
COMPRESSIBLE = (".html", ".css", ".js", ".mjs", ".json", ".wasm", ".zip", ".py", ".svg", ".txt")
COMPRESSED_MIN_BYTES = 1024
BROTLI_QUALITY = 11  # the densest: 9.6 MB of wasm -> 2.74 MB (quality 9: 3.10 MB), once per input


def compression_cache():
    """Compressed outputs by content hash, shared by every build on this machine: brotli
    at its densest takes ~35 s for Pyodide's wasm, which never changes between builds."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "parallelism-playbook" / "compressed"


def _compressed(data, codec):
    key = f"{hashlib.sha256(data).hexdigest()}.{codec}{BROTLI_QUALITY if codec == 'br' else 9}"
    cached = compression_cache() / key
    if cached.exists():
        return cached.read_bytes()
    if codec == "br":
        import brotli  # build-time only

        packed = brotli.compress(data, quality=BROTLI_QUALITY)
    else:
        packed = gzip.compress(data, compresslevel=9, mtime=0)
    cached.parent.mkdir(parents=True, exist_ok=True)
    partial = cached.with_suffix(f".{os.getpid()}.tmp")
    partial.write_bytes(packed)
    partial.replace(cached)
    return packed


def precompress(dist):
    """Write ``name.br`` and ``name.gz`` beside every compressible file of 1 KB or more
    (where compression helps): ``--serve`` sends them with ``Content-Encoding``, and so
    can any static host configured to."""
    for path in sorted(p for p in dist.rglob("*") if p.is_file()):
        if path.suffix not in COMPRESSIBLE or path.stat().st_size < COMPRESSED_MIN_BYTES:
            continue
        data = path.read_bytes()
        for codec in ("br", "gz"):
            packed = _compressed(data, codec)
            if len(packed) < len(data):
                path.with_name(f"{path.name}.{codec}").write_bytes(packed)


def content_hash(data):
    return hashlib.sha256(data).hexdigest()[:12]


def write_hashed(dist, directory, stem, suffix, data):
    """Write ``data`` as ``directory/stem.<hash>suffix`` and return its site path."""
    name = f"{directory}/{stem}.{content_hash(data)}{suffix}"
    target = dist / name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    return name


# ---------------------------------------------------------------------------
# Markdown with directives


@dataclass
class Source:
    path: Path

    def where(self, line_index):
        try:
            name = self.path.relative_to(ROOT)
        except ValueError:
            name = self.path
        return f"{name}:{line_index + 1}"


class Article:
    """Renders content files to HTML, collecting headings, figures and citations."""

    def __init__(self, templates, figures, strategies, references):
        self.templates = templates
        self.figures = figures
        self.strategies = strategies
        self.references = references
        self.headings = []
        self.anchors = {}
        self.placed = {}  # figure number -> where
        self.sequence = []  # (number, "placed"|"marked", where) in page order
        self.cited = []  # reference keys in order of first citation
        self.callouts = 0
        self.cards = []
        self.source = None
        self.line = 0  # the line of the directive being rendered
        self.md = self._markdown()

    def _markdown(self):
        md = MarkdownIt("commonmark", {"html": True, "typographer": True}).enable(["table", "replacements", "smartquotes"])
        md.use(colon_fence_plugin)
        md.use(dollarmath_plugin, allow_digits=False, renderer=self._math, allow_labels=False)
        md.core.ruler.after("block", "heading_anchors", self._heading_anchors)
        # markdown-it binds render rules to its renderer, so wrap our methods to keep `self`.
        md.add_render_rule("colon_fence", lambda renderer, *args: self._directive(*args))
        md.add_render_rule("html_block", lambda renderer, *args: self._html_block(*args))
        md.add_render_rule("heading_close", lambda renderer, *args: self._heading_close(*args))
        return md

    # -- rules ------------------------------------------------------------
    def _math(self, content, options):
        display = options.get("display_mode", False)
        try:
            return latex_to_mathml(content, display="block" if display else "inline")
        except Exception as error:  # latex2mathml raises many types
            raise BuildError(f"{self.source.path.name}: cannot typeset ${content}$: {error}") from error

    def _heading_anchors(self, state):
        tokens = state.tokens
        for index, token in enumerate(tokens):
            if token.type != "heading_open":
                continue
            inline = tokens[index + 1]
            where = self.source.where(token.map[0])
            match = HEADING_ANCHOR.search(inline.content)
            if not match:
                raise BuildError(f"{where}: heading {inline.content!r} needs an explicit {{#anchor}}")
            anchor = match.group(1)
            if anchor in self.anchors:
                raise BuildError(f"{where}: anchor #{anchor} already used at {self.anchors[anchor]}")
            self.anchors[anchor] = where
            inline.content = inline.content[: match.start()]
            token.attrSet("id", anchor)
            level = int(token.tag[1])
            self.headings.append({"level": level, "anchor": anchor, "title": inline.content,
                                  "source": self.source.path, "line": token.map[0], "figures": []})

    def _heading_close(self, tokens, index, options, env):
        anchor = tokens[index - 2].attrGet("id")
        return f'<a class="heading-link" href="#{anchor}" aria-label="Link to this section">#</a></{tokens[index].tag}>\n'

    def _html_block(self, tokens, index, options, env):
        content = tokens[index].content
        for match in FIGURE_MARKER.finditer(content):
            number = int(match.group(1))
            self.sequence.append((number, "marked", self.source.where(tokens[index].map[0])))
        return content

    def _directive(self, tokens, index, options, env):
        token = tokens[index]
        where = self.source.where(token.map[0])
        name, _, argument = token.info.strip().partition(" ")
        name = name.strip("{}")
        argument = argument.strip()
        try:
            render = {
                "figure": self._figure,
                "often-said": self._callout,
                "card": self._card,
                "comparison-table": self._comparison_table,
                "references": self._references,
            }[name]
        except KeyError:
            raise BuildError(f"{where}: unknown directive {{{name}}}") from None
        self.line = token.map[0]
        return render(argument, token.content, where)

    def _section_at(self, line):
        """The top-level heading above ``line`` of the file being rendered (the contents
        list each figure under it)."""
        return next((h for h in reversed(self.headings) if h["level"] == 2
                     and (h["source"] != self.source.path or h["line"] <= line)), None)

    def _figure(self, argument, content, where):
        if not argument.isdigit():
            raise BuildError(f"{where}: figure directive needs a number, got {argument!r}")
        number = int(argument)
        if number not in self.figures:
            known = ", ".join(f"{n:02d}" for n in sorted(self.figures))
            raise BuildError(f"{where}: figure {number:02d} does not exist (built figures: {known})")
        if number in self.placed:
            raise BuildError(f"{where}: figure {number:02d} is already placed at {self.placed[number]}")
        self.placed[number] = where
        self.sequence.append((number, "placed", where))
        section = self._section_at(self.line)
        if section is not None:
            section["figures"].append(self.figures[number])
        return render_figure(self.templates, self.figures[number], self.held)

    def _callout(self, argument, content, where):
        claim, separator, correction = content.partition("\n+++\n")
        if not separator or not claim.strip() or not correction.strip():
            raise BuildError(f"{where}: an often-said callout needs a claim, a line '+++', and a correction")
        self.callouts += 1
        return self.templates.get_template("callout.html").render(
            claim=self.md.render(claim), correction=self.md.render(correction), number=self.callouts
        )

    def _card(self, argument, content, where):
        try:
            card = self.strategies.card(argument)
        except ValueError as error:
            raise BuildError(f"{where}: {error}") from None
        self.cards.append(card.key)
        return self.templates.get_template("card.html").render(card=card)

    def _comparison_table(self, argument, content, where):
        return self.templates.get_template("comparison.html").render(
            columns=self.strategies.COMPARISON_COLUMNS, rows=self.strategies.COMPARISON_ROWS, note=self.strategies.COMPARISON_NOTE
        )

    def _references(self, argument, content, where):
        return "\n<!--REFERENCES-->\n"  # filled in once every citation has been numbered

    # -- whole article ----------------------------------------------------
    def render_file(self, path, held=False):
        """One chapter's HTML; `held`: it arrives hidden (FIRST_HELD_CHAPTER), so its
        figures' controls wait in a template until playbook.js shows the figure."""
        self.source = Source(path)
        self.held = held
        text = path.read_text(encoding="utf-8")
        rendered = self.md.render(text)
        rendered = READOUT_QUOTE.sub(lambda match: self._quote(match, text), rendered)
        return CITATION.sub(lambda match: self._cite(match.group(1), text), rendered)

    def _quote(self, match, text):
        """The text of one readout of a figure at its default state or the state the quote
        names; any unknown figure, key or state value is a build error."""
        from figures.contract import format_value

        number, key, spec = int(match.group(1)), match.group(2), match.group(3)
        line = next((i for i, row in enumerate(text.splitlines()) if match.group(0).split("|")[0] in row), 0)
        where = self.source.where(line)
        if number not in self.figures:
            raise BuildError(f"{where}: {match.group(0)} quotes figure {number:02d}, which is not built")
        figure = self.figures[number]
        state = figure.default_state()
        for part in filter(None, (spec or "").split(",")):
            name, _, value = part.strip().partition("=")
            try:
                control = figure.control(name)
                state[name] = control.coerce(value)
            except (KeyError, ValueError, TypeError):
                raise BuildError(f"{where}: {match.group(0)}: figure {number:02d} has no state {name}={value}") from None
            if format_value(state[name]) != value.strip():
                raise BuildError(f"{where}: {match.group(0)}: {name}={value} is not one of its control's values "
                                 f"(nearest: {format_value(state[name])})")
        readouts = {r.key: r for r in figure.render(figure.validate_state(state)).readouts}
        if key not in readouts:
            raise BuildError(f"{where}: {match.group(0)}: figure {number:02d} has no readout {key!r} "
                             f"(it has {', '.join(readouts)})")
        return (f'<span class="quoted-readout" data-figure="{number:02d}" data-key="{html.escape(key)}">'
                f"{html.escape(readouts[key].text)}</span>")

    def _cite(self, key, text):
        if key not in self.references:
            line = next((i for i, row in enumerate(text.splitlines()) if f"[@{key}]" in row), 0)
            raise BuildError(f"{self.source.where(line)}: unknown reference [@{key}]")
        if key not in self.cited:
            self.cited.append(key)
        number = self.cited.index(key) + 1
        return f'<a class="cite" href="#ref-{html.escape(key)}" id="cite-{html.escape(key)}-{number}">[{number}]</a>'

    def reference_list(self):
        ordered = self.cited + [key for key in self.references if key not in self.cited]
        return self.templates.get_template("references.html").render(
            references=[dict(self.references[key], number=i + 1) for i, key in enumerate(ordered)]
        )


def render_figure(templates, figure, held=False):
    """A figure's HTML with its default state's view baked in (controls in a template if
    its chapter is held: see figure.html). Its tries must each name a state its controls
    can reach (``contract.check_tries``)."""
    from figures.contract import check_tries

    problems = check_tries(figure)
    if problems:
        raise BuildError(f"figures/fig{figure.number:02d}_{figure.slug.replace('-', '_')}.py: TRIES: " + "; ".join(problems))
    state = figure.default_state()
    try:
        view = figure.render(state)
        narrow = figure.render(state, narrow=True) if figure.lays_out_narrow else view
    except Exception as error:
        raise BuildError(f"figures/fig{figure.number:02d}_*.py: render(default state) raised {type(error).__name__}: {error}") from error
    return templates.get_template("figure.html").render(
        figure=figure,
        state=state,
        view=view,
        limits=figure.slider_limits(state),
        hints=figure.field_hints(state),
        held=held,
        # a phone's drawing, baked beside the wide one (CSS shows the one that fits): the
        # worker draws the same, so the page does not move when Python takes over
        narrow_svg=narrow.svg if narrow.svg != view.svg else None,
        plot_json=json.dumps(view.plot, sort_keys=True, separators=(",", ":")).replace("</", "<\\/") if view.plot else None,
    )


def load_references():
    path = CONTENT / "references.json"
    if not path.exists():
        return {}
    entries = json.loads(path.read_text(encoding="utf-8"))
    references = {}
    for entry in entries:
        if entry["key"] in references:
            raise BuildError(f"{path.relative_to(ROOT)}: duplicate reference key {entry['key']!r}")
        references[entry["key"]] = entry
    return references


def count_words(html_text):
    text = re.sub(r"<(math|svg|script|style)\b.*?</\1>", " ", html_text, flags=re.S)
    text = re.sub(r"<[^>]+>", " ", text)
    return len(re.findall(r"[A-Za-z0-9][A-Za-z0-9'’-]*", html.unescape(text)))


# ---------------------------------------------------------------------------
# The build


def build(dist=ROOT / "dist", base_url="/"):
    sys.path.insert(0, str(ROOT))
    from figures import palette, registry
    from models import strategies

    site_url = None
    if base_url.startswith(("https://", "http://")):  # the canonical address: links use its path
        site_url = base_url
        base_url = urllib.parse.urlsplit(base_url).path or "/"
    if not base_url.startswith("/") or not base_url.endswith("/"):
        raise BuildError(f"--base-url must start and end with '/' (or be a full https:// URL ending in '/'), got {base_url!r}")
    if dist.exists():
        shutil.rmtree(dist)
    dist.mkdir(parents=True)

    runtime = vendor_runtime(dist)
    archive = write_hashed(dist, "py", "playbook", ".zip", python_archive())
    # The worker's URLs are relative to the worker script (assets/): right under any base URL.
    worker_source = ((SITE / "static/worker.js").read_text().replace("__PYODIDE__", f"../{runtime.pyodide_dir}")
                     .replace("__ARCHIVE__", f"../{archive}"))
    worker_script = write_hashed(dist, "assets", "worker", ".js", worker_source.encode())
    stylesheet = write_hashed(dist, "assets", "playbook", ".css",
                              palette.css().encode() + (SITE / "static/playbook.css").read_bytes())
    script = write_hashed(dist, "assets", "playbook", ".js", (SITE / "static/playbook.js").read_bytes())
    noscript_stylesheet = write_hashed(dist, "assets", "noscript", ".css", (SITE / "static/noscript.css").read_bytes())
    favicon = write_hashed(dist, "assets", "favicon", ".svg", (SITE / "static/favicon.svg").read_bytes())
    preview = write_hashed(dist, "assets", "preview", ".png", preview_png())

    templates = jinja2.Environment(
        loader=jinja2.FileSystemLoader(SITE / "templates"),
        autoescape=jinja2.select_autoescape(["html"]),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    figures = registry()
    article = Article(templates, figures, strategies, load_references())
    sections = []
    for index, path in enumerate(sorted(CONTENT.glob("*.md"))):
        held = " data-held" if index >= FIRST_HELD_CHAPTER else ""
        try:
            sections.append((PARSER_YIELD if held else "") + f'<section class="chapter" data-source="{path.name}"{held}>\n'
                            f'{article.render_file(path, bool(held))}</section>')
        except BuildError:
            raise
        except jinja2.TemplateError as error:
            raise BuildError(f"{template_location(error)}: template error while rendering {path.name}: {error}") from error
    # ... and one after the last, so that the end of parsing (where playbook.js runs) is a
    # task of its own too.
    body = ("\n".join(sections) + PARSER_YIELD).replace("<!--REFERENCES-->", article.reference_list())
    check_figure_order(article)

    try:
        page = templates.get_template("page.html").render(
            body=body,
            headings=article.headings,
            reading_minutes=max(1, round(count_words(body) / WORDS_PER_MINUTE)),
            base_url=base_url,
            runtime=runtime,
            worker_script=f"{base_url}{worker_script}",
            runtime_files=json.dumps(runtime_checks(base_url, runtime, archive), separators=(",", ":")),
            stylesheet=f"{base_url}{stylesheet}",
            script=f"{base_url}{script}",
            noscript_stylesheet=f"{base_url}{noscript_stylesheet}",
            content_security_policy=CONTENT_SECURITY_POLICY,
            hold_script=HOLD_SCRIPT,
            service_worker=f"{base_url}sw.js",
            favicon=f"{base_url}{favicon}",
            # Open Graph wants absolute URLs: with --base-url https://host/path/ they are.
            preview_image=f"{site_url or base_url}{preview}",
            canonical_url=site_url,
            palette_dark=json.dumps(palette.dark_map(), sort_keys=True),
            palette_defs=palette.svg_defs(),
        )
    except jinja2.TemplateError as error:
        raise BuildError(f"{template_location(error)}: template error: {error}") from error
    (dist / "index.html").write_text(page, encoding="utf-8")
    write_service_worker(dist)
    precompress(dist)
    return dist


def write_service_worker(dist):
    """``sw.js``: the offline copy of this build. It lists every file of the build (the page
    as ``./``) and names its cache after their hash, so a new build installs a new cache
    and drops the old one."""
    files = sorted(p.relative_to(dist).as_posix() for p in dist.rglob("*") if p.is_file())
    listing = ["./"] + [f"./{name}" for name in files if name != "index.html"]
    digest = content_hash("\n".join(files).encode() + b"".join((dist / name).read_bytes() for name in files))
    source = (SITE / "static/sw.js").read_text()
    source = source.replace('"__CACHE__"', json.dumps(f"playbook-{digest}")).replace("__FILES__", json.dumps(listing, indent=0))
    (dist / "sw.js").write_text(source)


def preview_png(width=1200, height=630):
    """The page's social preview: Figure 15's default state (four pipeline schedules on one
    clock) drawn as a PNG from the same simulation the figure draws, in the palette's
    colours. Pure Python: bars only, no text."""
    from figures import palette, registry
    from models import pipeline

    figure = registry()[15]
    state = figure.default_state()
    paper, lane = (251, 250, 247), (232, 229, 221)
    colours = {kind: bytes.fromhex(palette.COLOURS[key].light[1:]) for kind, key in (("F", "forward"), ("B", "backward"), ("W", "weight"))}
    timelines = [pipeline.simulate(name, state["P"], state["m"], state["v"] if name == "interleaved" else 1)
                 for name in pipeline.SCHEDULES]
    longest = max(t.makespan for t in timelines)
    pixels = [bytearray(bytes(paper) * width) for _ in range(height)]
    margin, gap = 48, 24
    row = (height - 2 * margin - gap * (len(timelines) - 1)) / (len(timelines) * state["P"])
    scale = (width - 2 * margin) / longest

    def fill(x0, y0, x1, y1, colour):
        for y in range(int(y0), int(y1)):
            pixels[y][int(x0) * 3:int(x1) * 3] = bytes(colour) * (int(x1) - int(x0))

    top = margin
    for timeline in timelines:
        for stage in range(timeline.stages):
            fill(margin, top + stage * row + 1, width - margin, top + (stage + 1) * row - 1, lane)
        for passes in timeline.passes:
            y = top + passes.stage * row
            for start in passes.starts:
                x = margin + start * scale
                fill(x + 1, y + 2, x + passes.duration_s * scale - 1, y + row - 2, colours[passes.kind])
        top += timeline.stages * row + gap

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    raw = b"".join(b"\x00" + bytes(line) for line in pixels)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def runtime_checks(base_url, runtime, archive):
    """The files the worker cannot start without, and the type each must be served as:
    the page asks the server for them (HEAD) so a missing file or a wasm served with the
    wrong type is reported at once instead of hanging Pyodide without a word."""
    pyodide = f"{base_url}{runtime.pyodide_dir}"
    return [
        {"url": f"{pyodide}/pyodide.asm.wasm", "type": "application/wasm"},
        {"url": f"{pyodide}/pyodide.mjs", "type": "text/javascript"},
        {"url": f"{pyodide}/python_stdlib.zip", "type": ""},
        {"url": f"{base_url}{archive}", "type": ""},
    ]


def template_location(error):
    """``file:line`` of a Jinja error: syntax errors carry it, runtime errors leave it in
    the traceback (Jinja maps template frames back to template lines)."""
    if getattr(error, "filename", None) and getattr(error, "lineno", None):
        return f"{error.filename}:{error.lineno}"
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename.endswith(".html")]
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "site/templates"


def check_figure_order(article):
    """Every figure appears once, placed or marked, in increasing order."""
    seen = {}
    for number, how, where in article.sequence:
        if number in seen:
            raise BuildError(f"{where}: figure {number:02d} appears again (first at {seen[number]})")
        seen[number] = where
    for (earlier, _, _), (later, _, where) in zip(article.sequence, article.sequence[1:]):
        if later < earlier:
            raise BuildError(f"{where}: figure {later:02d} comes after figure {earlier:02d}; figures must be in order")
    missing = sorted(set(article.figures) - set(article.placed))
    if missing and article.sequence:
        raise BuildError(f"site/content: built figure(s) {', '.join(f'{n:02d}' for n in missing)} are never placed")


# ---------------------------------------------------------------------------
# Serving


class Handler(http.server.SimpleHTTPRequestHandler):
    """Static files with the MIME types Pyodide needs (a wrong wasm type hangs it
    silently), sent compressed where the build wrote a ``.br`` or ``.gz`` copy and the
    browser accepts it, each with ``SECURITY_HEADERS``."""

    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map, **MIME_TYPES}
    base_url = "/"
    ENCODINGS = (("br", ".br"), ("gzip", ".gz"))

    def translate_path(self, path):
        if path.startswith(self.base_url):
            path = "/" + path[len(self.base_url):]
        return super().translate_path(path)

    def send_head(self):
        path = self.translate_path(self.path)
        if os.path.isdir(path) and self.path.split("?")[0].endswith("/"):
            path = os.path.join(path, "index.html")  # "/" is the page itself: sent compressed like any file
        accepted = {part.split(";")[0].strip() for part in self.headers.get("Accept-Encoding", "").split(",")}
        for encoding, suffix in self.ENCODINGS:
            if encoding in accepted and os.path.isfile(path + suffix):
                body = open(path + suffix, "rb")
                size = os.fstat(body.fileno()).st_size
                self.send_response(200)
                self.send_header("Content-Type", self.guess_type(path))
                self.send_header("Content-Encoding", encoding)
                self.send_header("Content-Length", str(size))
                self.send_header("Vary", "Accept-Encoding")
                self.end_headers()
                return body
        return super().send_head()

    def end_headers(self):
        immutable = "/vendor/" in self.path or re.search(r"\.[0-9a-f]{12}\.", self.path)
        self.send_header("Cache-Control", "public, max-age=31536000, immutable" if immutable else "no-cache")
        for name, value in SECURITY_HEADERS:
            self.send_header(name, value)
        super().end_headers()

    def log_message(self, format, *args):
        pass


def make_server(root, host="127.0.0.1", port=8000, base_url="/"):
    handler_class = type("SiteHandler", (Handler,), {"base_url": base_url})
    handler = functools.partial(handler_class, directory=str(root))
    http.server.ThreadingHTTPServer.allow_reuse_address = True
    return http.server.ThreadingHTTPServer((host, port), handler)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "dist", help="output directory (default: dist/)")
    parser.add_argument("--base-url", default="/",
                        help="URL prefix the site is served under (default: /); a full https://host/path/ also sets "
                             "the canonical URL and absolute preview-image links")
    parser.add_argument("--serve", action="store_true", help="serve the built site")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args(argv)
    try:
        dist = build(args.out, args.base_url)
    except BuildError as error:
        print(f"build failed: {error}", file=sys.stderr)
        return 1
    print(f"built {dist / 'index.html'}")
    if args.serve:
        path = urllib.parse.urlsplit(args.base_url).path or "/"
        server = make_server(dist, args.host, args.port, path)
        print(f"serving at http://{args.host}:{args.port}{path}  (Ctrl-C to stop)", flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
