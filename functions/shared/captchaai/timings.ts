import type { CaptchaType } from './types.js';

/**
 * Every wait the client makes. All values are milliseconds at time scale 1; the client
 * multiplies each one (including the deadline and the HTTP timeout) by its `timeScale`.
 */
export interface SolveTimings {
  /** Wait between a successful submit and the first res.php call, per type. */
  firstPollMs: Record<CaptchaType, number>;
  /** Wait between res.php calls while the answer is CAPCHA_NOT_READY. */
  pollIntervalMs: number;
  /** Wait after a server error (HTML/5xx, ERROR_SERVER_ERROR, network) before asking about the same id again. */
  serverErrorWaitMs: number;
  /** First back-off after a transient submit error; it doubles for each further try. */
  submitBackoffMs: number;
  /** How many more in.php tries a transient submit error gets (per solve). */
  submitRetries: number;
  /** Client deadline per submitted task, from the submit to the last poll. */
  deadlineMs: number;
  /** Timeout of every single HTTP call. */
  httpTimeoutMs: number;
}

/** CaptchaAI's published timings (first poll ~15 s for reCAPTCHA, ~5 s for Turnstile, then every 5 s). */
export const DEFAULT_TIMINGS: SolveTimings = {
  firstPollMs: {
    recaptcha_v2: 15_000,
    recaptcha_v3: 15_000,
    recaptcha_enterprise: 15_000,
    turnstile: 5_000,
    image: 5_000,
  },
  pollIntervalMs: 5_000,
  serverErrorWaitMs: 10_000,
  submitBackoffMs: 10_000,
  submitRetries: 2,
  deadlineMs: 120_000,
  httpTimeoutMs: 30_000,
};

/**
 * How long a token stays usable after it is solved: reCAPTCHA ~2 minutes, Turnstile 300 s.
 * Image answers are plain text and do not expire.
 */
export const TOKEN_LIFETIME_MS: Record<CaptchaType, number> = {
  recaptcha_v2: 120_000,
  recaptcha_v3: 120_000,
  recaptcha_enterprise: 120_000,
  turnstile: 300_000,
  image: Number.POSITIVE_INFINITY,
};

/** Partial timings; `firstPollMs` may name only some types. */
export type SolveTimingsOverrides = Partial<Omit<SolveTimings, 'firstPollMs'>> & {
  firstPollMs?: Partial<Record<CaptchaType, number>>;
};

/** Merges partial overrides onto the defaults (firstPollMs per type as well). */
export function resolveTimings(overrides: SolveTimingsOverrides = {}): SolveTimings {
  return {
    ...DEFAULT_TIMINGS,
    ...overrides,
    firstPollMs: { ...DEFAULT_TIMINGS.firstPollMs, ...overrides.firstPollMs },
  };
}
