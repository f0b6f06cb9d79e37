// The page's only hand-written JavaScript: draw the build-time Plotly snapshots as soon
// as plotly.js is parsed, show Python's loading progress, and offer one drawing function
// (playbookPlot) that the Python runtime calls too, so charts are themed in one place.
(function () {
  "use strict";
  const root = document.documentElement;
  const config = { displayModeBar: false, responsive: true };

  function themed(container, layout) {
    const style = getComputedStyle(container);
    const ink = style.getPropertyValue("--ink").trim() || "#222";
    const grid = style.getPropertyValue("--rule").trim() || "#ddd";
    const font = Object.assign({ family: style.fontFamily, size: 13 }, layout.font || {}, { color: ink });
    const axis = (a) => Object.assign({ gridcolor: grid, zerolinecolor: grid, linecolor: grid }, a || {});
    return Object.assign({}, layout, {
      font: font, paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)",
      xaxis: axis(layout.xaxis), yaxis: axis(layout.yaxis),
    });
  }

  // Charts asked for before plotly.js has run wait here, newest spec per container.
  const pending = new Map();

  // spec: {data, layout} as an object or a JSON string (Python passes JSON text).
  window.playbookPlot = function (container, spec) {
    if (typeof spec === "string") spec = JSON.parse(spec);
    if (!window.Plotly) {
      pending.set(container, spec);
      return false;
    }
    const fallback = container.querySelector(".plot-fallback");
    if (fallback) fallback.remove();
    window.Plotly.react(container, spec.data, themed(container, spec.layout || {}), config);
    return true;
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
