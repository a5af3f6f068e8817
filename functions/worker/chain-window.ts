import type { WorkerConfig } from './config.js';
import { DEADLINE_MARGIN_MS, worstCaseRecordMs } from './worst-case.js';

/** What the take window depends on: the chain's setting and the worst case's settings. */
export type TakeWindowSettings = Pick<
  WorkerConfig,
  'chainMs' | 'captchaTimings' | 'timeScale' | 'targetTimeoutMs' | 'cooldownMs'
>;

/**
 * How long from now an invocation may take messages itself (worker/chain.ts), in ms: CHAIN_SECONDS,
 * and never while less than one record's worst case is left before the function timeout. At or
 * below 0: it takes none. Also the bench model's take window (bench/lanes-model.ts).
 */
export function takeWindowMs(config: TakeWindowSettings, remainingMs: number | undefined): number {
  if (config.chainMs <= 0) return 0;
  const worstMs = worstCaseRecordMs({
    timings: config.captchaTimings,
    timeScale: config.timeScale,
    targetTimeoutMs: config.targetTimeoutMs,
    cooldownMs: config.cooldownMs,
  });
  return remainingMs === undefined
    ? config.chainMs
    : Math.min(config.chainMs, remainingMs - DEADLINE_MARGIN_MS - worstMs);
}

/** Until when an invocation may take messages itself: {@link takeWindowMs} from now. */
export function chainUntil(config: WorkerConfig, remainingMs: number | undefined): number | undefined {
  const windowMs = takeWindowMs(config, remainingMs);
  return windowMs > 0 ? performance.now() + windowMs : undefined;
}
