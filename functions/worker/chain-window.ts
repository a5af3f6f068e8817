import type { WorkerConfig } from './config.js';
import { DEADLINE_MARGIN_MS, worstCaseRecordMs } from './worst-case.js';

/**
 * Until when an invocation may take messages itself (worker/chain.ts): CHAIN_SECONDS from now,
 * and never while less than one record's worst case is left before the function timeout.
 */
export function chainUntil(config: WorkerConfig, remainingMs: number | undefined): number | undefined {
  if (config.chainMs <= 0) return undefined;
  const worstMs = worstCaseRecordMs({
    timings: config.captchaTimings,
    timeScale: config.timeScale,
    targetTimeoutMs: config.targetTimeoutMs,
    cooldownMs: config.cooldownMs,
  });
  const windowMs =
    remainingMs === undefined
      ? config.chainMs
      : Math.min(config.chainMs, remainingMs - DEADLINE_MARGIN_MS - worstMs);
  return windowMs > 0 ? performance.now() + windowMs : undefined;
}
