import type { WorkerConfig } from './config.js';
import type { ProcessOptions } from './types.js';
import {
  DEADLINE_MARGIN_MS,
  shortestRecordMs,
  submitFitsMs,
  type WorstCaseSettings,
  worstCaseRecordMs,
} from './worst-case.js';

/**
 * Until when an invocation may take messages itself (worker/chain.ts): CHAIN_SECONDS from now,
 * and never while less than one record's worst case is left before the function timeout.
 */
export function chainUntil(config: WorkerConfig, remainingMs: number | undefined): number | undefined {
  if (config.chainMs <= 0) return undefined;
  const worstMs = worstCaseRecordMs(worstCaseSettings(config));
  const windowMs =
    remainingMs === undefined
      ? config.chainMs
      : Math.min(config.chainMs, remainingMs - DEADLINE_MARGIN_MS - worstMs);
  return windowMs > 0 ? performance.now() + windowMs : undefined;
}

/**
 * The take window of an invocation. One lane: the chain's ({@link chainUntil}), as always.
 *
 * Several lanes: an invocation ends only when its last lane does, and no other invocation may take
 * a lane's place before (r × L ≤ cap), so every lane that stops early idles through the tail. The
 * fewer records a lane works per invocation, the more that tail weighs (at the defaults the chain
 * is about 2 minutes, 3–4 records a lane). So a lane keeps taking records for as long as the
 * SHORTEST work of a record still fits before the timeout (one task, no submit retry:
 * shortestRecordMs), the chain's window plus what that saves on the whole worst case; and before
 * each in.php call a record checks that the shortest work from there on still fits
 * (`submitFits`). A record that would need more (a submit retry, the resubmission after
 * UNSOLVABLE) late in an invocation goes back to the queue before that call, released, for a
 * lane with time for it. Without a known remaining time (tests calling the handler bare) lanes
 * keep the chain's window.
 */
export function takeWindow(
  config: WorkerConfig,
  remainingMs: number | undefined,
): Pick<ProcessOptions, 'chainUntil' | 'submitFits'> {
  const chain = chainUntil(config, remainingMs);
  if (config.lanes <= 1 || remainingMs === undefined || config.chainMs <= 0) {
    return chain === undefined ? {} : { chainUntil: chain };
  }
  const settings = worstCaseSettings(config);
  const now = performance.now();
  const saved = worstCaseRecordMs(settings) - shortestRecordMs(settings);
  const windowMs = Math.min(
    config.chainMs + saved,
    remainingMs - DEADLINE_MARGIN_MS - shortestRecordMs(settings),
  );
  const submitUntil = now + remainingMs - DEADLINE_MARGIN_MS - submitFitsMs(settings);
  return {
    ...(windowMs > 0 ? { chainUntil: now + windowMs } : {}),
    submitFits: () => performance.now() <= submitUntil,
  };
}

function worstCaseSettings(config: WorkerConfig): WorstCaseSettings {
  return {
    timings: config.captchaTimings,
    timeScale: config.timeScale,
    targetTimeoutMs: config.targetTimeoutMs,
    cooldownMs: config.cooldownMs,
  };
}
