import { randomUUID } from 'node:crypto';
import type { Logger } from '@aws-lambda-powertools/logger';
import type { LeaseTimes, SlotLedger } from '../../pipeline/ledger.js';
import { taskDeadlineMs, type WorkerConfig } from '../config.js';
import { errorSummary } from '../types.js';

/**
 * An invocation's lease on the slot ledger (../pipeline/ledger.ts): the lanes it may run, kept
 * alive by a renewal every third of the lease's life. While the lease is live (its expiry, as
 * last renewed, more than SUBMIT_MARGIN_MS away) the invocation's records may send in.php; once
 * it is not (renewals failed, or the lease was reclaimed), they send none: every task of the
 * invocation then began before the expiry the ledger knows, so the ledger frees its lanes only
 * after those tasks must be finished. A lane that leaves early gives its lane back; the rest go
 * back when the invocation ends.
 */
export class InvocationLease {
  #expiresAt: number;
  #lanes: number;
  #lost = false;
  #ended = false;
  readonly #timer: ReturnType<typeof setInterval>;

  private constructor(
    private readonly ledger: SlotLedger,
    readonly id: string,
    granted: { lanes: number; expiresAt: number },
    private readonly o: LeaseOptions,
  ) {
    this.#lanes = granted.lanes;
    this.#expiresAt = granted.expiresAt;
    this.#timer = setInterval(() => void this.#renew(), Math.max(1, o.times.ttlMs / 3));
    this.#timer.unref?.();
  }

  /**
   * Takes a lease of up to `want` lanes, waiting for room (reclaiming expired leases meanwhile)
   * until `waitUntil` (epoch ms). Room is what the cap leaves once the lanes still held, by live
   * invocations and by dead ones whose tasks may still run, are counted. Returns the lease, or
   * when no room came in time the earliest moment a held lease can be reclaimed.
   */
  static async take(
    ledger: SlotLedger,
    want: number,
    o: LeaseOptions & { waitUntil: number; signal?: AbortSignal },
  ): Promise<InvocationLease | { retryAt: number | undefined }> {
    const id = randomUUID();
    let retryAt: number | undefined;
    let reclaimedAt = Number.NEGATIVE_INFINITY;
    for (;;) {
      try {
        const granted = await ledger.take(
          id,
          want,
          o.times,
          o.firstCap === undefined ? {} : { firstCap: o.firstCap },
        );
        if ('expiresAt' in granted) return new InvocationLease(ledger, id, granted, o);
        if (o.now() - reclaimedAt >= o.reclaimEveryMs) {
          reclaimedAt = o.now();
          const { freed, nextAt } = await ledger.reclaimExpired();
          retryAt = nextAt;
          if (freed > 0) {
            o.logger.info('reclaimed the lanes of expired leases', { lanesFreed: freed });
            continue;
          }
        }
      } catch (err) {
        o.logger.warn('could not read or take a lease on the slot ledger', errorSummary(err));
      }
      if (o.now() + o.pollMs > o.waitUntil || o.signal?.aborted) return { retryAt };
      await o.sleep(o.pollMs, o.signal);
    }
  }

  /** Lanes this lease holds. */
  get lanes(): number {
    return this.#lanes;
  }

  /** Whether a record may send an in.php now. */
  live(): boolean {
    return !this.#lost && !this.#ended && this.o.now() < this.#expiresAt - this.o.submitMarginMs;
  }

  /** A lane left early (the shape allows fewer): its lane goes back to the ledger. */
  async shed(): Promise<void> {
    if (this.#ended || this.#lanes <= 1) return;
    this.#lanes--;
    try {
      await this.ledger.giveBack(this.id, 1, false);
    } catch (err) {
      // The lane stays counted until the invocation ends: fewer solves, never more.
      this.#lanes++;
      this.o.logger.warn('could not give a lane back to the slot ledger', errorSummary(err));
    }
  }

  /** The invocation's lanes have all ended (their tasks are finished): the lease goes back. */
  async end(): Promise<void> {
    if (this.#ended) return;
    this.#ended = true;
    clearInterval(this.#timer);
    if (this.#lost) return;
    try {
      await this.ledger.giveBack(this.id, this.#lanes, true);
    } catch (err) {
      // Its lanes come back when the lease is reclaimed: later, never early.
      this.o.logger.warn('could not give the lease back to the slot ledger', errorSummary(err));
    }
  }

  async #renew(): Promise<void> {
    if (this.#ended || this.#lost) return;
    try {
      const renewed = await this.ledger.renew(this.id, this.o.times);
      if (renewed === 'lost') {
        this.#lost = true;
        this.o.logger.warn('the lease on the slot ledger was reclaimed; no more tasks are submitted here');
      } else {
        this.#expiresAt = renewed;
      }
    } catch (err) {
      this.o.logger.warn('could not renew the lease on the slot ledger', errorSummary(err));
    }
  }
}

export interface LeaseOptions {
  times: LeaseTimes;
  /** Epoch ms. */
  now: () => number;
  sleep: (ms: number, signal?: AbortSignal) => Promise<void>;
  logger: Pick<Logger, 'info' | 'warn'>;
  /** Between two takes while there is no room. */
  pollMs: number;
  /** Between two reclaims while there is no room (each reads every lease). */
  reclaimEveryMs: number;
  /** No in.php is sent this close to the lease's expiry. */
  submitMarginMs: number;
  /** The deployed cap: the ledger's until the cap adjuster has written one. */
  firstCap?: number;
}

/** A lease's life at time scale 1: renewed every 40 s. */
export const LEASE_TTL_MS = 120_000;
/** Its floor at small time scales, so renewals stay a few seconds apart on a slow emulator. */
export const MIN_LEASE_TTL_MS = 9_000;
/** Clocks of Lambda environments differ by milliseconds; the margin keeps borderline cases safe. */
export const CLOCK_MARGIN_MS = 2_000;

/**
 * Returns a lease's life and its tail for a worker's configuration: the ledger frees a dead
 * invocation's lanes `tailMs` after its lease's expiry, at most `ttlMs` after its last renewal.
 */
export function leaseTimesFor(
  config: Pick<WorkerConfig, 'timeScale' | 'captchaTimings' | 'cooldownMs'>,
): LeaseTimes {
  const ttlMs = Math.max(MIN_LEASE_TTL_MS, LEASE_TTL_MS * config.timeScale);
  // The tail covers a task sent just before expiry: its deadline, then the cool-down a lost
  // answer holds, and the clocks' margin.
  return { ttlMs, tailMs: taskDeadlineMs(config) + config.cooldownMs + CLOCK_MARGIN_MS };
}

/** The lease's timings for a worker's configuration. */
export function leaseOptionsFor(
  config: Pick<WorkerConfig, 'timeScale' | 'captchaTimings' | 'cooldownMs' | 'firstCap'>,
  rest: Pick<LeaseOptions, 'now' | 'sleep' | 'logger'>,
): LeaseOptions {
  return {
    ...rest,
    times: leaseTimesFor(config),
    pollMs: Math.max(500, 5_000 * config.timeScale),
    reclaimEveryMs: Math.max(1_000, 10_000 * config.timeScale),
    submitMarginMs: CLOCK_MARGIN_MS,
    ...(config.firstCap === undefined ? {} : { firstCap: config.firstCap }),
  };
}
