// One Lambda execution environment of the local runtime (local/runtime/local-runtime.ts), run as a worker
// thread with the function's own environment variables, or as a Node process of its own with
// the V8 heap limits Lambda's Node.js runtime sets from the memory size (execution-environment.ts,
// `isolation: 'process'`; then the messages go over the IPC channel). Plain JavaScript on purpose:
// the environment loads only the bundle CDK built, never the repository's TypeScript.
//
// Protocol with the parent: {type: 'ready'} or {type: 'init-error', error} once the handler
// module is loaded; then {type: 'invoke', id, event, context} in, {type: 'result', id, ok,
// payload | error} out. Like Lambda, the handler module stays loaded between invocations
// (warm starts), and one environment runs one invocation at a time. Each result carries the
// thread's memory after the invocation (its own V8 heap; rss is the whole process's).
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';
import { workerData as threadData, parentPort as threadPort } from 'node:worker_threads';

// A worker thread talks through its parent port; a forked process through process.send.
const parentPort = threadPort ?? {
  postMessage: (message) => process.send?.(message),
  on: (event, listener) => process.on(event, listener),
};
const workerData = threadData ?? JSON.parse(process.argv[2] ?? '{}');
// A forked environment ends with its parent (Lambda's sandbox ends with the runtime).
if (!threadPort) process.on('disconnect', () => process.exit(0));

// Lambda honours NODE_OPTIONS=--enable-source-maps (NodejsFunction sets it with sourceMap: true);
// worker threads ignore NODE_OPTIONS, so apply it here.
if ((process.env.NODE_OPTIONS ?? '').includes('--enable-source-maps')) process.setSourceMapsEnabled?.(true);

/**
 * Whether Lambda's Node.js runtime loads `file` as an ES module: a `.mjs` file, or a `.js` file
 * whose nearest package.json says `"type": "module"`. Anything else it loads with require(), and
 * so does this environment: import() of a CommonJS file would also run Node's CommonJS export
 * scan over the whole bundle, about a sixth of an environment's start for the worker's 1.9 MB.
 */
function isEsModule(file) {
  if (file.endsWith('.mjs')) return true;
  if (file.endsWith('.cjs')) return false;
  for (let dir = dirname(file); !dir.endsWith('/node_modules'); dir = dirname(dir)) {
    const manifest = join(dir, 'package.json');
    if (existsSync(manifest)) {
      try {
        return JSON.parse(readFileSync(manifest, 'utf8')).type === 'module';
      } catch {
        return false;
      }
    }
    if (dirname(dir) === dir) return false;
  }
  return false;
}

async function loadHandler() {
  const { taskRoot, handler } = workerData;
  const dot = handler.lastIndexOf('.');
  if (dot <= 0)
    throw Object.assign(new Error(`bad handler "${handler}"`), { name: 'Runtime.MalformedHandlerName' });
  const modulePath = handler.slice(0, dot);
  const exportName = handler.slice(dot + 1);
  const file = ['.js', '.mjs', '.cjs']
    .map((ext) => join(taskRoot, modulePath + ext))
    .find((f) => existsSync(f));
  if (!file) {
    throw Object.assign(new Error(`Cannot find module '${modulePath}' in ${taskRoot}`), {
      name: 'Runtime.ImportModuleError',
    });
  }
  const mod = isEsModule(file) ? await import(pathToFileURL(file).href) : createRequire(file)(file);
  const fn = mod[exportName] ?? mod.default?.[exportName];
  if (typeof fn !== 'function') {
    throw Object.assign(new Error(`${modulePath}.${exportName} is undefined or not exported`), {
      name: 'Runtime.HandlerNotFound',
    });
  }
  return fn;
}

function callHandler(fn, event, context) {
  if (fn.length < 3) return Promise.resolve().then(() => fn(event, context));
  // Callback-style handler: the first of callback or returned promise wins.
  return new Promise((resolve, reject) => {
    const done = (err, value) => (err ? reject(err) : resolve(value));
    context.done = done;
    context.succeed = (value) => resolve(value);
    context.fail = (err) => reject(err);
    const returned = fn(event, context, done);
    if (returned && typeof returned.then === 'function') returned.then(resolve, reject);
  });
}

/**
 * This process's own peak resident set (bytes), the figure Lambda's "Max Memory Used" reports.
 * On Linux it is VmHWM of /proc/self/status: the high-water mark of the memory this process
 * has mapped since its exec. Not getrusage's maxRSS: Linux keeps that across execve, so a process
 * forked from a large parent (a vitest worker late in the suite, the bench) reports the parent's
 * RSS at the fork (a 342 MB parent's child read 304 MB by maxRSS, 41.5 MB by VmHWM). Elsewhere,
 * and in a worker thread (where either figure is the whole process's), maxRSS.
 */
function peakRssBytes() {
  try {
    const hwm = /^VmHWM:\s+(\d+) kB$/m.exec(readFileSync('/proc/self/status', 'utf8'));
    if (hwm) return Number(hwm[1]) * 1024;
  } catch {
    // Not Linux: fall through.
  }
  return process.resourceUsage().maxRSS * 1024;
}

// A process of its own also reports its CPU time and event-loop delay since its init phase ended
// (in a worker thread both would be the whole runtime's). The delay histogram samples every 10 ms:
// a lane's read that waits behind another lane's work (or behind a collection, or a CPU share
// used up) shows as delay.
const loopDelay = threadPort ? undefined : monitorEventLoopDelay({ resolution: 10 });
let cpuAtReady;

function memory() {
  const m = process.memoryUsage();
  const cpu = cpuAtReady ? process.cpuUsage(cpuAtReady) : undefined;
  const ms = (ns) => Math.round(ns / 1e4) / 100;
  return {
    heapUsed: m.heapUsed,
    heapTotal: m.heapTotal,
    external: m.external,
    rss: m.rss,
    peakRss: peakRssBytes(),
    ...(cpu ? { cpuMicros: cpu.user + cpu.system } : {}),
    ...(loopDelay && loopDelay.count > 0
      ? {
          loopDelay: {
            p50Ms: ms(loopDelay.percentile(50)),
            p99Ms: ms(loopDelay.percentile(99)),
            maxMs: ms(loopDelay.max),
            samples: loopDelay.count,
          },
        }
      : {}),
  };
}

function serializeError(err) {
  const error = err instanceof Error ? err : new Error(String(err));
  return { errorType: error.name || 'Error', errorMessage: error.message, stack: error.stack };
}

// The init phase: load the handler module once, before the first invocation, like Lambda. The
// parent starts an invocation's timeout only after this reports ready.
const handlerPromise = loadHandler();
handlerPromise.then(
  () => {
    if (!threadPort) {
      cpuAtReady = process.cpuUsage();
      loopDelay?.enable();
    }
    parentPort.postMessage({ type: 'ready' });
  },
  (err) => parentPort.postMessage({ type: 'init-error', error: serializeError(err) }),
);

parentPort.on('message', async (message) => {
  if (message?.type !== 'invoke') return;
  const { id, event, context: base } = message;
  const context = {
    ...base,
    callbackWaitsForEmptyEventLoop: true,
    getRemainingTimeInMillis: () => Math.max(0, base.deadlineMs - Date.now()),
    done() {},
    succeed() {},
    fail() {},
  };
  try {
    const fn = await handlerPromise;
    const result = await callHandler(fn, event, context);
    // Lambda serializes the response to JSON; do the same so the parent sees what AWS would.
    const payload = result === undefined ? null : JSON.parse(JSON.stringify(result));
    parentPort.postMessage({ type: 'result', id, ok: true, payload, memory: memory() });
  } catch (err) {
    parentPort.postMessage({ type: 'result', id, ok: false, error: serializeError(err), memory: memory() });
  }
});
