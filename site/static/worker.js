// The figures' Python: one Pyodide interpreter in a dedicated module worker, started by
// playbook.js. It never touches the page, so the site needs no cross-origin-isolation
// headers. build.py writes the two URLs below (relative to this file) into the copy it
// serves.
//
// Page -> worker: {start: true}: Python may start now (see `start`; a second one does
// nothing); then {id, name, args}, a call of figures/worker.py (`Worker.<name>`).
// Worker -> page: {id, value} or {id, error}, the call's answer; and JSON text, what
// figures/worker.py posts on its own (views rendered ahead, ready, failed) and the
// start-up progress below.
import { loadPyodide } from "__PYODIDE__/pyodide.mjs";

const PYODIDE = new URL("__PYODIDE__/", import.meta.url).href;
// What loadPyodide fetches (build.py PYODIDE_FILES, less pyodide.mjs, imported above).
const PYODIDE_FILES = ["pyodide.asm.mjs", "pyodide.asm.wasm", "python_stdlib.zip", "pyodide-lock.json"];
const ARCHIVE = new URL("__ARCHIVE__", import.meta.url).href;  // figures/ and models/, one zip

function say(message) {
  postMessage(JSON.stringify(message));
}

let dispatch = null;  // figures.worker.serve's answer: dispatch(name, ...args) -> text
let allowStart;
const startAllowed = new Promise(function (resolve) { allowStart = resolve; });

// The page calls only once Python has said it is ready.
self.onmessage = function (event) {
  const request = event.data;
  if (request.start) return allowStart();
  let reply;
  try {
    reply = { id: request.id, value: dispatch(request.name, ...request.args) };
  } catch (error) {
    reply = { id: request.id, error: String((error && error.message) || error) };
  }
  postMessage(reply);
};

function download(url) {
  return fetch(url).then(function (response) {
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
  const archive = download(ARCHIVE).then((response) => response.arrayBuffer());
  await Promise.all(PYODIDE_FILES.map(function (name) {
    return download(PYODIDE + name).then((response) => response.body.pipeTo(new WritableStream()));
  }));
  await startAllowed;
  say({ type: "progress", step: 2 });
  const pyodide = await loadPyodide({ indexURL: PYODIDE });
  say({ type: "progress", step: 3 });
  pyodide.unpackArchive(await archive, "zip");
  // An import error must reach the page as "failed", not leave it waiting in silence.
  const serve = pyodide.runPython("from figures.worker import serve\nserve");
  dispatch = serve(function (text) { postMessage(text); });
}

start().catch(function (error) {
  say({ type: "failed", error: String((error && error.message) || error) });
});
