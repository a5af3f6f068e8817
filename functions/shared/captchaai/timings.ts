import { type Env, optionalNumber } from '../env.js';
import { ConfigError } from '../errors.js';
import { CAPTCHA_TYPES, type CaptchaType } from './types.js';

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

/** Environment variables that override the client's timings (milliseconds at time scale 1). */
export const TIMING_ENV = {
  firstPollMs: 'CAPTCHAAI_FIRST_POLL_MS',
  pollIntervalMs: 'CAPTCHAAI_POLL_INTERVAL_MS',
  serverErrorWaitMs: 'CAPTCHAAI_SERVER_ERROR_WAIT_MS',
  submitBackoffMs: 'CAPTCHAAI_SUBMIT_BACKOFF_MS',
  submitRetries: 'CAPTCHAAI_SUBMIT_RETRIES',
  deadlineMs: 'CAPTCHAAI_DEADLINE_MS',
  httpTimeoutMs: 'CAPTCHAAI_HTTP_TIMEOUT_MS',
  timeScale: 'CAPTCHAAI_TIME_SCALE',
} as const;

/**
 * Reads timing overrides and the time scale from the environment; unset variables keep
 * CaptchaAI's defaults. `CAPTCHAAI_FIRST_POLL_MS` is either one number for every type or a
 * JSON object per type, e.g. `{"turnstile":3000}`. A malformed value is a ConfigError naming it.
 */
export function readTimingsFromEnv(env: Env): { timings: SolveTimingsOverrides; timeScale: number } {
  const timings: SolveTimingsOverrides = {};
  const ms = (key: Exclude<keyof typeof TIMING_ENV, 'firstPollMs' | 'timeScale' | 'submitRetries'>) => {
    const name = TIMING_ENV[key];
    if (env[name] !== undefined && env[name]?.trim() !== '')
      timings[key] = optionalNumber(env, name, 0, { min: 0 });
  };
  ms('pollIntervalMs');
  ms('serverErrorWaitMs');
  ms('submitBackoffMs');
  ms('deadlineMs');
  ms('httpTimeoutMs');
  const retries = env[TIMING_ENV.submitRetries];
  if (retries !== undefined && retries.trim() !== '') {
    timings.submitRetries = optionalNumber(env, TIMING_ENV.submitRetries, 0, { min: 0, integer: true });
  }
  const firstPoll = env[TIMING_ENV.firstPollMs]?.trim();
  if (firstPoll) timings.firstPollMs = parseFirstPoll(firstPoll);
  const timeScale = optionalNumber(env, TIMING_ENV.timeScale, 1, { min: Number.MIN_VALUE });
  return { timings, timeScale };
}

function parseFirstPoll(raw: string): Partial<Record<CaptchaType, number>> {
  const name = TIMING_ENV.firstPollMs;
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
