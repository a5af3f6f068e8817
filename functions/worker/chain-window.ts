import type { WorkerConfig } from './config.js';
import type { ProcessOptions } from './types.js';
import {
  DEADLINE_MARGIN_MS,
  shortestRecordMs,
  submitFitsMs,
  type WorstCaseSettings,
  worstCaseRecordMs,
} from './worst-case.js';

/** What the take window depends on: lanes, the chain's setting and the worst case's settings. */
export type TakeWindowSettings = Pick<
  WorkerConfig,
  'lanes' | 'chainMs' | 'captchaTimings' | 'timeScale' | 'targetTimeoutMs' | 'cooldownMs'
>;

/**
 * How long from now an invocation may take messages itself (worker/chain.ts), in ms; at or below
 * 0 it takes none. Also the bench model's take window (bench/lanes-model.ts).
 *
 * One lane: CHAIN_SECONDS, and never while less than one record's worst case is left before the
 * function timeout.
 *
 * Several lanes: an invocation ends only when its last lane does, and no other invocation may take
 * a lane's place before (r × L ≤ cap), so every lane that stops early idles through the tail. The
 * fewer records a lane works per invocation, the more that tail weighs (with the chain alone,
 * about 2 minutes at the defaults: 3–4 records a lane). So lanes keep taking records for as long
 * as the SHORTEST work of a record still fits before the timeout (one task, no submit retry:
 * shortestRecordMs): the chain's window plus what that saves on the whole worst case, about
 * 7 minutes at the defaults. Before each in.php call a lanes record checks that the shortest work
 * from there on still fits ({@link takeWindow}'s `submitFits`): one that would need more late in
 * an invocation (a submit retry, the resubmission after UNSOLVABLE) goes back to the queue before
 * that call, released, for a lane with time for it. Without a known remaining time (tests calling
 * the handler bare) lanes keep the chain's window.
 */
export function takeWindowMs(config: TakeWindowSettings, remainingMs: number | undefined): number {
  if (config.chainMs <= 0) return 0;
  if (remainingMs === undefined) return config.chainMs;
  const settings = worstCaseSettingsOf(config);
  const worstMs = worstCaseRecordMs(settings);
  if (config.lanes <= 1) return Math.min(config.chainMs, remainingMs - DEADLINE_MARGIN_MS - worstMs);
  const shortestMs = shortestRecordMs(settings);
  return Math.min(config.chainMs + worstMs - shortestMs, remainingMs - DEADLINE_MARGIN_MS - shortestMs);
}

/** Until when an invocation may take messages itself: {@link takeWindowMs} from now. */
export function chainUntil(config: WorkerConfig, remainingMs: number | undefined): number | undefined {
  const windowMs = takeWindowMs(config, remainingMs);
  return windowMs > 0 ? performance.now() + windowMs : undefined;
}

/** The invocation's take window, and with lanes and a known remaining time the check before an in.php. */
export function takeWindow(
  config: WorkerConfig,
  remainingMs: number | undefined,
): Pick<ProcessOptions, 'chainUntil' | 'submitFits'> {
  const chain = chainUntil(config, remainingMs);
  const window = chain === undefined ? {} : { chainUntil: chain };
  if (config.lanes <= 1 || remainingMs === undefined || config.chainMs <= 0) return window;
  const submitUntil =
    performance.now() + remainingMs - DEADLINE_MARGIN_MS - submitFitsMs(worstCaseSettingsOf(config));
  return { ...window, submitFits: () => performance.now() <= submitUntil };
}

/** The worst case's settings as the worker's configuration holds them. */
export function worstCaseSettingsOf(
  config: Omit<TakeWindowSettings, 'lanes' | 'chainMs'>,
): WorstCaseSettings {
  return {
    timings: config.captchaTimings,
    timeScale: config.timeScale,
    targetTimeoutMs: config.targetTimeoutMs,
    cooldownMs: config.cooldownMs,
  };
}
