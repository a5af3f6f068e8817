import type { PipelineState } from './control.js';
import type { PublishedShape } from './lanes.js';

/**
 * How long an environment reuses its read of the pipeline state and the lane shape, at time
 * scale 1. With one lane every record reads them (as before); with lanes, L loops would each read
 * per record, and a fast drain (a cancelled batch ends records in milliseconds) would send
 * hundreds of reads a second: this keeps an environment at one GetItem (1 read unit) per 2 s. A
 * pause is seen at most this much later (the mapping it disables stops new invocations at once);
 * the adjuster waits twice this before raising r after it lowered L (./lanes.ts SHAPE_SETTLE_MS).
 */
export const STATE_CACHE_MS = 2_000;
/** The cache never goes below this at small time scales. */
export const MIN_STATE_CACHE_MS = 200;

/** How long, at time scale 1, the last good snapshot answers for a read that failed. */
export const STALE_STATE_MS = 20_000;

/** The cache's life at a time scale. */
export function stateCacheMs(timeScale: number): number {
  return Math.max(MIN_STATE_CACHE_MS, STATE_CACHE_MS * timeScale);
}

export interface PipelineSnapshot {
  state: PipelineState;
  shape: PublishedShape | undefined;
}

/**
 * One environment's view of the pipeline state and the lane shape: a read is shared by every
 * caller while it is under way and reused for `ttlMs` after it started (0: each ask reads).
 * A failed read is not kept: the next ask reads again. With `staleMs`, a failed read answers
 * the last good snapshot while it is younger than that (a throttled read must not end a lane or
 * drop an invocation to one lane); older, or with none, the failure is the answer.
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
      /** A monotonic clock (ms). */
      clock?: () => number;
    },
  ) {}

  async read(): Promise<PipelineSnapshot> {
    const clock = this.o.clock ?? performance.now.bind(performance);
    const last = this.#last;
    if (last && clock() - last.at < this.o.ttlMs) return last.value;
    if (this.#pending) return this.#pending;
    const at = clock();
    const pending = this.o.read().then(
      (value) => {
        this.#last = { at, value };
        return value;
      },
      (err: unknown) => {
        const good = this.#last;
        if (good && this.o.staleMs !== undefined && clock() - good.at < this.o.staleMs) return good.value;
        throw err;
      },
    );
    this.#pending = pending;
    try {
      return await pending;
    } finally {
      if (this.#pending === pending) this.#pending = undefined;
    }
  }
}
