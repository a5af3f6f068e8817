import { type Env, optionalNumber } from '../common/env.js';
import { ConfigError } from '../common/errors.js';
import { CAPTCHA_TYPES, type CaptchaType } from './types.js';

/**
 * Every wait the client makes. All values are milliseconds at time scale 1; the client
 * multiplies each one (including the deadline and the HTTP timeout) by its `timeScale`.
 *
 * The poll schedule of one task: the first res.php call `firstPollMs[type]` after the submit,
 * then one every `pollIntervalMs[type]`, at most `pollBudget` calls in all; the last call of the
 * budget is kept for the deadline (see {@link pollWaitMs}).
 */
export interface SolveTimings {
  /** Wait between a successful submit and the first res.php call, per type. */
  firstPollMs: Record<CaptchaType, number>;
  /** Wait between res.php calls while the answer is CAPCHA_NOT_READY, per type. */
  pollIntervalMs: Record<CaptchaType, number>;
  /**
   * Most res.php `get` calls for one task, whatever they answer (2captcha-compatible services
   * block keys that poll far more than about 20 times per task).
   */
  pollBudget: number;
  /**
   * First wait after a rate-limit answer (HTTP 429, ERROR_TOO_MUCH_REQUESTS); it doubles for
   * each further one in a row, up to 8 times this.
   */
  rateLimitBackoffMs: number;
  /** After a rate-limit answer, every task of the client polls at twice its interval for this long. */
  rateLimitSlowdownMs: number;
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

/**
 * The first polls are CaptchaAI's published ones (~15 s for reCAPTCHA, ~5 s for Turnstile).
 * The intervals are shorter than CaptchaAI's 5 s: an answer waits half an interval on average
 * for its poll, and that time is lost to the plan (its thread is free, the slot is not). With
 * reCAPTCHA answers between 15 and 60 s (CaptchaAI's published ceiling), 3 s polls cover that
 * range in 16 calls and leave a ceiling of ~0.96 of the plan's thread-time, where 5 s leave
 * ~0.94 (docs/benchmark-notes.md has the measured trade-off of calls per solve against efficiency).
 */
export const DEFAULT_TIMINGS: SolveTimings = {
  firstPollMs: {
    recaptcha_v2: 15_000,
    recaptcha_v3: 15_000,
    recaptcha_enterprise: 15_000,
    turnstile: 5_000,
    image: 5_000,
  },
  pollIntervalMs: {
    recaptcha_v2: 3_000,
    recaptcha_v3: 3_000,
    recaptcha_enterprise: 3_000,
    turnstile: 2_000,
    image: 2_000,
  },
  pollBudget: 17,
  rateLimitBackoffMs: 5_000,
  rateLimitSlowdownMs: 60_000,
  serverErrorWaitMs: 10_000,
  submitBackoffMs: 10_000,
  submitRetries: 2,
  deadlineMs: 120_000,
  httpTimeoutMs: 20_000,
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

/**
 * A time scale (tests, the local stack) shrinks CaptchaAI's waits, but the time between a solve
 * and the site's check of its token is mostly real time that does not shrink: the answer's
 * delivery, the rest of the page load, the POST and the site's verify (each bounded by a real
 * timeout of a few seconds). At 0.01 a reCAPTCHA token lived 1.2 s and a cold first invocation
 * on a busy machine posted it too late, so a scaled lifetime never drops below this.
 */
export const MIN_SCALED_TOKEN_LIFETIME_MS = 30_000;

/** The token lifetime at `timeScale`: the type's lifetime scaled, but at least `floorMs` (never above the unscaled lifetime). */
export function scaledTokenLifetimeMs(
  type: CaptchaType,
  timeScale: number,
  floorMs = MIN_SCALED_TOKEN_LIFETIME_MS,
): number {
  const lifetime = TOKEN_LIFETIME_MS[type];
  return Math.max(lifetime * timeScale, Math.min(lifetime, floorMs));
}

/** Partial timings; the per-type ones may name only some types, or give one number for all. */
export type SolveTimingsOverrides = Partial<Omit<SolveTimings, 'firstPollMs' | 'pollIntervalMs'>> & {
  firstPollMs?: PerType;
  pollIntervalMs?: PerType;
};

/** One value for every CAPTCHA type, or values for some of them. */
export type PerType = number | Partial<Record<CaptchaType, number>>;

function perType(defaults: Record<CaptchaType, number>, v: PerType | undefined): Record<CaptchaType, number> {
  if (typeof v === 'number')
    return Object.fromEntries(CAPTCHA_TYPES.map((t) => [t, v])) as Record<CaptchaType, number>;
  return { ...defaults, ...v };
}

/** Merges partial overrides onto the defaults (the per-type timings type by type). */
export function resolveTimings(overrides: SolveTimingsOverrides = {}): SolveTimings {
  return {
    ...DEFAULT_TIMINGS,
    ...overrides,
    firstPollMs: perType(DEFAULT_TIMINGS.firstPollMs, overrides.firstPollMs),
    pollIntervalMs: perType(DEFAULT_TIMINGS.pollIntervalMs, overrides.pollIntervalMs),
  };
}

/**
 * The wait before the next res.php call of one task, unscaled. `polls` calls were made so far
 * (0 before the first), `sinceSubmitMs` have passed since the submit. The first call comes
 * `firstPollMs` after the submit, the next ones every `intervalMs`; the last call the budget
 * allows is kept for the deadline, so a task slower than the schedule still gets its answer
 * read once before the client gives up. `undefined`: the budget is spent, no more calls.
 */
export function pollWaitMs(
  t: Pick<SolveTimings, 'pollBudget' | 'deadlineMs'> & { firstPollMs: number; intervalMs: number },
  polls: number,
  sinceSubmitMs: number,
): number | undefined {
  if (polls >= t.pollBudget) return undefined;
  const untilDeadline = Math.max(0, t.deadlineMs - sinceSubmitMs);
  if (polls === t.pollBudget - 1 && polls > 0) return untilDeadline;
  return Math.min(polls === 0 ? t.firstPollMs : t.intervalMs, untilDeadline);
}

/** Environment variables that override the client's timings (milliseconds at time scale 1). */
export const TIMING_ENV = {
  firstPollMs: 'CAPTCHAAI_FIRST_POLL_MS',
  pollIntervalMs: 'CAPTCHAAI_POLL_INTERVAL_MS',
  pollBudget: 'CAPTCHAAI_POLL_BUDGET',
  rateLimitBackoffMs: 'CAPTCHAAI_RATE_LIMIT_BACKOFF_MS',
  rateLimitSlowdownMs: 'CAPTCHAAI_RATE_LIMIT_SLOWDOWN_MS',
  serverErrorWaitMs: 'CAPTCHAAI_SERVER_ERROR_WAIT_MS',
  submitBackoffMs: 'CAPTCHAAI_SUBMIT_BACKOFF_MS',
  submitRetries: 'CAPTCHAAI_SUBMIT_RETRIES',
  deadlineMs: 'CAPTCHAAI_DEADLINE_MS',
  httpTimeoutMs: 'CAPTCHAAI_HTTP_TIMEOUT_MS',
  timeScale: 'CAPTCHAAI_TIME_SCALE',
} as const;

/**
 * Reads timing overrides and the time scale from the environment; unset variables keep the
 * defaults. `CAPTCHAAI_FIRST_POLL_MS` and `CAPTCHAAI_POLL_INTERVAL_MS` are either one number for
 * every type or a JSON object per type, e.g. `{"turnstile":3000}`. A malformed value is a
 * ConfigError naming it.
 */
export function readTimingsFromEnv(env: Env): { timings: SolveTimingsOverrides; timeScale: number } {
  const timings: SolveTimingsOverrides = {};
  const set = (env: Env, name: string) => env[name] !== undefined && env[name]?.trim() !== '';
  const ms = (
    key:
      | 'serverErrorWaitMs'
      | 'submitBackoffMs'
      | 'deadlineMs'
      | 'httpTimeoutMs'
      | 'rateLimitBackoffMs'
      | 'rateLimitSlowdownMs',
  ) => {
    if (set(env, TIMING_ENV[key])) timings[key] = optionalNumber(env, TIMING_ENV[key], 0, { min: 0 });
  };
  ms('serverErrorWaitMs');
  ms('submitBackoffMs');
  ms('deadlineMs');
  ms('httpTimeoutMs');
  ms('rateLimitBackoffMs');
  ms('rateLimitSlowdownMs');
  if (set(env, TIMING_ENV.submitRetries)) {
    timings.submitRetries = optionalNumber(env, TIMING_ENV.submitRetries, 0, { min: 0, integer: true });
  }
  if (set(env, TIMING_ENV.pollBudget)) {
    timings.pollBudget = optionalNumber(env, TIMING_ENV.pollBudget, 0, { min: 1, integer: true });
  }
  const firstPoll = env[TIMING_ENV.firstPollMs]?.trim();
  if (firstPoll) timings.firstPollMs = parsePerType(TIMING_ENV.firstPollMs, firstPoll);
  const interval = env[TIMING_ENV.pollIntervalMs]?.trim();
  if (interval) timings.pollIntervalMs = parsePerType(TIMING_ENV.pollIntervalMs, interval);
  const timeScale = optionalNumber(env, TIMING_ENV.timeScale, 1, { min: Number.MIN_VALUE });
  return { timings, timeScale };
}

/** A number for every type, or a JSON object of numbers per type. */
export function parsePerType(name: string, raw: string): Partial<Record<CaptchaType, number>> {
  if (!raw.startsWith('{')) {
    const all = optionalNumber({ [name]: raw }, name, 0, { min: 0 });
    return Object.fromEntries(CAPTCHA_TYPES.map((t) => [t, all]));
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch {
    throw new ConfigError(name, 'must be a number or a JSON object of numbers per CAPTCHA type');
  }
  const out: Partial<Record<CaptchaType, number>> = {};
  for (const [type, value] of Object.entries(parsed as Record<string, unknown>)) {
    if (!CAPTCHA_TYPES.includes(type as CaptchaType))
      throw new ConfigError(name, `unknown CAPTCHA type "${type}"`);
    if (typeof value !== 'number' || !(value >= 0))
      throw new ConfigError(name, `${type} must be a number >= 0`);
    out[type as CaptchaType] = value;
  }
  return out;
}
