// The figures' Python: one Pyodide interpreter in a dedicated module worker, started by
// playbook.js. It never touches the page, so the site needs no cross-origin-isolation
// headers. build.py writes the two URLs below (relative to this file) into the copy it
// serves.
//
// Page -> worker: {id, name, args}, a call of figures/worker.py (`Worker.<name>`).
// Worker -> page: {id, value} or {id, error}, the call's answer; and "playbook:<json>"
// text, what figures/worker.py posts on its own (views rendered ahead, ready, failed)
// and the start-up progress below.
import { loadPyodide } from "__PYODIDE__/pyodide.mjs";

const ARCHIVE = new URL("__ARCHIVE__", import.meta.url).href;  // figures/ and models/, one zip
const PREFIX = "playbook:";

function say(message) {
  postMessage(PREFIX + JSON.stringify(message));
}

let dispatch = null;  // figures.worker.serve's answer: dispatch(name, ...args) -> text

// The page calls only once Python has said it is ready.
self.onmessage = function (event) {
  const request = event.data;
  let reply;
  try {
    reply = { id: request.id, value: dispatch(request.name, ...request.args) };
  } catch (error) {
    reply = { id: request.id, error: String((error && error.message) || error) };
  }
  postMessage(reply);
};

async function start() {
  say({ type: "progress", step: 2 });
  // Pyodide swallows a WebAssembly compile that fails (under a policy without
  // 'wasm-unsafe-eval') and then waits for ever: compile the smallest module first, so
  // the page hears why instead.
  await WebAssembly.compile(new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0]));
  const archive = fetch(ARCHIVE).then(function (response) {
    if (!response.ok) throw new Error(ARCHIVE + " answered " + response.status);
    return response.arrayBuffer();
  });
  const pyodide = await loadPyodide({ indexURL: new URL("__PYODIDE__/", import.meta.url).href });
  say({ type: "progress", step: 3 });
  pyodide.unpackArchive(await archive, "zip");
  // An import error must reach the page as "failed", not leave it waiting in silence.
  const serve = pyodide.runPython("from figures.worker import serve\nserve");
  dispatch = serve(function (text) { postMessage(PREFIX + text); });
}

start().catch(function (error) {
  say({ type: "failed", error: String((error && error.message) || error) });
});
