// The page's only hand-written JavaScript, and the only code that touches the DOM.
//
// The figures' Python runs in ONE Pyodide interpreter inside a Web Worker (worker.js,
// figures/worker.py): this thread holds no Python, so scrolling, selecting text and
// clicking never wait for it. Here we bind every figure's controls, send the worker
// what the reader did, and paint its answers: an answer is plain data (SVG text, a
// Plotly spec, readouts, note, text alternative, the validated state).
//
// Latest wins: a figure has at most one call in flight; inputs that arrive meanwhile
// only mark it dirty, and the controls are read when the next call leaves, so a fast
// drag never queues up. Answers are painted on the next animation frame, newest only.
//
// Views ahead: the worker posts the views it renders ahead (the states a control change
// away, and the next one along a drag), each under the control readings that select it.
// When the controls come to read a key the page holds, the view is painted at once, in
// the input's own task, with no call: a drag over rendered states costs only the paint.
//
// All of it runs in a task of its own, after the one where parsing ends: that task also
// lays out what the parser added and fires DOMContentLoaded and load, and with this
// script's 7-14 ms in it, it ran 50-77 ms in a third to a half of loads.
setTimeout(function (ownScript) {
  "use strict";
  const root = document.documentElement;
  const REQUEST_TIMEOUT_MS = 10000;  // a call unanswered this long: the worker is gone
  const SLOW_START_MS = 45000;  // say "still loading" after this long
  const REHEARSALS = 4;  // idle-time chart redraws that compile plotly's update path
  const VIEWS_KEPT = 1024;  // views ahead kept for all figures together (~12 KB each)
  const ALIASES_KEPT = 4096;  // readings keys that select another key's state (~200 B each)

  // ---------------------------------------------------------------------------
  // Charts: theme, palette, plotly loading

  // A phone's column (figures/contract.py NARROW_MAX_PX, playbook.css): the figures that
  // lay themselves out for it (data-lays-out-narrow) are rendered narrow. A short screen
  // wider than that (SHORT_MAX_PX: a phone on its side): those with a short layout
  // (data-lays-out-short) are rendered short once Python runs (none is baked).
  const narrowQuery = matchMedia("(max-width: 40rem)");
  const shortQuery = matchMedia("(max-height: 32rem) and (min-width: 40.0625rem)");
  function layoutName() { return narrowQuery.matches ? "narrow" : shortQuery.matches ? "short" : "wide"; }
  // The phone layout of the controls (a bar, the rest folded: playbook.css): a narrow
  // screen, or a short one (a phone on its side), whose drawings stay wide.
  const phoneQuery = matchMedia("(max-width: 40rem), (max-height: 32rem)");

  const config = { displayModeBar: false, responsive: true };
  const darkQuery = matchMedia("(prefers-color-scheme: dark)");
  const paletteNode = document.getElementById("palette-dark");
  const darkColours = paletteNode ? JSON.parse(paletteNode.textContent) : {};
  let theme = null;  // read once per colour scheme: computed styles force a style recalc
  const pendingPlots = new Map();  // container -> spec, until plotly.js has run
  const shownPlots = new WeakMap();  // container -> the spec it draws now

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
  // values, and on a dark page each is swapped for its dark twin (#palette-dark).
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
    }, shortScreenHeight(container));
  }

  // On a short screen a chart is as tall as its container (playbook.css: the screen under
  // its figure's bar), not the height its spec asks for.
  function shortScreenHeight(container) {
    const short = phoneQuery.matches && !narrowQuery.matches && container.clientHeight > 0;
    return short ? { height: container.clientHeight } : {};
  }

  // The one themed entry point to plotly. spec: {data, layout}, an object or JSON text.
  function plot(container, spec) {
    if (typeof spec === "string") spec = JSON.parse(spec);
    if (!window.Plotly) {
      pendingPlots.set(container, spec);
      loadPlotly();
      return false;
    }
    const fallback = container.querySelector(".plot-fallback");
    if (fallback) fallback.remove();
    const data = darkQuery.matches ? recoloured(spec.data) : spec.data;
    const layout = themed(container, darkQuery.matches ? recoloured(spec.layout || {}) : spec.layout || {});
    window.Plotly.react(container, data, layout, config);
    shownPlots.set(container, spec);
    return true;
  }

  darkQuery.addEventListener("change", function () {
    theme = null;
    document.querySelectorAll(".js-plotly-plot").forEach(function (container) {
      const spec = shownPlots.get(container);
      if (spec) plot(container, spec);
    });
  });

  // Redraw a chart as `spec` and straight back, in one task: no frame is painted in
  // between, so the reader sees nothing, but V8 compiles plotly's update path now,
  // while the reader is idle, instead of during their first moves. Skipped while the
  // pointer is over the chart (a redraw would drop its hover label).
  function rehearse(container, spec) {
    const current = shownPlots.get(container);
    if (!window.Plotly || !current || container.matches(":hover")) return false;
    plot(container, spec);
    plot(container, current);
    return true;
  }

  // plotly.js (1.2 MB) runs only when a chart comes near the viewport: a reader at the
  // top of the article never pays for it, and its parse never competes with Python's start.
  const plotlySrc = ownScript && ownScript.dataset.plotlySrc;
  let plotlyRequested = false;
  function loadPlotly() {
    if (plotlyRequested || !plotlySrc) return;
    plotlyRequested = true;
    const script = document.createElement("script");
    script.src = plotlySrc;
    script.onload = function () {
      pendingPlots.forEach((spec, container) => plot(container, spec));
      pendingPlots.clear();
    };
    document.head.appendChild(script);
  }

  // A chart comes near the viewport (or the page is printed): draw it, from its baked
  // spec unless a newer one is waiting. One chart per call: drawing all at once when
  // plotly.js lands would be one long task.
  function ensureChart(figure) {
    const container = figure.querySelector('[data-role="plot"]');
    if (!container || shownPlots.has(container)) return;
    const baked = figure.querySelector('script[data-role="plot-spec"]');
    const spec = pendingPlots.get(container) || (baked && baked.textContent);
    if (spec) plot(container, spec);
  }

  // ---------------------------------------------------------------------------
  // The worker

  const worker = { thread: null, ready: false, failed: false, calls: new Map(), nextCall: 1 };

  // A call of figures/worker.py (Worker.<name>): a promise of its answer text. It is
  // rejected with WORKER_LOST if the worker is gone before it answers (see "Faults").
  function call(name) {
    const args = Array.prototype.slice.call(arguments, 1);
    if (!worker.ready) return Promise.reject(WORKER_LOST);
    return new Promise(function (resolve, reject) {
      const id = worker.nextCall++;
      const timer = setTimeout(function () {
        worker.calls.delete(id);
        reject(WORKER_LOST);
        workerLost("a call went unanswered for " + REQUEST_TIMEOUT_MS / 1000 + " s");
      }, REQUEST_TIMEOUT_MS);
      worker.calls.set(id, { resolve: resolve, reject: reject, timer: timer });
      worker.thread.postMessage({ id: id, name: name, args: args });
    });
  }

  // The worker is gone (or never came): every figure keeps the drawing it shows and
  // says so in one line; nothing else on the page changes.
  function fail(reason) {
    if (worker.failed) return;
    if (worker.losses) return workerLost(reason);  // a restart that could not start: the second failure
    worker.failed = true;
    worker.ready = false;
    dropWorker();  // a worker stuck on a bad file stops using the CPU
    console.warn("The live figures are unavailable: " + reason);
    // Like ready, failed is a final state (until Retry): said once the whole article is shown.
    revealed.then(function () {
      if (!worker.failed) return;  // retried meanwhile
      root.dataset.python = "failed";
      figures.forEach(function (figure) {
        figure.unavailable("Live figures are unavailable here (" + shortReason(reason) + "): this drawing shows the figure's default state.", retryStart);
      });
    });
  }

  // Views the worker rendered, by figure and readings key; least recently used first.
  const viewsAhead = new Map();
  function keepView(number, answer) {
    const view = answer.view;
    if (!view || !view.key || answer.error || Object.keys(answer.errors || {}).length) return;
    if (view.layout && view.layout !== layoutName()) return;  // rendered for the column before a turn
    const key = number + " " + view.key;
    viewsAhead.delete(key);
    viewsAhead.set(key, answer);
    if (viewsAhead.size > VIEWS_KEPT) viewsAhead.delete(viewsAhead.keys().next().value);
  }

  // Readings that select a state other than the one they name (a rank slider dragged past
  // the last rank; a degree that shrinks another to fit): readings key -> the key of the
  // state they select, by figure. Painted from that state's view when the page holds it.
  const aliases = new Map();
  function keepAlias(number, key, of) {
    if (key === of) return;
    aliases.delete(number + " " + key);
    aliases.set(number + " " + key, number + " " + of);
    if (aliases.size > ALIASES_KEPT) aliases.delete(aliases.keys().next().value);
  }
  function keptView(key) {
    return viewsAhead.get(key) || viewsAhead.get(aliases.get(key));
  }

  function onWorkerMessage(event) {
    if (event.target !== worker.thread) return;  // from a worker replaced since
    heardFromWorker();
    // JSON text: what the worker says on its own; an object: the answer to a call
    if (typeof event.data !== "string") return answered(event.data);
    const message = JSON.parse(event.data);
    if (message.type === "ready") started();
    else if (message.type === "progress") progress(message.step);
    else if (message.type === "failed") fail(message.error);
    else if (message.type === "lost") workerLost(message.error);  // its Python broke (worker.js runtimeFailed)
    else if (message.type === "view") keepView(message.number, { number: message.number, errors: {}, view: message.view, error: null });
    else if (message.type === "aliases") message.aliases.forEach(function (pair) { keepAlias(message.number, pair[0], pair[1]); });
    else if (message.type === "ahead") {
      const figure = byNumber.get(message.number);
      if (figure) {
        figure.element.dataset.ahead = String(message.ready);  // how many states around aheadOf
        figure.element.dataset.aheadOf = message.around;
      }
    }
  }

  function answered(reply) {
    if ("pong" in reply) return;  // the heartbeat's (heardFromWorker)
    const pending = worker.calls.get(reply.id);
    if (!pending) return;  // timed out already
    worker.calls.delete(reply.id);
    clearTimeout(pending.timer);
    if ("error" in reply) pending.reject(new Error(reply.error));
    else pending.resolve(reply.value);
  }

  // The worker (site/static/worker.js) loads Pyodide and figures/worker.py, then posts
  // ready; a script that cannot load, or an error it does not catch, is its end.
  function connect() {
    try {
      worker.thread = new Worker(root.dataset.worker, { type: "module" });
    } catch (error) {
      return fail("the worker could not start: " + error);
    }
    worker.thread.addEventListener("message", onWorkerMessage);
    const thread = worker.thread;
    worker.thread.addEventListener("error", function (event) {
      if (thread !== worker.thread) return;
      if (worker.ready) workerLost(event.message || "an error in the worker");
      else fail(event.message || "the worker stopped");
    });
    watchStart();
    // Python's start keeps every core busy for seconds: the worker fetches its files now
    // and starts Python once the article is shown (worker.js), or at once in a tab
    // nobody looks at. Ready waits for the article either way.
    function startPython() { thread.postMessage({ start: true }); }
    revealed.then(startPython);
    if (document.hidden) startPython();
    else document.addEventListener("visibilitychange", function () { if (document.hidden) startPython(); });
    // A missing runtime file, or a wasm file served with the wrong type, makes Pyodide
    // hang without a word: ask the server first, so the page can say so at once.
    preflight();
    setTimeout(function () { if (!worker.ready && !worker.failed && !worker.losses) root.dataset.python = "slow"; }, SLOW_START_MS);
  }

  function preflight() {
    const checks = JSON.parse(root.dataset.runtimeFiles || "[]");
    checks.forEach(function (check) {
      fetch(check.url, { method: "HEAD", cache: "no-store" }).then(function (response) {
        const type = response.headers.get("Content-Type") || "";
        if (!response.ok) fail(check.url + " answered " + response.status);
        else if (check.type && !type.startsWith(check.type)) fail(check.url + " is served as " + type + ", not " + check.type);
      }, function () { fail(check.url + " could not be fetched"); });
    });
  }

  function started() {
    worker.ready = true;
    startHeartbeat();
    revealed.then(worker.losses ? resume : live);
  }

  function live() {
    if (worker.failed) return;
    progress(4);
    call("layout", JSON.stringify(layoutName())).catch(function () {});  // before any other call
    if (worker.wentLive) return resume();  // after Retry: the figures carry on where they are
    worker.wentLive = true;
    narrowQuery.addEventListener("change", relayout);
    shortQuery.addEventListener("change", relayout);
    figures.forEach(function (figure) { figure.live(); });
    if (layoutName() === "short") redrawForScreen(["data-lays-out-short"]);  // the build baked them wide
    tellWatched();
    nearNumbers.forEach(function (number) {
      const figure = byNumber.get(number);
      if (figure.plotContainer) figure.rehearseWhenIdle();
    });
    const hash = location.hash;
    const restoring = hash.startsWith("#fig-") ? restore(hash) : Promise.resolve();
    restoring.then(function () {
      figures.forEach(function (figure) { figure.pump(); });
      setTimeout(ready, 0);  // a task of its own: the restyle above is laid out there
    });
  }

  function ready() {
    if (worker.failed) return;
    // Ready lets chapters skip layout and paint while off screen (content-visibility,
    // playbook.css): each first keeps the height it has now (all read, then all written:
    // one layout), so nothing above the reader moves. A chapter turns skippable only
    // once it is off screen: one turned skippable on screen stayed blank for a frame
    // (Chromium first treats it as off screen), which read as a layout shift (CLS 0.19
    // on a phone).
    const chapters = Array.from(document.querySelectorAll(".chapter"));
    chapters.map((chapter) => chapter.offsetHeight).forEach(function (height, index) {
      chapters[index].style.containIntrinsicSize = "auto " + height + "px";
    });
    const offScreen = new IntersectionObserver(function (entries) {
      entries.forEach(function (entry) {
        if (entry.isIntersecting) return;
        entry.target.dataset.skippable = "";
        offScreen.unobserve(entry.target);
      });
    });
    chapters.forEach((chapter) => offScreen.observe(chapter));
    root.dataset.python = "ready";
    if (landedTarget) landedTarget.scrollIntoView();
    // Once the reader has the live page, and the machine is idle: the offline copy.
    // (Not plotly.js: it and its first chart take 120-170 ms of main thread here; it
    // waits until a chart comes near.)
    requestIdleCallback(function () { registerServiceWorker(); measureEquations(); }, { timeout: 10000 });
  }

  // The screen changed layout (a phone turned, a window resized): the worker renders for
  // the new one, the views kept for the old one are dropped, and each figure that lays
  // itself out for a screen is drawn again as it stands.
  function relayout() {
    if (worker.failed) return;
    call("layout", JSON.stringify(layoutName())).catch(function () {});
    redrawForScreen(["data-lays-out-narrow", "data-lays-out-short"]);
  }

  // Each figure with one of `attributes` drawn again for this screen, its kept views dropped.
  function redrawForScreen(attributes) {
    const relaid = new Set();
    figures.forEach(function (figure) {
      openFolds(figure.element);
      if (!attributes.some(function (name) { return figure.element.hasAttribute(name); })) return;
      relaid.add(String(figure.number));
      figure.dirty = true;
      figure.request();
    });
    [viewsAhead, aliases].forEach(function (kept) {
      Array.from(kept.keys()).forEach(function (key) { if (relaid.has(key.split(" ")[0])) kept.delete(key); });
    });
  }

  // On a wide screen the "More controls" fold is always open (playbook.css shows it open
  // where ::details-content is styled; this opens it where it is not).
  // Back on a phone, the folds opened for the wide screen close again (not one the reader opened).
  function openFolds(element) {
    element.querySelectorAll('[data-role="more-controls"]').forEach(function (fold) {
      if (!phoneQuery.matches && !fold.open) { fold.open = true; fold.dataset.openedForWide = ""; }
      else if (phoneQuery.matches && fold.hasAttribute("data-opened-for-wide")) {
        fold.open = false;
        fold.removeAttribute("data-opened-for-wide");
      }
    });
  }

  // A link's state (#fig-15:P=8,m=16): the figure takes it and scrolls into view.
  function restore(hash) {
    return call("restore", hash).then(function (text) {
      const answer = JSON.parse(text);
      const figure = answer && byNumber.get(answer.number);
      if (!figure) return;
      keepView(figure.number, answer);
      figure.seq += 1;  // newer than any answer still on its way
      figure.paintNow(answer, true, figure.seq);
      figure.element.scrollIntoView();
      showCleanedLink(hash, answer);
    }, function (error) {
      if (error !== WORKER_LOST) console.warn("a link's state could not be restored: " + error);
    });
  }
  addEventListener("hashchange", function () { if (worker.ready) restore(location.hash); });

  // ---------------------------------------------------------------------------
  // Faults: one figure's error stays in that figure; a worker that is gone or stuck is
  // found by a heartbeat and started again once; a start-up that stops is said, with Retry.
  //
  // A figure's call that fails (figures/worker.py answers its error; worker.js, an error
  // it caught) shows "This figure stopped: ..." in that figure only, with a Retry that
  // sends its current state again. The worker's thread is watched by a heartbeat: a ping
  // every HEARTBEAT_MS, answered from JavaScript on the thread Python runs on, so a worker
  // terminated or wedged in a loop answers none. The watch counts only beats that come on
  // time (a page thread busy elsewhere, or a hidden tab, counts nothing), so a slow phone
  // is judged as a desktop is. A worker lost is started again and each figure carries on
  // from its current state; a second loss stops the live figures, each keeping its last
  // drawing. Start-up is watched by the worker itself (worker.js: bytes arriving, stages
  // ending); the page only waits for the worker's first word.

  const WORKER_LOST = new Error("the figures' worker stopped");
  const HEARTBEAT_MS = 500;
  const SILENT_BEATS = 8;  // on-time beats with no word from the worker: ~4 s
  const START_TICK_MS = 250;
  const SCRIPT_STALL_TICKS = 40;  // on-time ticks before the worker's script says anything: ~10 s
  const NOTE_SHOWN_MS = 5000;  // how long "Live figures restarted" stays
  worker.losses = 0;  // workers lost after they were ready (or a restart that did not start)

  // Calls `onTick` every `tickMs`; after `limit` ticks in a row that came on time with no
  // `progress()` between them, stops and calls `onStall`. A late tick (this thread was
  // busy) or a hidden page starts the count again: it measures silence, not time.
  function idleWatch(tickMs, limit, onTick, onStall) {
    const watch = { idle: 0, last: performance.now() };
    watch.progress = function () { watch.idle = 0; };
    watch.stop = function () { clearInterval(watch.timer); };
    watch.timer = setInterval(function () {
      const now = performance.now(), late = now - watch.last > 3 * tickMs;
      watch.last = now;
      if (late || document.hidden) watch.progress();
      else if (++watch.idle >= limit) { watch.stop(); return onStall(); }
      if (onTick) onTick();
    }, tickMs);
    return watch;
  }

  function watchStart() {
    if (worker.startWatch) worker.startWatch.stop();
    worker.startWatch = idleWatch(START_TICK_MS, SCRIPT_STALL_TICKS, null, function () {
      worker.startWatch = null;
      fail("the figures' worker did not start");
    });
  }

  function startHeartbeat() {
    if (worker.heartbeat) worker.heartbeat.stop();
    const thread = worker.thread;
    let beat = 0;
    worker.heartbeat = idleWatch(HEARTBEAT_MS, SILENT_BEATS, function () {
      thread.postMessage({ ping: ++beat });
    }, function () {
      workerLost("it stopped answering");
    });
  }

  function heardFromWorker() {
    if (worker.startWatch) { worker.startWatch.stop(); worker.startWatch = null; }  // worker.js watches its start
    if (worker.heartbeat) worker.heartbeat.progress();
  }

  // The worker goes: its watches stop, and every call waiting on it is rejected (each
  // figure sends its call again once a worker is ready: LiveFigure.sendAgain).
  function dropWorker() {
    [worker.startWatch, worker.heartbeat].forEach(function (watch) { if (watch) watch.stop(); });
    worker.startWatch = worker.heartbeat = null;
    worker.ready = false;
    if (worker.thread) worker.thread.terminate();
    worker.thread = null;
    worker.calls.forEach(function (pending) { clearTimeout(pending.timer); pending.reject(WORKER_LOST); });
    worker.calls.clear();
  }

  function workerLost(reason) {
    if (worker.failed) return;
    if (!worker.ready && !worker.losses) return fail(reason);  // it never started: a start-up failure
    dropWorker();
    worker.losses += 1;
    console.warn("The figures' worker stopped (" + reason + ")");
    if (worker.losses > 1) return stopLiveFigures();
    root.dataset.python = "restarting";
    workerNote("The live figures stopped responding: starting them again…");
    connect();
  }

  // A new worker is ready: the figures carry on from their current states (a call lost
  // with the old worker is sent again), and the worker renders ahead from them.
  function resume() {
    if (worker.failed) return;
    call("layout", JSON.stringify(layoutName())).catch(function () {});
    figures.forEach(function (figure) { figure.resume(); });
    tellWatched();
    root.dataset.python = "ready";
    workerNote("Live figures restarted.", NOTE_SHOWN_MS);
  }

  function stopLiveFigures() {
    worker.failed = true;
    root.dataset.python = "stopped";
    workerNote("Live figures stopped: each figure shows its last drawing.");
    figures.forEach(function (figure) {
      figure.unavailable("Live figures stopped (their worker failed twice): this is the figure's last drawing.");
    });
  }

  // Retry after a start-up failure: a new worker, the figures as they were.
  function retryStart() {
    if (!worker.failed || worker.losses) return;
    worker.failed = false;
    root.dataset.python = "loading";
    figures.forEach(function (figure) { figure.available(); });
    connect();
  }

  // An error in one line (a traceback ends with the error itself), short enough for a status line.
  function shortReason(reason) {
    const line = String(reason).split("\n").filter(Boolean).pop() || "unknown error";
    return line.length > 160 ? line.slice(0, 157) + "…" : line;
  }

  function retryButton(action) {
    const button = document.createElement("button");
    button.type = "button";
    button.className = "retry-button";
    button.dataset.role = "retry";
    button.textContent = "Retry";
    button.addEventListener("click", action);
    return button;
  }

  // One short line at the foot of the window, wherever the reader is (a figure's own
  // status line would shift the article); gone after `shownMs`, if given.
  let noteTimer = 0;
  function workerNote(text, shownMs) {
    let note = document.querySelector('[data-role="worker-note"]');
    if (!note) {
      note = document.createElement("p");
      note.className = "page-note";
      note.dataset.role = "worker-note";
      note.setAttribute("role", "status");
      document.body.append(note);
    }
    note.textContent = text;
    note.hidden = false;
    clearTimeout(noteTimer);
    if (shownMs) noteTimer = setTimeout(function () { note.hidden = true; }, shownMs);
  }

  // A link restored to a state other than the one it names (a hostile or stale link,
  // clamped into range): the address bar shows the state the figure shows.
  function showCleanedLink(hash, answer) {
    if (!answer.view || answer.error || location.hash !== hash) return;
    const cleaned = "#" + answer.view.fragment;
    if (hash !== cleaned) history.replaceState(null, "", cleaned);
  }

  LiveFigure.prototype.showError = function (reason) {
    const element = this.element;
    element.dataset.state = "error";
    const box = element.querySelector('[data-role="error"]');
    box.hidden = false;
    box.textContent = "This figure stopped: " + shortReason(reason) + ".";
    const self = this;
    box.append(" ", retryButton(function () { self.retry(); }));
    console.warn("figure " + this.number + ": " + reason);
  };

  // Retry after an error: the figure's current state (its controls' readings, the last
  // good state) is sent again.
  LiveFigure.prototype.retry = function () {
    const box = this.element.querySelector('[data-role="error"]');
    box.hidden = true;
    box.textContent = "";
    this.seq += 1;
    this.dirty = true;
    this.request();
  };

  // A call lost with its worker: asked again (from the controls as they read then) once
  // a worker is ready.
  LiveFigure.prototype.sendAgain = function (sent) {
    if (!sent) return;
    if (sent.item) this.queue.unshift(sent.item);
    else {
      this.dirty = true;
      this.values = Object.assign({}, sent.values, this.values);
    }
    this.request();
  };

  LiveFigure.prototype.resume = function () {
    if (this.state) call("touch", this.number, JSON.stringify(this.state), JSON.stringify(this.readings())).catch(function () {});
    if (this.busy()) this.request();
  };

  // Undo `unavailable` (Retry after a start-up failure).
  LiveFigure.prototype.available = function () {
    const element = this.element;
    const status = element.querySelector('[data-role="status"]');
    status.hidden = true;
    status.textContent = "";
    element.querySelector('[data-role="controls"]').removeAttribute("inert");
    element.querySelectorAll('[data-role="tries"], [data-role="reset"]').forEach(function (node) { node.hidden = false; });
  };

  // Which figures are near the screen (within 1500 px): the worker renders their nearby
  // states ahead, and a chart coming near loads plotly.js and rehearses its redraw. And
  // which are on it: once the figure a reader used is off screen, the worker no longer
  // keeps the others waiting for a pause in its calls (figures/worker.py _next_ahead).
  const nearNumbers = new Set();
  const onScreenNumbers = new Set();
  function tellWatched() {
    if (!worker.ready) return;
    call("watch", JSON.stringify(Array.from(nearNumbers)), JSON.stringify(Array.from(onScreenNumbers)))
      .catch(function () {});
  }
  function watchVisible() {
    const near = new IntersectionObserver(function (entries) {
      entries.forEach(function (entry) {
        const figure = byNumber.get(Number(entry.target.dataset.figure));
        if (entry.isIntersecting) nearNumbers.add(figure.number);
        else nearNumbers.delete(figure.number);
        if (entry.isIntersecting && figure.plotContainer) {
          ensureChart(figure.element);
          figure.rehearseWhenIdle();
        }
      });
      tellWatched();
    }, { rootMargin: "1500px 0px" });
    const onScreen = new IntersectionObserver(function (entries) {
      entries.forEach(function (entry) {
        const number = Number(entry.target.dataset.figure);
        if (entry.isIntersecting) onScreenNumbers.add(number);
        else onScreenNumbers.delete(number);
      });
      tellWatched();
    });
    figures.forEach(function (figure) { near.observe(figure.element); onScreen.observe(figure.element); });
  }

  // ---------------------------------------------------------------------------
  // One figure on the page

  function LiveFigure(element) {
    this.element = element;
    this.number = Number(element.dataset.figure);
    this.controls = [];  // bound by attach(), once the figure is shown
    this.attached = false;
    this.plotContainer = element.querySelector('[data-role="plot"]');
    this.state = null;  // the last good state the worker answered (null: the baked default)
    this.dirty = false;  // the controls changed since the last call left
    this.values = {};  // values a click on the drawing sets, sent with the next call
    this.queue = [];  // presses, in order (never dropped)
    this.inflight = false;
    this.pressing = false;  // the call in flight is a press
    this.answer = null;  // the newest answer not yet painted
    this.answerSeq = 0;
    this.frame = 0;
    // Every input, press and click counts one; a call carries the count it was sent at,
    // and an answer older than what is painted is never painted.
    this.seq = 0;
    this.paintedSeq = 0;
    this.paintedThisFrame = false;
    this.rememberUrl = false;
    this.rehearsals = REHEARSALS;
    this.timers = {};  // play toggles' intervals
    const self = this;
    // A part of the drawing that sets a state (data-set="rank=5"), by click or by key; or
    // a strip of cells (data-set-strip="rank=40/8", svg.hit_strips), by click: the cell
    // under the pointer sets rank 40 to 47.
    const view = element.querySelector('[data-role="view"]');
    const activate = function (event) {
      const target = event.target.closest && event.target.closest("[data-set],[data-set-strip]");
      if (!target || !view.contains(target)) return;
      if (event.type === "keydown" && (event.key !== "Enter" && event.key !== " " || !target.dataset.set)) return;
      event.preventDefault();
      if (target.dataset.set) {
        target.dataset.set.split(",").forEach(function (pair) {
          const at = pair.indexOf("=");
          if (at > 0) self.values[pair.slice(0, at).trim()] = pair.slice(at + 1).trim();
        });
      } else {
        const strip = /^([^=]+)=(-?\d+)\/(\d+)$/.exec(target.dataset.setStrip);
        if (!strip) return;
        const box = target.getBoundingClientRect(), count = Number(strip[3]);
        const cell = Math.min(count - 1, Math.max(0, Math.floor((event.clientX - box.left) / box.width * count)));
        self.values[strip[1]] = String(Number(strip[2]) + cell);
      }
      self.rememberUrl = true;
      self.seq += 1;
      self.request();
    };
    view.addEventListener("click", activate);
    view.addEventListener("keydown", activate);
    // The row above the controls: each try sets the state its link names; Reset, the
    // default state (both as a link to #fig-NN:... would, without scrolling the page).
    // A try opened in a new tab or window is left to the browser: the link restores it.
    const actions = element.querySelector('[data-role="actions"]');
    this.resetButton = actions && actions.querySelector('[data-role="reset"]');
    this.tryLinks = actions ? Array.from(actions.querySelectorAll('[data-role="try"]')) : [];
    this.markedFragment = element.id;  // the state the buttons were last marked for (baked: the default)
    if (actions) actions.addEventListener("click", function (event) {
      const target = event.target.closest('[data-role="try"], [data-role="reset"]');
      if (!target) return;
      if (target.dataset.role === "try") {
        if (event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
        event.preventDefault();
        self.go(target.dataset.fragment);
      } else if (target.getAttribute("aria-disabled") !== "true") {
        self.go(element.id);
      }
    });
  }

  // Set the figure to the state a fragment names (fig-15:P=8 or just fig-15, the default),
  // through the worker's restore, as a link would; it supersedes any move not yet sent.
  // The URL follows once it is painted. Before Python is ready it waits, like a press.
  LiveFigure.prototype.go = function (fragment) {
    if (worker.failed) return;
    this.seq += 1;
    this.dirty = false;
    this.values = {};
    this.queue.push({ restore: fragment });
    this.rememberUrl = true;
    this.request();
  };

  // Reset is disabled at the default state, and the try whose state is shown is marked.
  LiveFigure.prototype.markState = function (fragment) {
    if (fragment === this.markedFragment) return;
    this.markedFragment = fragment;
    if (this.resetButton) this.resetButton.setAttribute("aria-disabled", String(fragment === this.element.id));
    this.tryLinks.forEach(function (link) {
      if (link.dataset.fragment === fragment) link.setAttribute("aria-current", "true");
      else if (link.hasAttribute("aria-current")) link.removeAttribute("aria-current");
    });
  };

  // Binds the controls; in a held chapter they first come out of their <template>
  // (figure.html), when the figure is shown.
  LiveFigure.prototype.attach = function () {
    if (this.attached) return;
    this.attached = true;
    const template = this.element.querySelector('template[data-role="controls-template"]');
    if (template) template.replaceWith(template.content);
    openFolds(this.element);
    this.controls = Array.from(this.element.querySelectorAll("[data-control]"));
    const self = this;
    this.controls.forEach(function (node) {
      const key = node.dataset.control;
      if (node.tagName === "BUTTON") {
        node.addEventListener("click", function () { self.seq += 1; self.queue.push({ press: key }); self.request(); });
        return;
      }
      node.addEventListener("input", function () { self.lastEdited = key; self.moved(); });
      node.addEventListener("change", function () {
        self.rememberUrl = true;
        if (node.dataset.drives) self.play(node);
        if (!self.busy()) self.remember();
      });
    });
  };

  LiveFigure.prototype.busy = function () {
    return this.inflight || this.dirty || this.queue.length > 0 || this.answer !== null || Object.keys(this.values).length > 0;
  };

  // The reader moved a control: paint a view kept for the new readings now, or ask.
  LiveFigure.prototype.moved = function () {
    this.seq += 1;
    if (this.paintKept()) return;
    this.dirty = true;
    this.request();
  };

  // The controls' readings as the worker keys its views (FigureSession.readings_key).
  LiveFigure.prototype.readingsKey = function (readings) {
    readings = readings || this.readings();
    // a typed count reads the same with or without its separators ("1,024", "1024"): figures/worker.py
    if (!this.typed || this.typed.bound !== this.controls.length) {
      this.typed = new Set(this.controls.filter((n) => n.type === "text").map((n) => n.dataset.control));
      this.typed.bound = this.controls.length;
    }
    const typed = this.typed;
    return JSON.stringify(Object.keys(readings).sort().map((key) => [key,
      typed.has(key) ? String(readings[key]).replace(/[,\s_]/g, "") : String(readings[key])]));
  };

  LiveFigure.prototype.paintKept = function () {
    if (!worker.ready || this.pressing || this.queue.length || Object.keys(this.values).length) return false;
    const readings = this.readings();
    const answer = keptView(this.number + " " + this.readingsKey(readings));
    if (!answer) return false;
    const key = this.number + " " + answer.view.key;
    viewsAhead.delete(key);
    viewsAhead.set(key, answer);
    this.dirty = false;  // these readings are answered
    if (this.paintedThisFrame) {
      // a burst of inputs in one frame: paint the newest once, on the next frame; busy till
      // then (a slow machine's frame can be late: a reader, or a test, must not take the
      // figure for painted while this one waits)
      this.element.setAttribute("data-busy", "");
      this.schedule(answer, this.seq);
    } else {
      this.paintNow(answer, false, this.seq);
    }
    call("touch", this.number, JSON.stringify(answer.view.state), JSON.stringify(readings)).catch(function () {});
    return true;
  };

  LiveFigure.prototype.request = function () {
    if (worker.failed) return;
    this.element.setAttribute("data-busy", "");
    this.pump();
  };

  // Every control's reading, as the worker reads them.
  LiveFigure.prototype.readings = function () {
    const readings = {};
    this.controls.forEach(function (node) {
      if (node.tagName === "BUTTON") return;
      readings[node.dataset.control] = node.type === "checkbox" ? node.checked : node.value;
    });
    return readings;
  };

  LiveFigure.prototype.pump = function () {
    if (!worker.ready || this.inflight) return;
    const state = this.state ? JSON.stringify(this.state) : "";
    let pending, asked = null;
    const seq = this.seq;
    this.pressing = this.queue.length > 0;
    let writeFields = false;  // a try or Reset rewrites typed fields too
    let sent;  // what left, to send again should the worker be lost before it answers
    if (this.queue.length) {
      const item = this.queue.shift();
      sent = { item: item };
      writeFields = "restore" in item;
      pending = writeFields ? call("restore", "#" + item.restore) : call("press", this.number, item.press, state);
    } else if (this.dirty || Object.keys(this.values).length) {
      const values = JSON.stringify(this.values), readings = this.readings();
      sent = { values: this.values };
      if (values === "{}") asked = this.readingsKey(readings);  // the answer's state is theirs alone
      this.dirty = false;
      this.values = {};
      pending = call("update", this.number, JSON.stringify(readings), values, state);
    } else {
      return;
    }
    this.inflight = true;
    const self = this;
    pending.then(function (text) {
      const pressed = self.pressing;
      self.inflight = false;
      self.pressing = false;
      const answer = JSON.parse(text);
      if (!answer) { self.settle(); return self.pump(); }  // (a fragment naming no figure: never one of ours)
      if (!pressed && answer.view && answer.view.layout && answer.view.layout !== layoutName()) {
        self.dirty = true;  // rendered for the column before the phone turned: asked again, never painted
        return self.pump();
      }
      answer.writeFields = writeFields;
      if (asked && answer.view && answer.view.key && !answer.error && !Object.keys(answer.errors).length) {
        keepAlias(self.number, asked, answer.view.key);
      }
      self.receive(answer, seq);
      self.pump();
    }, function (error) {
      self.inflight = false;
      self.pressing = false;
      if (error === WORKER_LOST) return self.sendAgain(sent);
      self.paintNow({ number: self.number, errors: {}, view: null, error: String((error && error.message) || error) }, false, seq);
    });
  };

  LiveFigure.prototype.receive = function (answer, seq) {
    performance.mark("playbook:answer", { detail: this.number });  // for DevTools and bench/browser.py
    keepView(this.number, answer);
    if (seq < this.paintedSeq) return this.settle();  // a newer state is painted already
    this.schedule(answer, seq);
  };

  // Paint `answer` on the next animation frame (an older unpainted one is replaced).
  LiveFigure.prototype.schedule = function (answer, seq) {
    if (answer.view) this.state = answer.view.state;
    this.answer = answer;
    this.answerSeq = seq;
    if (!this.frame) {
      const self = this;
      this.frame = requestAnimationFrame(function () {
        self.frame = 0;
        const newest = self.answer;
        self.answer = null;
        if (newest && self.answerSeq >= self.paintedSeq) self.paintNow(newest, !!newest.writeFields, self.answerSeq);
        else self.settle();
      });
    }
  };

  // Paint one answer, for input number `seq`. `writeFields`: also rewrite typed fields
  // (a restore or a press; never the text a reader is typing).
  LiveFigure.prototype.paintNow = function (answer, writeFields, seq) {
    performance.mark("playbook:paint", { detail: this.number });
    this.paintedSeq = Math.max(this.paintedSeq, seq);
    if (!this.paintedThisFrame) {
      this.paintedThisFrame = true;
      const self = this;
      requestAnimationFrame(function () { self.paintedThisFrame = false; });
    }
    const element = this.element;
    this.showFieldErrors(Object.assign({}, answer.view && answer.view.fieldErrors, answer.errors));
    this.markStale(!answer.error && Object.keys(answer.errors || {}).length > 0);
    if (answer.error) {
      this.showError(answer.error);
    } else {
      const view = answer.view;
      this.state = view.state;
      try {
        this.writeControls(view.controls, writeFields, view.limits, view.hints);
        paintView(element, view);
        this.markState(view.fragment);
      } catch (error) {  // (a chart plotly refuses, say): this figure's error, not the page's
        this.showError("its drawing could not be shown: " + ((error && error.message) || error));
      } finally {
        this.settle();  // a paint that throws must not leave the figure busy
      }
      return;
    }
    this.settle();
  };

  // Nothing left to paint: the figure is not busy, and a finished move goes in the URL.
  LiveFigure.prototype.settle = function () {
    if (this.busy()) return;
    this.element.removeAttribute("data-busy");
    if (this.rememberUrl) this.remember();
  };

  // `limits`: the max of each slider whose range this state narrows (Figure.slider_limits),
  // set before the value, which the old max would otherwise clamp.
  LiveFigure.prototype.writeControls = function (controls, writeFields, limits, hints) {
    const element = this.element;
    this.controls.forEach(function (node) {
      const entry = controls[node.dataset.control];
      if (!entry) return;
      // what an empty field stands for in this state (the lab's preset values), greyed in it
      const hint = (hints && hints[node.dataset.control]) || "";
      if (node.type === "text" && node.placeholder !== hint) node.placeholder = hint;
      const position = entry[0], text = entry[1];
      const max = limits && limits[node.dataset.control];
      if (max !== undefined && node.max !== max) node.max = max;
      if (node.type === "checkbox") {
        if (node.checked !== position) node.checked = position;
      } else if (node.type === "text") {
        if (writeFields && node.value !== position) node.value = position;
      } else if (node.value !== position) {
        node.value = position;
      }
      if (node.type === "range") {
        // Each write invalidates layout even when equal: write only what changed.
        const output = element.querySelector('output[data-for="' + node.dataset.control + '"]');
        if (output && output.textContent !== text) output.textContent = text;
        if (node.getAttribute("aria-valuetext") !== text) node.setAttribute("aria-valuetext", text);
      }
    });
  };

  LiveFigure.prototype.showFieldErrors = function (errors) {
    const self = this;
    errors = this.placeFieldErrors(errors);
    this.element.querySelectorAll('[data-role="field-error"]').forEach(function (node) {
      const message = errors[node.dataset.for] || "";
      if (node.textContent === message) return;
      node.textContent = message;
      node.hidden = !message;
      const field = self.element.querySelector('[data-control="' + node.dataset.for + '"]');
      if (field) field.setAttribute("aria-invalid", message ? "true" : "false");
    });
  };

  // ---------------------------------------------------------------------------
  // Typed fields (the planner lab, issues 42-43): where a message about several fields
  // goes, and a view left from before a typing error

  // A message about several fields comes keyed by all of them ("tp kv_heads", each one the
  // reader set: figures/contract.py View.field_errors); it is shown once, by the field the
  // reader touched last, else by the first.
  LiveFigure.prototype.placeFieldErrors = function (errors) {
    const placed = {}, last = this.lastEdited;
    Object.keys(errors).forEach(function (keys) {
      const among = keys.split(" ");
      placed[among.indexOf(last) >= 0 ? last : among[0]] = errors[keys];
    });
    return placed;
  };

  // A field that cannot be read keeps the figure at its last good state: what is drawn is
  // then not what the fields say. It is dimmed and labelled so until the field reads again.
  LiveFigure.prototype.markStale = function (stale) {
    const element = this.element;
    if (element.hasAttribute("data-stale") === stale) return;
    element.toggleAttribute("data-stale", stale);
    const label = element.querySelector('[data-role="stale"]');
    if (label) label.hidden = !stale;
  };

  LiveFigure.prototype.live = function () {
    this.element.dataset.state = "live";
    // The reader may have moved a control before Python was ready.
    if (this.busy()) this.request();
  };

  // `message`: what the figure's status line says; `retry`: the action of a Retry button
  // beside it, if any.
  LiveFigure.prototype.unavailable = function (message, retry) {  // (after the reveal: controls attached)
    const element = this.element;
    element.removeAttribute("data-busy");
    if (element.dataset.state !== "error") element.dataset.state = "static";
    const status = element.querySelector('[data-role="status"]');
    status.hidden = false;
    status.textContent = message;
    if (retry) status.append(" ", retryButton(retry));
    element.querySelectorAll('[data-role="error"] [data-role="retry"]').forEach(function (button) { button.remove(); });  // nothing to retry with
    element.querySelector('[data-role="controls"]').setAttribute("inert", "");
    // Tries and Reset could only set a live figure; Copy link still gives its address.
    element.querySelectorAll('[data-role="tries"], [data-role="reset"]').forEach(function (node) { node.hidden = true; });
    Object.keys(this.timers).forEach((key) => clearInterval(this.timers[key]));
  };

  // A play toggle advances the slider it drives, one stop per interval, wrapping.
  LiveFigure.prototype.play = function (toggle) {
    const key = toggle.dataset.control;
    clearInterval(this.timers[key]);
    if (!toggle.checked) return;
    const slider = this.element.querySelector('[data-control="' + toggle.dataset.drives + '"]');
    const self = this;
    this.timers[key] = setInterval(function () {
      if (worker.failed || !toggle.checked) return clearInterval(self.timers[key]);
      if (self.inflight || self.dirty) return;  // never queue frames behind a slow render
      const next = Number(slider.value) + Number(slider.step || 1);
      slider.value = String(next > Number(slider.max) ? slider.min : next);
      self.moved();
    }, Number(toggle.dataset.intervalMs || 700));
  };

  LiveFigure.prototype.rehearseWhenIdle = function () {
    if (this.rehearsals <= 0 || !worker.ready || this.rehearsing) return;
    this.rehearsing = true;
    const self = this;
    const index = REHEARSALS - this.rehearsals;
    call("rehearsal", this.number, index).then(function (text) {
      const spec = JSON.parse(text);
      requestIdleCallback(function () {
        self.rehearsing = false;
        if (!spec) { self.rehearsals = 0; return; }
        if (self.busy() || !rehearse(self.plotContainer, spec)) return setTimeout(function () { self.rehearseWhenIdle(); }, 500);
        self.rehearsals -= 1;
        self.element.dataset.rehearsed = String(REHEARSALS - self.rehearsals);
        if (self.rehearsals > 0) self.rehearseWhenIdle();
      }, { timeout: 2000 });
    }, function () { self.rehearsing = false; });
  };

  // A drawing as svg.py writes it: [its opening tag, then each top-level element's markup],
  // or null for markup not of that form. svg.py escapes every text and attribute value
  // and puts nothing between elements, so '<' and '>' only ever delimit tags.
  function svgParts(markup) {
    const open = markup.indexOf(">") + 1, close = markup.length - "</svg>".length;
    if (!markup.startsWith("<svg") || open <= 0 || !markup.endsWith("</svg>") || close < open) return null;
    const parts = [markup.slice(0, open)];
    let depth = 0, start = open, at = open;
    while (at < close) {
      const lt = markup.indexOf("<", at), gt = markup.indexOf(">", lt);
      if (lt < 0 || lt >= close || gt < 0 || (depth === 0 && lt !== at)) return null;
      const next = markup[lt + 1];
      if (next === "!" || next === "?") return null;
      if (next === "/") depth -= 1;
      else if (markup[gt - 1] !== "/") depth += 1;
      at = gt + 1;
      if (depth < 0) return null;
      if (depth === 0) { parts.push(markup.slice(start, at)); start = at; }
    }
    return depth === 0 && at === close ? parts : null;
  }

  const svgTemplate = document.createElement("template");
  function parseSvg(markup) {
    svgTemplate.innerHTML = markup;
    return svgTemplate.content.firstElementChild;
  }

  // Draw `markup` in `box`, changing only the top-level elements that differ from the
  // drawing there: most moves restyle a few of them (the group a rank belongs to), and
  // the hundreds that stay (cells, hit areas) are neither parsed again nor laid out again.
  const drawnParts = new WeakMap();  // an <svg> on the page -> svgParts of its markup
  function drawSvg(box, markup) {
    // the build baked a wide and a narrow drawing (CSS shows one): keep the one for this width
    box.querySelectorAll(":scope > svg[data-layout]").forEach(function (baked) {
      if (baked.dataset.layout === layoutName()) baked.removeAttribute("data-layout");
      else baked.remove();
    });
    const drawn = box.querySelector(":scope > svg");
    const parts = svgParts(markup), before = drawn && drawnParts.get(drawn);
    const changed = [];
    let patch = parts && before && before.length === parts.length && drawn.childElementCount === parts.length - 1;
    if (patch) for (let i = 1; i < parts.length; i++) if (parts[i] !== before[i]) changed.push(i);
    patch = patch && changed.length * 2 <= parts.length;
    const fresh = patch && changed.length
      ? Array.from(parseSvg(parts[0] + changed.map(function (i) { return parts[i]; }).join("") + "</svg>").children)
      : null;
    if (!patch || (fresh && fresh.length !== changed.length)) {
      const whole = parseSvg(markup);  // (or the parser did not see the elements we split)
      if (drawn) drawn.replaceWith(whole);
      else box.prepend(whole);
      if (parts) drawnParts.set(whole, parts);
      return;
    }
    if (parts[0] !== before[0]) {
      const root = parseSvg(parts[0] + "</svg>");
      drawn.getAttributeNames().forEach(function (name) { if (!root.hasAttribute(name)) drawn.removeAttribute(name); });
      root.getAttributeNames().forEach(function (name) {
        if (drawn.getAttribute(name) !== root.getAttribute(name)) drawn.setAttribute(name, root.getAttribute(name));
      });
    }
    if (fresh) {
      const shown = drawn.children;
      const old = changed.map(function (i) { return shown[i - 1]; });
      old.forEach(function (element, k) { element.replaceWith(fresh[k]); });
    }
    drawnParts.set(drawn, parts);
  }

  // A figure's new drawing, readouts, note, text alternative and HTML block. Each DOM
  // write invalidates style or layout even when the value is unchanged: write only
  // what differs.
  function paintView(figure, view) {
    if (view.svg != null) drawSvg(figure.querySelector('[data-role="view"]'), view.svg);
    if (view.plot != null) plot(figure.querySelector('[data-role="plot"]'), view.plot);
    const list = figure.querySelector('[data-role="readout"]');
    const shown = list.children;
    const same = shown.length === view.readouts.length && view.readouts.every(function (slot, index) {
      const item = shown[index];
      const swatch = item.querySelector(".swatch");
      return item.dataset.key === slot[0] && item.firstElementChild.lastChild.textContent === slot[1]
        && (swatch ? swatch.classList.contains("bg-" + slot[2]) : slot[2] === null)
        && (item.dataset.value === undefined) === slot[3];
    });
    if (!same) {
      list.innerHTML = view.readoutsHtml;
    } else {
      view.readouts.forEach(function (slot, index) {
        const item = shown[index];
        if (item.lastElementChild.textContent !== slot[4]) item.lastElementChild.textContent = slot[4];
        if (slot[5] !== null && item.dataset.value !== slot[5]) item.dataset.value = slot[5];
      });
    }
    const note = figure.querySelector('[data-role="note"]');
    if (note.textContent !== view.note) note.textContent = view.note;
    if (note.hidden !== !view.note) note.hidden = !view.note;
    const html = figure.querySelector('[data-role="html"]');
    if (html.innerHTML !== view.html) html.innerHTML = view.html;
    if (html.hidden !== !view.html) html.hidden = !view.html;
    const alt = figure.querySelector('[data-role="alt"]');
    if (alt.textContent !== view.alt) alt.textContent = view.alt;
    const error = figure.querySelector('[data-role="error"]');
    if (!error.hidden) { error.hidden = true; error.textContent = ""; }
    if (figure.dataset.state !== "live") figure.dataset.state = "live";
    figure.dataset.fragment = view.fragment;
  }

  LiveFigure.prototype.remember = function () {
    this.rememberUrl = false;
    const fragment = this.element.dataset.fragment;
    if (fragment && this.element.dataset.state === "live") history.replaceState(null, "", "#" + fragment);
  };

  // ---------------------------------------------------------------------------
  // Start-up progress, shared buttons, and binding

  const steps = ["Loading the figures' Python", "Starting the Python worker", "Starting Python", "Loading the figures", "Figures are live"];
  function progress(step) {
    const bar = document.querySelector('[data-role="python-progress"]');
    const label = document.querySelector('[data-role="python-progress-text"]');
    if (bar) bar.value = Math.max(bar.value, step);
    if (label && steps[step]) label.textContent = steps[step] + "…";
  }

  // A figure's controls are a form only for their labels and keyboard order: Enter in a
  // typed field must not submit (and reload) the page.
  document.addEventListener("submit", function (event) {
    if (event.target.matches('[data-role="controls"]')) event.preventDefault();
  });

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

  // The planner lab's bar on a phone (figure.html FOLDS): Done folds what is open in it, and
  // the result under the bar has the screen again.
  document.addEventListener("click", function (event) {
    const done = event.target.closest && event.target.closest('[data-role="controls-done"]');
    if (!done) return;
    const form = done.closest('[data-role="controls"]');
    form.querySelectorAll("details[open]").forEach(function (fold) { fold.open = false; });
    form.scrollTop = 0;
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

  // Each figure's "Copy link": the page's address with the figure's current state.
  document.addEventListener("click", function (event) {
    const button = event.target.closest && event.target.closest('[data-role="copy-link"]');
    if (!button) return;
    const figure = button.closest("figure");
    const url = location.href.split("#")[0] + "#" + (figure.dataset.fragment || figure.id);
    const done = function () {
      button.dataset.copied = "";
      setTimeout(() => delete button.dataset.copied, 1500);
    };
    if (navigator.clipboard) navigator.clipboard.writeText(url).then(done, function () { history.replaceState(null, "", url); });
    else history.replaceState(null, "", url);
  });

  // The contents are a menu on narrow screens (closed, and closed again after a pick)
  // and a sidebar on wide ones.
  const toc = document.querySelector('[data-role="toc"]');
  const wide = matchMedia("(min-width: 70rem)");
  function placeToc() { if (toc) toc.open = wide.matches; }
  wide.addEventListener("change", placeToc);
  placeToc();
  if (toc) toc.addEventListener("click", function (event) {
    if (!wide.matches && event.target.closest("a")) toc.open = false;
  });

  // The contents mark the section being read (aria-current): the chapter that crosses a
  // thin band a third of the way down the viewport. One observer, no scroll handler: the
  // browser reports crossings off the main thread's scroll path, and nothing is measured
  // while scrolling except, on a wide screen, the sidebar's own scroll position, when the
  // mark moves past its visible part (read before the mark is written: no forced layout).
  function markCurrentSection() {
    if (!toc) return;
    const links = new Map();  // chapter -> its entry in the contents, in page order
    document.querySelectorAll(".chapter").forEach(function (chapter) {
      const heading = chapter.querySelector("h2[id]");
      const link = heading && toc.querySelector('a[href="#' + CSS.escape(heading.id) + '"]');
      if (link) links.set(chapter, link);
    });
    const sidebar = toc.parentElement;
    const crossing = new Set();
    let current = null;
    const band = new IntersectionObserver(function (entries) {
      entries.forEach(function (entry) {
        if (entry.isIntersecting) crossing.add(entry.target);
        else crossing.delete(entry.target);
      });
      let next = null;
      for (const chapter of links.keys()) if (crossing.has(chapter)) { next = chapter; break; }
      if (!next || next === current) return;  // between chapters: the last one stays marked
      const link = links.get(next);
      let scrollTo = null;
      if (wide.matches && sidebar.scrollHeight > sidebar.clientHeight) {
        const top = link.offsetTop, bottom = top + link.offsetHeight;
        if (top < sidebar.scrollTop || bottom > sidebar.scrollTop + sidebar.clientHeight) scrollTo = Math.max(0, top - sidebar.clientHeight / 3);
      }
      if (current) links.get(current).removeAttribute("aria-current");
      link.setAttribute("aria-current", "location");
      current = next;
      if (scrollTo !== null) sidebar.scrollTop = scrollTo;
    }, { rootMargin: "-33% 0px -66% 0px" });
    links.forEach(function (link, chapter) { band.observe(chapter); });
  }
  markCurrentSection();
  floatingContents();
  phoneQuery.addEventListener("change", function () {
    figures.forEach(function (figure) { if (figure.attached) openFolds(figure.element); });
    measureBars();
  });

  // On a short screen a drawing is kept to the screen's height under its figure's bar
  // (playbook.css --bar-height): each bar's height, folded, measured once the controls are
  // in place and again whenever the window changes size (all read, then all written).
  function measureBars() {
    if (!phoneQuery.matches) return;
    const shown = figures.filter((figure) => figure.attached && figure.element.getClientRects().length);
    const heights = shown.map(function (figure) {
      const bar = figure.element.querySelector('[data-role="controls"]');
      const fold = bar && bar.querySelector('[data-role="more-controls"]');
      return bar && !(fold && fold.open) ? bar.offsetHeight : null;
    });
    shown.forEach(function (figure, index) {
      const value = heights[index] === null ? null : heights[index] + "px";
      if (value && figure.element.style.getPropertyValue("--bar-height") !== value) figure.element.style.setProperty("--bar-height", value);
    });
  }
  addEventListener("resize", function () { requestAnimationFrame(measureBars); });

  // On a phone the contents sit at the top of the article: a button at the screen's foot
  // opens them from anywhere else, as a panel over the page (playbook.css .toc[data-floating]);
  // a pick, the button again, the menu's own title or Escape closes it. The menu's place
  // keeps its height meanwhile, so the page under it never moves.
  function floatingContents() {
    const button = document.querySelector('[data-role="toc-button"]');
    if (!toc || !button) return;
    const nav = toc.parentElement;
    function close() {
      delete nav.dataset.floating;
      nav.style.minHeight = "";
      button.setAttribute("aria-expanded", "false");
      if (toc.open) toc.open = false;
    }
    button.addEventListener("click", function () {
      if (nav.hasAttribute("data-floating")) return close();
      nav.style.minHeight = nav.offsetHeight + "px";
      nav.dataset.floating = "";
      toc.open = true;
      button.setAttribute("aria-expanded", "true");
      const marked = toc.querySelector("a[aria-current]") || toc.querySelector("a");
      marked.scrollIntoView({ block: "center" });
      marked.focus({ preventScroll: true });
    });
    toc.addEventListener("toggle", function () { if (!toc.open && nav.hasAttribute("data-floating")) close(); });
    nav.addEventListener("keydown", function (event) {
      if (event.key === "Escape" && nav.hasAttribute("data-floating")) { close(); button.focus(); }
    });
    // while the menu's own place is on screen, the reader has it there: no second one
    new IntersectionObserver(function (entries) {
      button.hidden = entries[entries.length - 1].isIntersecting && !nav.hasAttribute("data-floating");
    }).observe(nav);
  }

  // Anything that scrolls sideways (a drawing, a table, code, an equation) fades at each
  // edge with more beyond it (playbook.css [data-more]): marked as it scrolls, as it
  // changes size, and when a figure paints new content into it.
  const SIDEWAYS = '.table-wrap, .code-block pre, math[display="block"], figure [data-role="view"]';
  function markEdges(box) {
    const more = box.scrollWidth - box.clientWidth;
    const left = box.scrollLeft > 1, right = more > 1 && box.scrollLeft < more - 1;
    const edges = left && right ? "both" : left ? "left" : right ? "right" : "";
    if ((box.dataset.more || "") === edges) return;
    if (edges) box.dataset.more = edges;
    else delete box.dataset.more;
  }
  function watchScrollEdges() {
    const sized = new ResizeObserver(function (entries) {
      entries.forEach(function (entry) { if (entry.target.clientWidth > 0) markEdges(entry.target); });
    });
    const watched = new WeakSet();
    const watch = (root) => root.querySelectorAll(SIDEWAYS).forEach(function (box) {
      if (!watched.has(box)) { watched.add(box); sized.observe(box); }
    });
    watch(document);
    document.addEventListener("scroll", function (event) {
      if (event.target.matches && event.target.matches(SIDEWAYS)) markEdges(event.target);
    }, { capture: true, passive: true });
    const painted = new Set();
    let frame = 0;
    // a drawing's root (its min-width, its viewBox) and whatever replaces a drawing or an
    // HTML block: not the drawing's own parts (Figure 17 patches hundreds per move)
    const ROOT_ATTRIBUTES = { attributes: true, attributeFilter: ["style", "viewBox"] };
    const repainted = new MutationObserver(function (records) {
      records.forEach(function (record) {
        const figure = record.target.isConnected && record.target.closest("figure");
        if (figure) painted.add(figure);
        record.addedNodes.forEach(function (node) { if (node.tagName === "svg") repainted.observe(node, ROOT_ATTRIBUTES); });
      });
      if (!frame) frame = requestAnimationFrame(function () {
        frame = 0;
        painted.forEach(function (figure) {
          watch(figure);
          figure.querySelectorAll(SIDEWAYS).forEach(function (box) { if (box.clientWidth > 0) markEdges(box); });
        });
        painted.clear();
      });
    });
    document.querySelectorAll('figure [data-role="view"], figure [data-role="html"]').forEach(function (node) {
      repainted.observe(node, { childList: true });
    });
    document.querySelectorAll('figure [data-role="view"] > svg').forEach((drawing) => repainted.observe(drawing, ROOT_ATTRIBUTES));
  }
  watchScrollEdges();

  // A drawing (or a long equation) wider than its column scrolls sideways: say so, and
  // let the keyboard reach it, while it does.
  function markOverflow(box) {
    const overflows = box.scrollWidth > box.clientWidth + 1;
    const cue = box.matches('[data-role="view"]') && box.parentElement.querySelector('[data-role="scroll-cue"]');
    if (cue && cue.hidden === overflows) cue.hidden = !overflows;
    if (overflows) box.setAttribute("tabindex", "0");
    else box.removeAttribute("tabindex");
  }
  const overflowWatcher = new ResizeObserver(function (entries) {
    entries.forEach(function (entry) {
      if (entry.target.clientWidth > 0) markOverflow(entry.target);  // 0: in a chapter skipped off screen
    });
  });
  document.querySelectorAll('figure [data-role="view"], math[display="block"]').forEach((box) => overflowWatcher.observe(box));
  // Off-screen chapters are not laid out (content-visibility), so their equations are
  // measured in idle time, one per idle period, and again after the window resizes.
  function measureEquations() {
    const queue = Array.from(document.querySelectorAll('math[display="block"]'));
    (function next(deadline) {
      while (queue.length && deadline.timeRemaining() > 4) markOverflow(queue.shift());
      if (queue.length) requestIdleCallback(next);
    })({ timeRemaining: () => 0 });
  }
  let resizeTimer = 0;
  addEventListener("resize", function () { clearTimeout(resizeTimer); resizeTimer = setTimeout(measureEquations, 300); });

  // Printing shows every figure as it is now: charts not yet drawn are drawn first.
  // A figure's "How to read it" prints open.
  const foldedForPrint = [];
  addEventListener("beforeprint", function () {
    document.querySelectorAll('details[data-role="more"]:not([open])').forEach(function (details) {
      details.open = true;
      foldedForPrint.push(details);
    });
    revealThrough(heldBlocks.length - 1);
    if (window.Plotly) document.querySelectorAll("figure[data-figure]").forEach(ensureChart);
  });
  addEventListener("afterprint", function () {
    foldedForPrint.splice(0).forEach(function (details) { details.open = false; });
  });

  // A page shown from an older build's offline copy, once a newer build's service worker
  // has cached all of it and taken over (sw.js): the reader is offered the newer page,
  // never sent to it mid-sentence. A page that had no service worker came from the
  // network: the first one to take it over is its own build's.
  function offerNewerBuild() {
    if (!("serviceWorker" in navigator) || !navigator.serviceWorker.controller) return;
    navigator.serviceWorker.addEventListener("controllerchange", function () {
      const note = document.querySelector('[data-role="update-note"]');
      if (!note) return;
      note.hidden = false;
      note.querySelector('[data-role="update-reload"]').addEventListener("click", function () { location.reload(); });
    }, { once: true });
  }
  offerNewerBuild();

  // After the first visit the site works offline: a service worker keeps every file.
  function registerServiceWorker() {
    const url = root.dataset.serviceWorker;
    if (!url || !("serviceWorker" in navigator)) return;
    navigator.serviceWorker.register(url, { scope: root.dataset.baseUrl || "/" }).catch(function (error) {
      console.warn("offline copy unavailable: " + error);
    });
  }

  // ---------------------------------------------------------------------------
  // The held article (build.py HOLD_SCRIPT, playbook.css): shown block by block, in
  // page order, each task stopping once it has spent REVEAL_SLICE_MS on showing blocks
  // and laying them out, so scrolling and clicks are never kept waiting long. A link into
  // held text shows everything up to its target first; printing shows it all. The hold's
  // fallback timer (its flag's value) is cancelled: from here on, this shows the article.
  const REVEAL_SLICE_MS = 24;
  // The next step as a task of its own, without setTimeout's 4 ms floor once timers
  // nest (60-80 steps: ~0.3 s of waiting). Python starts only once all is shown.
  const revealChannel = new MessageChannel();
  revealChannel.port1.onmessage = function () { revealStep(); };
  function revealLater() { revealChannel.port2.postMessage(null); }
  const heldBlocks = Array.from(document.querySelectorAll(".chapter[data-held] > *"));
  let shownBlocks = 0;
  let revealFinished;
  const revealed = new Promise(function (resolve) { revealFinished = resolve; });
  let jumpTarget = null;  // the link target to scroll to once shown (null: none, or the reader scrolled)
  let landedTarget = null;  // ... and once more when the page turns ready, should anything above it have moved

  const unattached = [];  // figures shown whose controls are still in their template

  function show(block) {
    block.setAttribute("data-shown", "");
    const inside = block.matches("figure[data-figure]") ? [block] : Array.from(block.querySelectorAll("figure[data-figure]"));
    inside.forEach(function (element) { unattached.push(byNumber.get(Number(element.dataset.figure))); });
  }

  // One step of the reveal: the next shown figure's controls, else the next block.
  // Returns what it showed.
  function revealNext() {
    if (unattached.length) {
      const figure = unattached.shift();
      figure.attach();
      return figure.element;
    }
    const block = heldBlocks[shownBlocks++];
    show(block);
    return block;
  }
  function revealDone() { return shownBlocks === heldBlocks.length && !unattached.length; }

  function revealThrough(last) {
    while (unattached.length || (shownBlocks <= last && shownBlocks < heldBlocks.length)) revealNext();
    if (revealDone()) revealFinished();
  }

  // A figure or a table takes 10-30 ms to lay out, and a figure's controls as long again:
  // each is a slice of its own. Other blocks share a slice while one as slow as the
  // slowest of late would still fit in it (a paragraph or an equation can take 15-20 ms:
  // added once the slice was nearly spent, it made a 45-55 ms task). "Of late": the
  // estimate decays with every block, so one slow block does not leave every later
  // slice a block or two long (~100 ms more of reveal, and of waiting for Python).
  let slowestLight = 0;
  function revealStep() {
    const start = performance.now();
    for (let count = 0; !revealDone(); count++) {
      const heavy = unattached.length || heldBlocks[shownBlocks].matches(".figure, .table-wrap");
      const before = performance.now();
      if (count && (heavy || before - start + slowestLight >= REVEAL_SLICE_MS)) break;
      revealNext().getBoundingClientRect();  // its style and layout, now, in this slice
      if (!heavy) slowestLight = Math.max(0.75 * slowestLight, performance.now() - before);
    }
    if (jumpTarget && jumpTarget.getClientRects().length && !unattached.length) {  // all above it complete
      jumpTarget.scrollIntoView();
      landedTarget = jumpTarget;
      jumpTarget = null;
    }
    if (revealDone()) revealFinished();
    else revealLater();
  }

  function linkTarget(hash) {  // #fig-15:P=8 -> the element fig-15
    try { return document.getElementById(decodeURIComponent(hash.slice(1).split(":")[0])); } catch (error) { return null; }
  }
  function heldIndexOf(hash) {
    const target = linkTarget(hash);
    return target ? heldBlocks.findIndex((block) => block === target || block.contains(target)) : -1;
  }

  // A link followed while the article is still held: what it points to is shown at once,
  // before the browser scrolls to it.
  document.addEventListener("click", function (event) {
    const link = event.target.closest && event.target.closest('a[href^="#"]');
    if (link && shownBlocks < heldBlocks.length) revealThrough(heldIndexOf(link.hash));
  }, true);
  addEventListener("hashchange", function () {
    const index = heldIndexOf(location.hash);
    if (index < shownBlocks) return;
    revealThrough(index);
    linkTarget(location.hash).scrollIntoView();
  });
  ["wheel", "touchstart", "keydown"].forEach(function (type) {
    addEventListener(type, function () { jumpTarget = landedTarget = null; }, { passive: true, once: true });
  });

  function startReveal() {
    clearTimeout(Number(root.dataset.hold));
    document.querySelectorAll(".chapter:not([data-held]) figure[data-figure]").forEach(function (element) {
      byNumber.get(Number(element.dataset.figure)).attach();  // its controls are markup already
    });
    if (heldIndexOf(location.hash) >= 0) jumpTarget = linkTarget(location.hash);
    revealLater();
  }

  const figures = Array.from(document.querySelectorAll("figure[data-figure]")).map((element) => new LiveFigure(element));
  const byNumber = new Map(figures.map((figure) => [figure.number, figure]));
  // Starting a module worker and its preflight take 5-12 ms: a task of their own.
  setTimeout(connect, 0);
  startReveal();
  root.dataset.python = "loading";
  progress(1);
  watchVisible();
  revealed.then(function () { requestAnimationFrame(measureBars); });  // every bar in place
}, 0, document.currentScript);
