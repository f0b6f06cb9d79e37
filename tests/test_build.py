"""The builder: deterministic output, versioned asset URLs, a server with the MIME types
Pyodide needs, and source mistakes reported as file:line instead of a silent blank."""
import base64
import gzip
import hashlib
import html as html_lib
import json
import re
import threading
import zipfile
import urllib.error
import urllib.request
from pathlib import Path

import jinja2
import pytest

import build
from figures import registry


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return build.build(tmp_path_factory.mktemp("a") / "dist")


def site_files(root):
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_build_is_deterministic(built, tmp_path):
    again = build.build(tmp_path / "dist")
    assert site_files(built) == site_files(again)


def test_asset_urls_carry_a_content_hash_or_version(built):
    html = (built / "index.html").read_text()
    urls = re.findall(r'(?:src|href|config)="(/[^"#]+)"', html)
    assert urls
    for url in urls:
        assert re.search(r"\.[0-9a-f]{12}\.|/vendor/[a-z.]+-\d+\.\d+\.\d+/", url), url
        assert (built / url.lstrip("/")).is_file(), url


def worker_source(built, base_url="/"):
    html = (built / "index.html").read_text()
    url = re.search(r'<html [^>]*data-worker="([^"]+)"', html).group(1)
    return url, (built / url.removeprefix(base_url)).read_text()


def test_one_python_worker_and_no_python_on_the_page_thread(built):
    html = (built / "index.html").read_text()
    url, source = worker_source(built)
    assert re.fullmatch(r"/assets/worker\.[0-9a-f]{12}\.js", url)
    assert "from figures.worker import serve" in source
    assert 'type="py"' not in html and "pyscript" not in html.lower() and not (built / "vendor/pyscript-0.7.31").exists()
    assert "pyodide.asm.wasm" not in re.sub(r'data-runtime-files="[^"]*"', "", html)  # the worker fetches it, not the page


def test_worker_loads_the_local_interpreter_and_one_archive(built):
    _, source = worker_source(built)
    [pyodide] = re.findall(r'import \{ loadPyodide \} from "([^"]+)"', source)
    assert pyodide == "../vendor/pyodide-314.0.7/pyodide.mjs"  # relative to assets/: any base URL
    [archive] = re.findall(r'new URL\("(\.\./py/playbook\.[0-9a-f]{12}\.zip)"', source)
    assert (built / "assets" / archive).resolve().is_file()
    assert "__PYODIDE__" not in source and "__ARCHIVE__" not in source and "loadPackage" not in source
    # it fetches what loadPyodide will (while the page shows its article), no more, no less
    prefetched = json.loads(re.search(r"const PYODIDE_FILES = (\[[^\]]*\]);", source).group(1))
    assert sorted(prefetched) == sorted(set(build.PYODIDE_FILES) - {"pyodide.mjs"})
    for name in build.PYODIDE_FILES:
        assert (built / "vendor/pyodide-314.0.7" / name).is_file()


def test_base_url_prefixes_every_root_absolute_path(tmp_path):
    out = build.build(tmp_path / "dist", base_url="/playbook/")
    html = (out / "index.html").read_text()
    assert not re.search(r'(?:src|href|data-worker)="/(?!playbook/)', html)
    url, source = worker_source(out, "/playbook/")
    assert url.startswith("/playbook/assets/worker.")
    checks = json.loads(html_lib.unescape(re.search(r'data-runtime-files="([^"]+)"', html).group(1)))
    assert checks and all(check["url"].startswith("/playbook/") for check in checks)
    # the worker names its files relative to itself: they resolve under /playbook/
    for relative in re.findall(r'"(\.\./[^"]+)"', source):
        assert (out / "assets" / relative).resolve().exists(), relative
    with pytest.raises(build.BuildError, match="base-url"):
        build.build(tmp_path / "x", base_url="playbook")


def test_every_figure_is_baked_in_with_its_default_view(built):
    html = (built / "index.html").read_text()
    for figure in registry().values():
        assert f'id="{figure.anchor}"' in html and 'data-state="static"' in html
        for readout in figure.render(figure.default_state()).readouts:
            assert f'data-key="{readout.key}"' in html


def test_a_constrained_sliders_baked_max_is_its_default_states(built):
    """Figure 17's rank slider ends at the default world's last rank (511), Figure 01's at
    rank 15 (2 nodes of 8): the page without Python has no dead stretch either."""
    html = (built / "index.html").read_text()
    for anchor, key, max_ in (("fig-17", "rank", "511"), ("fig-01", "rank", "15"), ("fig-17", "dp", "6")):
        tag = re.search(rf'<input type="range" id="{anchor}-{key}"[^>]*>', html).group(0)
        assert f'max="{max_}"' in tag, tag


def test_large_assets_have_compressed_copies_of_the_same_bytes(built):
    import brotli

    for name in ("vendor/pyodide-314.0.7/pyodide.asm.wasm", "vendor/pyodide-314.0.7/python_stdlib.zip", "index.html"):
        original = (built / name).read_bytes()
        assert brotli.decompress((built / f"{name}.br").read_bytes()) == original
        assert gzip.decompress((built / f"{name}.gz").read_bytes()) == original
    assert (built / "vendor/pyodide-314.0.7/pyodide.asm.wasm.br").stat().st_size < 3_000_000
    assert not list(built.rglob("*.br.br")) and not list(built.rglob("*.gz.br"))  # copies are never re-compressed


def test_pyodide_stdlib_is_repacked_stored_with_the_same_files(built):
    shipped = zipfile.ZipFile(build.NODE_MODULES / "pyodide/python_stdlib.zip")
    repacked = zipfile.ZipFile(built / "vendor/pyodide-314.0.7/python_stdlib.zip")
    assert [i.filename for i in repacked.infolist()] == [i.filename for i in shipped.infolist()]
    assert {i.compress_type for i in repacked.infolist()} == {zipfile.ZIP_STORED}
    for info in shipped.infolist()[::25]:
        assert repacked.read(info.filename) == shipped.read(info)


def test_plotly_is_vendored_unchanged_behind_the_eager_compile_hint(built):
    shipped = (build.NODE_MODULES / build.PLOTLY_PACKAGE / build.PLOTLY_FILE).read_bytes()
    vendored = next(built.glob("vendor/plotly-*/" + build.PLOTLY_FILE)).read_bytes()
    # V8 reads the hint only as the file's first line
    assert vendored.split(b"\n", 1)[0] == b"//# allFunctionsCalledOnLoad"
    assert vendored.split(b"\n", 1)[1] == shipped
    # the traces the figures may use (tests/test_figures_render.py) are the bundle's own
    readme = (build.NODE_MODULES / build.PLOTLY_PACKAGE / "README.md").read_text()
    assert set(re.findall(r"`(\w+)`", re.search(r"Contains trace modules (.*)\.", readme).group(1))) == set(build.PLOTLY_TRACES)


def test_server_sends_compressed_copies_to_browsers_that_accept_them(built):
    server = build.make_server(built, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/vendor/pyodide-314.0.7/pyodide.asm.wasm"
    original = (built / "vendor/pyodide-314.0.7/pyodide.asm.wasm").read_bytes()
    try:
        for accept, encoding in (("gzip, deflate, br", "br"), ("gzip", "gzip"), ("identity", None)):
            with urllib.request.urlopen(urllib.request.Request(url, headers={"Accept-Encoding": accept})) as response:
                body = response.read()
                assert response.headers["Content-Type"] == "application/wasm"
                assert response.headers.get("Content-Encoding") == encoding
                assert int(response.headers["Content-Length"]) == len(body)
            if encoding == "gzip":
                body = gzip.decompress(body)
            elif encoding == "br":
                import brotli
                body = brotli.decompress(body)
            assert body == original
    finally:
        server.shutdown()


def test_the_page_itself_is_sent_compressed_at_the_sites_root(built):
    """"/" was sent as 909 KB of raw HTML (only named files found their .br copy): on
    Lighthouse's mobile network that alone took ~4.5 s before the first paint."""
    server = build.make_server(built, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers={"Accept-Encoding": "gzip, deflate, br"})) as response:
            body = response.read()
            assert response.headers.get("Content-Encoding") == "br"
            assert response.headers["Content-Type"].startswith("text/html")
        import brotli
        assert brotli.decompress(body) == (built / "index.html").read_bytes()
        assert len(body) < (built / "index.html").stat().st_size / 4
        with urllib.request.urlopen(url) as response:  # no Accept-Encoding: the page as it is
            assert response.headers.get("Content-Encoding") is None
            assert response.read() == (built / "index.html").read_bytes()
    finally:
        server.shutdown()


def test_server_sends_the_mime_types_pyodide_needs(built):
    server = build.make_server(built, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        for path, mime in (("pyodide.asm.wasm", "application/wasm"), ("pyodide.mjs", "text/javascript")):
            with urllib.request.urlopen(f"{base}/vendor/pyodide-314.0.7/{path}") as response:
                assert response.headers["Content-Type"] == mime
                assert "immutable" in response.headers["Cache-Control"]
    finally:
        server.shutdown()


def test_server_sends_the_security_headers_with_every_file_and_error(built):
    """A <meta> policy cannot forbid framing; the dev server sends the header set the
    README gives hosts, on the page, a hashed asset, the runtime and a 404 alike."""
    expected = dict(build.SECURITY_HEADERS)
    assert "frame-ancestors 'none'" in expected["Content-Security-Policy"]
    assert expected["Content-Security-Policy"].startswith(build.CONTENT_SECURITY_POLICY)
    assert expected["X-Content-Type-Options"] == "nosniff" and expected["Referrer-Policy"] == "no-referrer"
    server = build.make_server(built, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    script = re.search(r'src="/(assets/playbook\.[0-9a-f]{12}\.js)"', (built / "index.html").read_text()).group(1)
    try:
        for path, accept in (("/", "br"), (f"/{script}", "identity"), ("/vendor/pyodide-314.0.7/pyodide.asm.wasm", "gzip"),
                             ("/sw.js", "identity")):
            with urllib.request.urlopen(urllib.request.Request(base + path, headers={"Accept-Encoding": accept})) as response:
                for name, value in expected.items():
                    assert response.headers[name] == value, (path, name)
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(base + "/no-such-file")
        assert missing.value.code == 404
        assert {name: missing.value.headers[name] for name in expected} == expected
    finally:
        server.shutdown()


def test_readme_gives_hosts_the_header_set_the_server_sends():
    readme = (build.ROOT / "README.md").read_text()
    nginx = dict(re.findall(r'^add_header ([\w-]+) "(.*)" always;$', readme, re.M))
    caddy = dict(re.findall(r'^\t([\w-]+) "(.*)"$', readme, re.M))
    assert nginx == dict(build.SECURITY_HEADERS)
    assert caddy == dict(build.SECURITY_HEADERS)


# --- source mistakes -----------------------------------------------------------------


class FakeStrategies:
    COMPARISON_COLUMNS, COMPARISON_ROWS, COMPARISON_NOTE = (), (), ""

    @staticmethod
    def card(key):
        raise ValueError(f"unknown card {key!r}")


def render_markdown(tmp_path, text, name="07-test.md"):
    templates = jinja2.Environment(loader=jinja2.FileSystemLoader(build.SITE / "templates"), autoescape=True)
    article = build.Article(templates, registry(), FakeStrategies(), {"known": {"key": "known"}})
    path = tmp_path / name
    path.write_text(text)
    html = article.render_file(path)
    return article, html


@pytest.mark.parametrize(
    "text, message",
    [
        ("## Fine {#fine}\n\nSome text.\n\n:::{figure} 99\n:::\n", r"07-test.md:5: figure 99 does not exist"),
        ("## A {#a}\n\n:::{figure} 15\n:::\n\n:::{figure} 15\n:::\n", r"07-test.md:6: figure 15 is already placed at .*07-test.md:3"),
        ("## No anchor here\n", r"07-test.md:1: heading 'No anchor here' needs an explicit"),
        ("## A {#a}\n\n## B {#a}\n", r"07-test.md:3: anchor #a already used"),
        ("## A {#a}\n\n:::{sidebar}\n:::\n", r"07-test.md:3: unknown directive"),
        ("## A {#a}\n\nAs shown [@nobody].\n", r"07-test.md:3: unknown reference \[@nobody\]"),
        ("## A {#a}\n\n:::{often-said}\nonly a claim\n:::\n", r"07-test.md:3: an often-said callout needs"),
        ("## A {#a}\n\n:::{card} nope\n:::\n", r"07-test.md:3: unknown card"),
        ("## A {#a}\n\nIt reads {{99.x}}.\n", r"07-test.md:3: \{\{99.x\}\} quotes figure 99, which is not built"),
        ("## A {#a}\n\nIt reads {{08.nope}}.\n", r"07-test.md:3: .*figure 08 has no readout 'nope'"),
        ("## A {#a}\n\nIt reads\n{{08.per_device_bytes|N=7}}.\n", r"07-test.md:4: .*N=7 is not one of its control's values \(nearest: 8\)"),
        ("## A {#a}\n\nIt reads {{08.per_device_bytes|Q=7}}.\n", r"07-test.md:3: .*figure 08 has no state Q=7"),
    ],
)
def test_source_mistakes_name_file_and_line(tmp_path, text, message):
    with pytest.raises(build.BuildError, match=message):
        render_markdown(tmp_path, text)


def test_figures_out_of_order_fail(tmp_path):
    article, _ = render_markdown(tmp_path, "## A {#a}\n\n:::{figure} 15\n:::\n\n<!-- figure 09: later -->\n")
    with pytest.raises(build.BuildError, match=r"figure 09 comes after figure 15"):
        build.check_figure_order(article)


def test_directives_render_components(tmp_path):
    article, html = render_markdown(
        tmp_path,
        "## Title {#title}\n\nInline $\\frac{P-1}{m+P-1}$ and [@known].\n\n$$\n16\\Psi\n$$\n\n"
        ":::{often-said}\nA claim.\n+++\nThe *correction*.\n:::\n\n:::{figure} 8\n:::\n",
    )
    assert '<h2 id="title">' in html and 'href="#title"' in html
    assert html.count("<math") == 2 and 'display="block"' in html
    assert 'href="#ref-known"' in html and article.cited == ["known"]
    assert 'data-callout="often-said"' in html and "<em>correction</em>" in html
    assert 'id="fig-08"' in html and article.placed.keys() == {8}


def test_a_template_error_fails_the_build_with_its_location(tmp_path, monkeypatch):
    broken = tmp_path / "templates"
    broken.mkdir()
    for template in (build.SITE / "templates").iterdir():
        (broken / template.name).write_text(template.read_text())
    (broken / "page.html").write_text("<html>{{ body | safe }}\n{{ no_such_variable.attr }}</html>")
    monkeypatch.setattr(build, "SITE", Path(tmp_path))
    (tmp_path / "static").mkdir()
    for static in (build.ROOT / "site" / "static").iterdir():
        (tmp_path / "static" / static.name).write_text("/* */")
    monkeypatch.setattr(build, "CONTENT", tmp_path / "content")
    (tmp_path / "content").mkdir()
    placed = "".join(f":::{{figure}} {number}\n:::\n\n" for number in sorted(registry()))
    (tmp_path / "content" / "01-a.md").write_text("## A {#a}\n\n" + placed)
    with pytest.raises(build.BuildError, match=r"page\.html:2: template error"):
        build.build(tmp_path / "dist")


def test_prose_quotes_a_figure_readout_at_its_default_or_a_named_state(tmp_path):
    """{{NN.key}} in prose is the figure's own readout text, so prose and figure agree."""
    _, html = render_markdown(tmp_path, "## A {#a}\n\nDDP needs {{08.per_device_bytes|stage=0}}, ZeRO-3 {{08.per_device_bytes}}.\n")
    figure = registry()[8]
    ddp = {r.key: r.text for r in figure.render({**figure.default_state(), "stage": 0}).readouts}["per_device_bytes"]
    assert ddp == "120 GB"
    assert html.count('class="quoted-readout"') == 2
    assert f'data-key="per_device_bytes">{ddp}</span>, ZeRO-3 <span' in html and ">1.88 GB</span>" in html


def test_the_one_inline_script_is_the_hold_flag_and_the_policy_allows_only_it(built):
    html = (built / "index.html").read_text()
    inline = [body for tag, body in re.findall(r"(<script\b[^>]*>)(.*?)</script>", html, flags=re.S)
              if 'src="' not in tag and 'type="application/json"' not in tag and 'type="py"' not in tag and body]
    assert inline == [build.HOLD_SCRIPT]  # data blocks never run; the only code inline sets html[data-hold]
    assert "data-hold" in build.HOLD_SCRIPT and "setTimeout" in build.HOLD_SCRIPT
    assert not re.search(r"\son[a-z]+=", re.sub(r"<(svg|math)\b.*?</\1>", "", html, flags=re.S)), "inline event handler"
    policy = html_lib.unescape(re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]+)"', html).group(1))
    directives = dict(part.strip().split(" ", 1) for part in policy.split(";"))
    digest = base64.b64encode(hashlib.sha256(build.HOLD_SCRIPT.encode()).digest()).decode()
    assert directives["script-src"].split() == ["'self'", f"'sha256-{digest}'", "'wasm-unsafe-eval'"]
    assert directives["worker-src"] == "'self'"  # no blob: workers
    assert directives["connect-src"] == "'self'" and "'unsafe-inline'" not in directives["script-src"]


def test_the_parser_may_yield_before_every_held_chapter_and_after_the_last(built):
    """An empty script ahead of each held chapter caps the parser's budget there, so the
    article after first paint is parsed in many short tasks, not one long one."""
    html = (built / "index.html").read_text()
    chapters = re.findall(f'({re.escape(build.PARSER_YIELD)})?' + r'<section class="chapter"([^>]*)>', html)
    assert len(chapters) > build.FIRST_HELD_CHAPTER
    assert all(bool(yields) == ("data-held" in attributes) for yields, attributes in chapters)
    assert "</section>" + build.PARSER_YIELD + "\n</main>" in html
    assert html.count(build.PARSER_YIELD) == len(chapters) - build.FIRST_HELD_CHAPTER + 1


def test_chapters_after_the_first_are_held_and_figure_controls_wait_in_templates(built):
    html = (built / "index.html").read_text()
    chapters = re.findall(r'<section class="chapter"[^>]*>', html)
    assert len(chapters) > build.FIRST_HELD_CHAPTER
    assert all(("data-held" in tag) == (index >= build.FIRST_HELD_CHAPTER) for index, tag in enumerate(chapters))
    held = html[html.index(chapters[build.FIRST_HELD_CHAPTER]):]
    outside_templates = re.sub(r"<template\b.*?</template>", "", held, flags=re.S)
    assert "data-control=" not in outside_templates and "<form" not in outside_templates
    shown_figures = html[:html.index(chapters[build.FIRST_HELD_CHAPTER])].count('<figure id="fig-')
    assert shown_figures >= 1 and "<template" not in html[:html.index(chapters[build.FIRST_HELD_CHAPTER])]
    assert html.count('<template data-role="controls-template"><form class="controls"') == len(registry()) - shown_figures


def test_the_page_describes_itself_for_links_and_tabs(built, tmp_path):
    html = (built / "index.html").read_text()
    assert re.search(r"<title>[^<]{20,}</title>", html) and '<meta name="description" content="' in html
    favicon = re.search(r'<link rel="icon" href="/([^"]+\.svg)" type="image/svg\+xml">', html).group(1)
    assert (built / favicon).read_bytes().startswith(b"<svg")
    image = re.search(r'<meta property="og:image" content="/([^"]+\.png)">', html).group(1)
    png = (built / image).read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and png[16:24] == (1200).to_bytes(4, "big") + (630).to_bytes(4, "big")
    assert "canonical" not in html  # no public address given
    public = build.build(tmp_path / "dist", base_url="https://example.org/playbook/")
    page = (public / "index.html").read_text()
    assert '<link rel="canonical" href="https://example.org/playbook/">' in page
    assert re.search(r'<meta property="og:image" content="https://example.org/playbook/assets/preview\.[0-9a-f]{12}\.png">', page)
    assert 'src="/playbook/assets/playbook.' in page  # links keep the path


def test_the_offline_copy_lists_every_file_of_its_build(built):
    source = (built / "sw.js").read_text()
    cache = re.search(r'const CACHE = "(playbook-[0-9a-f]{12})";', source).group(1)
    files = json.loads(re.search(r"const FILES = (\[.*?\]);", source, flags=re.S).group(1))
    on_disk = {"./" + p.relative_to(built).as_posix() for p in built.rglob("*") if p.is_file()}
    assert files[0] == "./" and set(files[1:]) == {f for f in on_disk
                                                   if not f.endswith((".br", ".gz")) and f not in ("./index.html", "./sw.js")}
    assert cache != "playbook-000000000000"
