/**
 * The worker's waits: a sleep that an abort ends early, and a full garbage collection while the
 * worker waits anyway (for CaptchaAI's answer, a cool-down, a claim's lease) when enough garbage
 * has built up since the last one.
 *
 * Why collect by hand: Lambda starts Node with an old space of memory − memory ÷ 10 (116 MB at
 * 128 MB), so V8 lets the heap grow far past what is alive before it runs a major collection,
 * and the process's peak RSS, which Lambda counts against the memory size, is mostly garbage
 * (docs/benchmark-notes.md "Worker memory"). The runtime also passes --expose-gc, so `globalThis.gc`
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
  /** Lanes of the invocation now running (IdleCollector.laneStarted); 1 when nobody said. */
  lanesRunning?: number;
  /** Waits now under way in the environment, this one included. */
  lanesWaiting?: number;
}

/** Garbage (bytes) past which a collection runs at the next wait even while another lane is busy. */
export const URGENT_GARBAGE_BYTES = 4 * GARBAGE_BYTES;

/**
 * Collect when the wait leaves time for it and enough garbage has built up. With lanes
 * (`lanesRunning` > 1) a full collection stops every lane's code, so it runs only when every lane
 * is waiting (`lanesWaiting` ≥ `lanesRunning`, and `waitMs` is then the shortest wait still to
 * run): not in the middle of another lane's read, where it would hold that lane's bytes and
 * delay its answer. Past URGENT_GARBAGE_BYTES it runs at the next wait all the same: memory
 * before latency, since an environment over its memory is stopped.
 */
export function decideIdleCollection(i: IdleCollectionInput): boolean {
  const garbage = i.inUse - i.afterLast;
  if (i.waitMs < MIN_IDLE_WAIT_MS || garbage < GARBAGE_BYTES) return false;
  const running = i.lanesRunning ?? 1;
  if (running <= 1) return true;
  return (i.lanesWaiting ?? 0) >= running || garbage >= URGENT_GARBAGE_BYTES;
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
 * The environment's collector. Called with the length of a wait about to start, it runs a
 * synchronous full collection when decideIdleCollection says so. It runs at the start of the
 * wait, so it delays nothing the worker waits for unless it takes longer than the wait
 * (MIN_IDLE_WAIT_MS keeps short waits out).
 *
 * With lanes it must know how many lanes run and which are waiting, so that it collects only
 * when all of them are (decideIdleCollection):
 * - the batch loop calls `laneStarted()` when a lane starts and the function it returns when the
 *   lane ends (functions/worker/batch-loop.ts runLane);
 * - the waits go through collectingWhileIdle, which calls `waitStarted(ms)` and the function it
 *   returns when the wait ends; the shortest of the waits under way must leave MIN_IDLE_WAIT_MS.
 * Without laneStarted calls it behaves as with one lane: any wait may collect.
 *
 * `gc` defaults to the runtime's `globalThis.gc`; without one nothing is collected.
 */
export interface IdleCollector {
  (waitMs: number): void;
  /** A lane starts; call the returned function when it ends. */
  laneStarted(): () => void;
  /** A wait of `waitMs` starts (and may collect); call the returned function when it ends. */
  waitStarted(waitMs: number): () => void;
}

export function idleCollector(
  gc: (() => void) | undefined = (globalThis as { gc?: () => void }).gc,
  measure: () => number = inUse,
  now: () => number = () => performance.now(),
): IdleCollector {
  let afterLast = 0;
  let lanesRunning = 0;
  // When each wait under way ends (performance.now() ms), by a key of its own.
  const waits = new Map<symbol, number>();
  const consider = (waitMs: number) => {
    if (!gc) return;
    const at = now();
    const shortest = Math.min(waitMs, ...[...waits.values()].map((end) => end - at));
    const decide = {
      // Without lanes (nobody called laneStarted) each wait decides alone, as before lanes.
      waitMs: lanesRunning > 1 ? shortest : waitMs,
      inUse: measure(),
      afterLast,
      lanesRunning: Math.max(1, lanesRunning),
      lanesWaiting: Math.max(1, waits.size),
    };
    if (!decideIdleCollection(decide)) return;
    gc();
    afterLast = measure();
  };
  const collector = ((waitMs: number) => consider(waitMs)) as IdleCollector;
  collector.laneStarted = () => {
    lanesRunning += 1;
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      lanesRunning -= 1;
    };
  };
  collector.waitStarted = (waitMs: number) => {
    const key = Symbol('wait');
    waits.set(key, now() + waitMs);
    consider(waitMs);
    return () => {
      waits.delete(key);
    };
  };
  return collector;
}

/** `sleep`, with `collect` told about each wait (its start, and its end when it can be told). */
export function collectingWhileIdle(
  sleep: Sleep,
  collect: ((waitMs: number) => void) | IdleCollector,
): Sleep {
  return async (ms, signal) => {
    if (!('waitStarted' in collect)) {
      collect(ms);
      return sleep(ms, signal);
    }
    const ended = collect.waitStarted(ms);
    try {
      await sleep(ms, signal);
    } finally {
      ended();
    }
  };
}
