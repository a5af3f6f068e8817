import { awsWaitMs } from '../common/aws-clients.js';
import type { PipelineControl, PipelineState } from './control.js';
import type { PublishedShape } from './lanes.js';

/**
 * How long an environment reuses its read of the pipeline state and the lane shape, at time
 * scale 1. With one lane every record reads them (as before); with lanes, L loops would each read
 * per record, and a fast drain (a cancelled batch ends records in milliseconds) would send
 * hundreds of reads a second: this keeps an environment at one GetItem (1 read unit) per 2 s. A
 * pause is seen at most this much later while reads succeed (the mapping it disables stops new
 * invocations at once); the adjuster waits twice this before raising r after it lowered L
 * (./lanes.ts SHAPE_SETTLE_MS).
 */
export const STATE_CACHE_MS = 2_000;
/** The cache never goes below this at small time scales. */
export const MIN_STATE_CACHE_MS = 200;

/**
 * How long, at time scale 1, the last good snapshot answers for a read that failed: a throttled
 * read costs no lane and no delay. It is also the bound on a pause under failing reads: no
 * snapshot older than this is answered.
 */
export const STALE_STATE_MS = 20_000;

/**
 * How long (real time: AWS calls are not time-scaled) a read with no snapshot to answer for it
 * (an environment's first, or one after an idle spell) keeps trying before it fails, and the wait
 * between its tries at time scale 1 (../common/aws-clients.ts awsWaitMs: scaled down, never below
 * 50 ms). Throttled reads fail in milliseconds, so a second holds about 10 to 20 tries: at a
 * throttle rate of one read in two, an invocation starting cold falls to one lane, or a lane
 * ends, about once in a thousand to a million such reads, where one try did at every other. The
 * longest such read is this plus one call at its timeout (../worker/worst-case.ts SETUP_MS).
 */
export const STATE_RETRY_MS = 1_000;
export const STATE_RETRY_WAIT_MS = 100;

/** The cache's life at a time scale. */
export function stateCacheMs(timeScale: number): number {
  return Math.max(MIN_STATE_CACHE_MS, STATE_CACHE_MS * timeScale);
}

/** How long a failed read answers the last good snapshot at a time scale. */
export function staleStateMs(timeScale: number): number {
  return Math.max(MIN_STATE_CACHE_MS * 10, STALE_STATE_MS * timeScale);
}

export interface PipelineSnapshot {
  state: PipelineState;
  shape: PublishedShape | undefined;
}

/** How a read with no snapshot to answer for it tries again. */
export interface ViewRetry {
  /** No try starts once this long has passed since the read began (ms on the view's clock). */
  forMs: number;
  /** Between two tries (ms); the tries are also at most forMs / waitMs + 1, whatever the clock says. */
  waitMs: number;
  sleep: (ms: number) => Promise<void>;
}

/**
 * One environment's view of the pipeline state and the lane shape: a read is shared by every
 * caller while it is under way and reused for `ttlMs` after it started (0: each ask reads).
 * A failed read is not kept: the next ask reads again. With `staleMs`, a failed read answers
 * the last good snapshot while it is younger than that (a throttled read must not end a lane or
 * drop an invocation to one lane); with none that young, `retry` tries again for a bounded time;
 * then, or with neither, the failure is the answer.
 */
export class PipelineView {
  #last: { at: number; value: PipelineSnapshot } | undefined;
  #pending: Promise<PipelineSnapshot> | undefined;

  constructor(
    private readonly o: {
      read: () => Promise<PipelineSnapshot>;
      ttlMs: number;
      /** How long the last good snapshot answers for a failed read; unset: never. */
      staleMs?: number;
      /** Tries again when no snapshot answers for a failed read; unset: one try. */
      retry?: ViewRetry;
      /** A monotonic clock (ms). */
      clock?: () => number;
    },
  ) {}

  async read(): Promise<PipelineSnapshot> {
    const last = this.#last;
    if (last && this.#now() - last.at < this.o.ttlMs) return last.value;
    if (this.#pending) return this.#pending;
    const pending = this.#tries();
    this.#pending = pending;
    try {
      return await pending;
    } finally {
      if (this.#pending === pending) this.#pending = undefined;
    }
  }

  async #tries(): Promise<PipelineSnapshot> {
    const began = this.#now();
    const retry = this.o.retry;
    const tries = retry ? Math.floor(retry.forMs / retry.waitMs) + 1 : 1;
    for (let attempt = 1; ; attempt++) {
      const at = this.#now();
      try {
        const value = await this.o.read();
        this.#last = { at, value };
        return value;
      } catch (err) {
        const good = this.#last;
        if (good && this.o.staleMs !== undefined && this.#now() - good.at < this.o.staleMs) return good.value;
        if (!retry || attempt >= tries || this.#now() - began + retry.waitMs > retry.forMs) throw err;
        await retry.sleep(retry.waitMs);
      }
    }
  }

  #now(): number {
    return (this.o.clock ?? performance.now.bind(performance))();
  }
}

/**
 * The worker environment's view: with lanes the state and the shape are read together and shared
 * by the lanes for a moment; with one lane every record reads the state, as before. A throttled
 * read answers the last good snapshot for a while, or with none that young is tried again for a
 * moment: a lane does not end on it, nor does an invocation fall to one lane. Every read is told
 * to `onState` (the CaptchaAI client drops a key read before a pause or a resume).
 */
export function environmentView(
  control: Pick<PipelineControl, 'readStateAndShape'>,
  o: {
    lanes: number;
    timeScale: number;
    onState: (state: PipelineState) => void;
    clock?: (() => number) | undefined;
  },
): PipelineView {
  return new PipelineView({
    read: async () => {
      const snapshot = await control.readStateAndShape();
      o.onState(snapshot.state);
      return snapshot;
    },
    ttlMs: o.lanes > 1 ? stateCacheMs(o.timeScale) : 0,
    staleMs: staleStateMs(o.timeScale),
    retry: {
      forMs: STATE_RETRY_MS,
      waitMs: awsWaitMs(STATE_RETRY_WAIT_MS, o.timeScale),
      sleep: (ms) => new Promise((resolve) => setTimeout(resolve, ms)),
    },
    ...(o.clock ? { clock: o.clock } : {}),
  });
}
