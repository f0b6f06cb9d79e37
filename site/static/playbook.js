// The page's only hand-written JavaScript: draw the build-time Plotly snapshots as soon
// as plotly.js is parsed, show Python's loading progress, and offer the drawing functions
// the Python runtime calls: playbookPaint, so a move crosses from Python to the DOM once,
// and playbookPlot (through it, and for rehearsals), so charts are themed in one place.
(function () {
  "use strict";
  const root = document.documentElement;
  const config = { displayModeBar: false, responsive: true };

  // Theme colours are read once per colour scheme, not on every redraw: reading computed
  // styles forces a style recalculation, and a chart redraws on every slider move.
  let theme = null;
  matchMedia("(prefers-color-scheme: dark)").addEventListener("change", function () {
    theme = null;
    document.querySelectorAll(".js-plotly-plot").forEach(function (plot) {
      const spec = shown.get(plot);
      if (spec) window.playbookPlot(plot, spec);
    });
  });
  function currentTheme(container) {
    if (!theme) {
      const style = getComputedStyle(container);
      theme = {
        ink: style.getPropertyValue("--ink").trim() || "#222",
        grid: style.getPropertyValue("--rule").trim() || "#ddd",
        family: style.fontFamily,
      };
    }
    return theme;
  }

  // Figures name colours from figures/palette.py; a chart's spec carries the light
  // values, and on a dark page each is swapped for its dark twin (the build writes the
  // table into the page as #palette-dark).
  const darkQuery = matchMedia("(prefers-color-scheme: dark)");
  const paletteNode = document.getElementById("palette-dark");
  const darkColours = paletteNode ? JSON.parse(paletteNode.textContent) : {};
  function recoloured(value) {
    if (typeof value === "string") return darkColours[value.toLowerCase()] || value;
    if (Array.isArray(value)) return value.length && typeof value[0] === "number" ? value : value.map(recoloured);
    if (value && typeof value === "object") {
      const copy = {};
      for (const key in value) copy[key] = /colou?r$|^fillcolor$|^bgcolor$/i.test(key) || typeof value[key] === "object" ? recoloured(value[key]) : value[key];
      return copy;
    }
    return value;
  }

  function themed(container, layout) {
    const t = currentTheme(container);
    const font = Object.assign({ family: t.family, size: 13 }, layout.font || {}, { color: t.ink });
    const axis = (a) => Object.assign({ gridcolor: t.grid, zerolinecolor: t.grid, linecolor: t.grid }, a || {});
    return Object.assign({}, layout, {
      font: font, paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)",
      xaxis: axis(layout.xaxis), yaxis: axis(layout.yaxis),
    });
  }

  // Charts asked for before plotly.js has run wait here, newest spec per container.
  const pending = new Map();
  const shown = new WeakMap();  // container -> the spec it draws now

  // spec: {data, layout} as an object or a JSON string (Python passes JSON text).
  window.playbookPlot = function (container, spec) {
    if (typeof spec === "string") spec = JSON.parse(spec);
    if (!window.Plotly) {
      pending.set(container, spec);
      return false;
    }
    const fallback = container.querySelector(".plot-fallback");
    if (fallback) fallback.remove();
    const data = darkQuery.matches ? recoloured(spec.data) : spec.data;
    const layout = themed(container, darkQuery.matches ? recoloured(spec.layout || {}) : spec.layout || {});
    window.Plotly.react(container, data, layout, config);
    shown.set(container, spec);
    return true;
  };

  // Redraw a chart as `spec` and straight back, in one task: no frame is painted in
  // between, so the reader sees nothing, but V8 compiles plotly's update path now, while
  // the reader is idle, instead of during their first few moves (40-100 ms each, against
  // ~15 ms once compiled). Skipped while the pointer is over the chart (a redraw would
  // drop its hover label).
  window.playbookRehearse = function (container, spec) {
    const current = shown.get(container);
    if (!window.Plotly || !current || container.matches(":hover")) return false;
    window.playbookPlot(container, spec);
    window.playbookPlot(container, current);
    return true;
  };

  // A figure's new drawing (SVG and/or chart), readout numbers, note and text alternative, painted in ONE
  // call from Python: every Python-to-DOM operation crosses Pyodide's FFI (~10-50 us
  // each), and a move used to make some twenty. svg: markup, plot: a chart spec as JSON,
  // each null/undefined when the figure has none. readouts: JSON, either a string (the
  // whole list's markup, when its entries change) or a list of [index, text, value] for
  // the entries whose number changed (value null: the entry has no raw value).
  // A painted figure is live, and any earlier error message goes away.
  window.playbookPaint = function (figure, svg, plot, readouts, note, alt, html) {
    if (svg != null) {
      const view = figure.querySelector('[data-role="view"]');
      const drawn = view.querySelector("svg");
      if (drawn) drawn.outerHTML = svg;
      else view.insertAdjacentHTML("afterbegin", svg);
    }
    if (plot != null) window.playbookPlot(figure.querySelector('[data-role="plot"]'), plot);
    const list = figure.querySelector('[data-role="readout"]');
    const changes = JSON.parse(readouts);
    if (typeof changes === "string") list.innerHTML = changes;
    else for (const [index, text, value] of changes) {
      const item = list.children[index];
      item.lastElementChild.textContent = text;
      if (value !== null) item.dataset.value = value;
    }
    // Each write below invalidates style or layout even when the value is unchanged.
    const noteNode = figure.querySelector('[data-role="note"]');
    if (noteNode.textContent !== note) noteNode.textContent = note;
    if (noteNode.hidden !== !note) noteNode.hidden = !note;
    const htmlNode = figure.querySelector('[data-role="html"]');
    if (html != null && htmlNode.innerHTML !== html) htmlNode.innerHTML = html;
    if (htmlNode.hidden !== !html) htmlNode.hidden = !html;
    const altNode = figure.querySelector('[data-role="alt"]');
    if (altNode.textContent !== alt) altNode.textContent = alt;
    const error = figure.querySelector('[data-role="error"]');
    if (!error.hidden) { error.hidden = true; error.textContent = ""; }
    if (figure.dataset.state !== "live") figure.dataset.state = "live";
  };

  // Run plotly.js once Pyodide has started loading (or after a grace period, when
  // Python is not coming at all), so its parse never delays Python's start.
  const plotlySrc = document.currentScript && document.currentScript.dataset.plotlySrc;
  let plotlyRequested = false;
  function loadPlotly() {
    if (plotlyRequested || !plotlySrc) return;
    plotlyRequested = true;
    const script = document.createElement("script");
    script.src = plotlySrc;
    script.onload = function () {
      drawSnapshots();
      pending.forEach((spec, container) => window.playbookPlot(container, spec));
      pending.clear();
    };
    document.head.appendChild(script);
  }
  addEventListener("py:progress", function (event) {
    if (String(event.detail).startsWith("Loading interpreter")) loadPlotly();
  });
  setTimeout(loadPlotly, 1500);

  // A figure's code block (figures/html.py `code`) copies its text.
  document.addEventListener("click", function (event) {
    const button = event.target.closest && event.target.closest("button[data-copy]");
    if (!button || !navigator.clipboard) return;
    const code = button.parentElement.querySelector("pre");
    navigator.clipboard.writeText(code.textContent).then(function () {
      button.dataset.copied = "";
      setTimeout(() => delete button.dataset.copied, 1500);
    }, function () {});
  });

  // Section anchors double as copy-link buttons: the link still navigates, and its URL
  // lands on the clipboard where the browser allows it.
  document.addEventListener("click", function (event) {
    const link = event.target.closest && event.target.closest("a.heading-link");
    if (!link || !navigator.clipboard) return;
    navigator.clipboard.writeText(link.href).then(function () {
      link.classList.add("copied");
      setTimeout(() => link.classList.remove("copied"), 1500);
    }, function () {});
  });

  function drawSnapshots() {
    document.querySelectorAll("figure[data-figure]").forEach(function (figure) {
      const spec = figure.querySelector('script[data-role="plot-spec"]');
      const plot = figure.querySelector('[data-role="plot"]');
      if (spec && plot && !plot.classList.contains("js-plotly-plot") && !pending.has(plot)) window.playbookPlot(plot, spec.textContent);
    });
  }

  // Python start-up progress, from PyScript's py:progress events.
  const steps = ["Loading Pyodide", "Loaded Pyodide", "Loading files", "Loaded files", "Loaded interpreter"];
  root.dataset.python = "loading";
  addEventListener("py:progress", function (event) {
    const text = String(event.detail || "");
    const bar = document.querySelector('[data-role="python-progress"]');
    const label = document.querySelector('[data-role="python-progress-text"]');
    const step = steps.findIndex((s) => text.startsWith(s));
    if (bar && step >= 0) bar.value = Math.max(bar.value, step + 1);
    if (label && text) label.textContent = text + "…";
  });
  // If Python never reports ready, say so instead of spinning forever.
  setTimeout(function () {
    if (root.dataset.python === "loading") root.dataset.python = "slow";
  }, 60000);

})();
