/**
 * The worker's waits: a sleep that an abort ends early, and a full garbage collection while the
 * worker waits anyway (for CaptchaAI's answer, a cool-down, a claim's lease) when enough garbage
 * has built up since the last one.
 *
 * Why collect by hand: Lambda starts Node with an old space of memory − memory ÷ 10 (116 MB at
 * 128 MB), so V8 lets the heap grow far past what is alive before it runs a major collection,
 * and the process's peak RSS, which Lambda counts against the memory size, is mostly garbage
 * (docs/benchmark.md "Worker memory"). The runtime also passes --expose-gc, so `globalThis.gc`
 * exists there; elsewhere (tests, this machine's plain Node) nothing is collected by hand.
 */

/** A wait shorter than this (wall ms) is too short to spend on a collection. */
export const MIN_IDLE_WAIT_MS = 100;
/** Heap + external memory grown by this much (bytes) since the last collection makes one worth it. */
export const GARBAGE_BYTES = 4 * 1024 * 1024;

export interface IdleCollectionInput {
  /** How long the worker is about to wait (wall ms). */
  waitMs: number;
  /** Heap used + external memory now (bytes). */
  inUse: number;
  /** The same right after the last collection (bytes; 0 before the first). */
  afterLast: number;
}

/** Collect when the wait leaves time for it and enough garbage has built up. */
export function decideIdleCollection(i: IdleCollectionInput): boolean {
  return i.waitMs >= MIN_IDLE_WAIT_MS && i.inUse - i.afterLast >= GARBAGE_BYTES;
}

/** Resolves after `ms`, or at once when `signal` aborts (the caller checks the signal). */
export function abortableSleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });
}

type Sleep = (ms: number, signal?: AbortSignal) => Promise<void>;

function inUse(): number {
  const m = process.memoryUsage();
  return m.heapUsed + m.external;
}

/**
 * The environment's collector: called with the length of a wait about to start, it runs a
 * synchronous full collection when decideIdleCollection says so. It runs at the start of the
 * wait, so it delays nothing the worker waits for unless it takes longer than the wait
 * (MIN_IDLE_WAIT_MS keeps short waits out). `gc` defaults to the runtime's `globalThis.gc`;
 * without one nothing is collected.
 */
export function idleCollector(
  gc: (() => void) | undefined = (globalThis as { gc?: () => void }).gc,
  measure: () => number = inUse,
): (waitMs: number) => void {
  if (!gc) return () => undefined;
  let afterLast = 0;
  return (waitMs) => {
    if (!decideIdleCollection({ waitMs, inUse: measure(), afterLast })) return;
    gc();
    afterLast = measure();
  };
}

/** `sleep`, with `collect` told about each wait before it starts. */
export function collectingWhileIdle(sleep: Sleep, collect: (waitMs: number) => void): Sleep {
  return (ms, signal) => {
    collect(ms);
    return sleep(ms, signal);
  };
}
