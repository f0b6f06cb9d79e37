// The figures' Python: one Pyodide interpreter in a dedicated module worker, started by
// playbook.js. It never touches the page, so the site needs no cross-origin-isolation
// headers. build.py writes the two URLs below (relative to this file) into the copy it
// serves.
//
// Page -> worker: {start: true}: Python may start now (see `start`; a second one does
// nothing); then {id, name, args}, a call of figures/worker.py (`Worker.<name>`).
// Worker -> page: {id, value} or {id, error}, the call's answer; and JSON text, what
// figures/worker.py posts on its own (views rendered ahead, ready, failed) and the
// start-up progress below. {ping: n} is answered {pong: n} at once, from JavaScript: the
// page's watchdog (playbook.js) hears no pong from a worker that is gone or whose thread
// is stuck (Python runs on this same thread).
import { loadPyodide } from "__PYODIDE__/pyodide.mjs";

const PYODIDE = new URL("__PYODIDE__/", import.meta.url).href;
// What loadPyodide fetches (build.py PYODIDE_FILES, less pyodide.mjs, imported above).
const PYODIDE_FILES = ["pyodide.asm.mjs", "pyodide.asm.wasm", "python_stdlib.zip", "pyodide-lock.json"];
const ARCHIVE = new URL("__ARCHIVE__", import.meta.url).href;  // figures/ and models/, one zip

function say(message) {
  postMessage(JSON.stringify(message));
}

let dispatch = null;  // figures.worker.serve's answer: dispatch(name, ...args) -> text
let runtime = null;  // the Pyodide interpreter, once loaded
let allowStart;
const startAllowed = new Promise(function (resolve) { allowStart = resolve; });

// The page calls only once Python has said it is ready. Whatever a message holds, it is
// answered: a call that raises (or a message that is no call) gets {id, error}, which the
// page shows in the calling figure only; nothing here may throw (an uncaught error would
// reach the page as the worker's). One exception: a call that broke the runtime itself
// (Pyodide's fatal error: a JavaScript stack overflow, memory exhausted) leaves an
// interpreter that will answer nothing again, so the worker says it is lost, answers
// no more, and the page starts a new one, which is asked again (playbook.js workerLost).
self.onmessage = function (event) {
  const request = event.data || {};
  if (request.ping) return postMessage({ pong: request.ping });
  if (request.start) return allowStart();
  let reply;
  try {
    if (!dispatch) throw new Error("Python is not ready");
    if (!Array.isArray(request.args)) throw new Error("a call's arguments must be a list");
    if (runtimeFailed()) throw new Error("Python's runtime failed");  // (and the call below would not come back)
    reply = { id: request.id, value: dispatch(request.name, ...request.args) };
  } catch (error) {
    if (dispatch && runtimeFailed(error)) {
      dispatch = null;
      say({ type: "lost", error: "Python failed: " + String((error && error.message) || error) });
      return;
    }
    reply = { id: request.id, error: String((error && error.message) || error) };
  }
  postMessage(reply);
};

// Pyodide marks the error of its fatal failure, and from then on every part of its API
// throws when read (pyodide.asm.mjs API.fatal_error); a Python exception does neither.
function runtimeFailed(error) {
  if (error && error.pyodide_fatal_error) return true;
  try {
    return !runtime.ffi;
  } catch (_) {
    return true;
  }
}
say({ type: "progress", step: 1 });  // this script runs: the page's own watchdog hands over to the one below

// ---------------------------------------------------------------------------
// Start-up watchdog: progress, not a clock. A download that stops (a stalled response)
// would leave Python "starting" for ever, silently. Each tick of this thread's timer that
// comes on time, while no byte arrived and no stage ended, counts as idle; STALL_TICKS
// idle ticks in a row are a stall, and the page is told. A slow network still sends
// bytes, and a slow CPU keeps this thread busy (its ticks come late, which is work, not a
// stall), so a slow phone is judged as a desktop is. A WebAssembly that does not compile
// is said at once (Pyodide swallows the error and waits for ever; `watchCompile`).
const WATCH_TICK_MS = 250;
const STALL_TICKS = 16;  // 4 s of an idle thread with nothing arriving, once the downloads answer
// Until the first answer, a slow link's round trips (seconds on a 2G phone) get longer.
const FIRST_ANSWER_TICKS = 32;  // 8 s
// While loadPyodide runs, the wasm is compiled on other threads: nothing arrives and
// this thread is free, for longer on a slow phone; a stall there is a hung runtime.
const COMPILE_STALL_TICKS = 40;  // 10 s of an idle thread (measured here: at most 1 idle tick in a row)
const startWatch = { idle: 0, limit: STALL_TICKS, steady: STALL_TICKS, last: performance.now(), timer: 0, paused: false, stage: "" };
function progressed() {
  startWatch.idle = 0;
  startWatch.limit = startWatch.steady;
}
// `limit`: idle ticks allowed in this stage; `first`: until its first progress.
function watchStage(stage, limit, first) {
  startWatch.stage = stage;
  startWatch.steady = limit || STALL_TICKS;
  progressed();
  startWatch.limit = first || startWatch.steady;
}
startWatch.timer = setInterval(function () {
  const now = performance.now(), late = now - startWatch.last > 3 * WATCH_TICK_MS;
  startWatch.last = now;
  if (late || startWatch.paused) return progressed();
  if (++startWatch.idle < startWatch.limit) return;
  clearInterval(startWatch.timer);
  startFailed(startWatch.stage + " stopped making progress");
}, WATCH_TICK_MS);

let startHasFailed = false;
function startFailed(reason) {
  if (startHasFailed) return;
  startHasFailed = true;
  clearInterval(startWatch.timer);
  say({ type: "failed", error: reason });
}

// Every chunk of a body, as it arrives, is progress.
function counted(body) {
  return body.pipeThrough(new TransformStream({
    transform(chunk, controller) { progressed(); controller.enqueue(chunk); },
  }));
}

// Pyodide compiles its WebAssembly through these and swallows a failure ("wasm
// instantiation failed!", then waits for ever): a failure is reported here first.
function watchCompile() {
  const originals = { instantiate: WebAssembly.instantiate, instantiateStreaming: WebAssembly.instantiateStreaming };
  Object.keys(originals).forEach(function (name) {
    WebAssembly[name] = function () {
      return originals[name].apply(WebAssembly, arguments).then(function (result) {
        progressed();
        return result;
      }, function (error) {
        console.warn(error);  // the compiler's own words, for whoever looks
        startFailed("Python's WebAssembly did not compile");
        throw error;
      });
    };
  });
  return function () { Object.assign(WebAssembly, originals); };
}

function download(url) {
  return fetch(url).then(function (response) {
    progressed();
    if (!response.ok) throw new Error(url + " answered " + response.status);
    return response;
  });
}

// Starting Python (compiling and running Pyodide's WebAssembly) keeps every core busy
// for seconds, and the page, still showing its article, then stalls: a block that lays
// out in 5 ms took 50-130 ms. So the files are fetched at once (into the HTTP cache,
// where loadPyodide finds them) and Python starts when the page says so.
async function start() {
  // Pyodide swallows a WebAssembly compile that fails (under a policy without
  // 'wasm-unsafe-eval') and then waits for ever: compile the smallest module first, so
  // the page hears why instead.
  await WebAssembly.compile(new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0]));
  watchStage("downloading the figures' Python", STALL_TICKS, FIRST_ANSWER_TICKS);
  const archive = download(ARCHIVE).then((response) => new Response(counted(response.body)).arrayBuffer());
  await Promise.all(PYODIDE_FILES.map(function (name) {
    return download(PYODIDE + name).then((response) => counted(response.body).pipeTo(new WritableStream()));
  }));
  await archive;
  startWatch.paused = true;  // waiting for the page is no stall
  await startAllowed;
  startWatch.paused = false;
  say({ type: "progress", step: 2 });
  watchStage("starting Python", COMPILE_STALL_TICKS);
  const compiled = watchCompile();
  const pyodide = runtime = await loadPyodide({ indexURL: PYODIDE });
  compiled();
  if (startHasFailed) return;
  say({ type: "progress", step: 3 });
  watchStage("loading the figures");
  pyodide.unpackArchive(await archive, "zip");
  // An import error must reach the page as "failed", not leave it waiting in silence.
  const serve = pyodide.runPython("from figures.worker import serve\nserve");
  clearInterval(startWatch.timer);  // started: from here on the page's heartbeat watches
  dispatch = serve(function (text) { postMessage(text); });
}

start().catch(function (error) {
  startFailed(String((error && error.message) || error));
});
