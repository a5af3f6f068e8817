import { describe, expect, it } from 'vitest';
import {
  DEFAULT_TIMINGS,
  MIN_SCALED_TOKEN_LIFETIME_MS,
  pollWaitMs,
  readTimingsFromEnv,
  resolveTimings,
  scaledTokenLifetimeMs,
} from '../../../../functions/captchaai/timings.js';
import { ConfigError } from '../../../../functions/common/errors.js';

describe('CaptchaAI timings', () => {
  it("defaults to CaptchaAI's published first polls, shorter intervals and a budget well under 20 polls", () => {
    expect(DEFAULT_TIMINGS).toMatchObject({
      firstPollMs: { recaptcha_v2: 15_000, turnstile: 5_000 },
      pollIntervalMs: { recaptcha_v2: 3_000, turnstile: 2_000 },
      pollBudget: 17,
      serverErrorWaitMs: 10_000,
      submitBackoffMs: 10_000,
      submitRetries: 2,
      deadlineMs: 120_000,
    });
  });

  it.each([
    // type, time scale, lifetime: scaled while above the floor, the floor below it, never longer than unscaled
    ['recaptcha_v2', 1, 120_000],
    ['recaptcha_v2', 0.5, 60_000],
    ['recaptcha_v2', 0.01, MIN_SCALED_TOKEN_LIFETIME_MS],
    ['turnstile', 0.2, 60_000],
    ['turnstile', 0.01, MIN_SCALED_TOKEN_LIFETIME_MS],
    ['image', 0.01, Number.POSITIVE_INFINITY],
  ] as const)(
    'a %s token lives %s × its lifetime but at least the real-time floor: %s ms',
    (type, scale, ms) => {
      expect(scaledTokenLifetimeMs(type, scale)).toBe(ms);
    },
  );

  it('scales a token lifetime all the way down with a floor of 0, and never lengthens it past the unscaled one', () => {
    expect(scaledTokenLifetimeMs('recaptcha_v2', 0.01, 0)).toBe(1_200);
    expect(scaledTokenLifetimeMs('recaptcha_v2', 0.01, 500_000)).toBe(120_000);
  });

  it('merges overrides, including the first poll of single types', () => {
    // Act
    const t = resolveTimings({ deadlineMs: 90_000, firstPollMs: { turnstile: 3_000 } });

    // Assess
    expect(t.deadlineMs).toBe(90_000);
    expect(t.firstPollMs).toEqual({ ...DEFAULT_TIMINGS.firstPollMs, turnstile: 3_000 });
  });

  it('reads overrides and the time scale from the environment, leaving unset ones to the defaults', () => {
    // Act
    const read = readTimingsFromEnv({
      CAPTCHAAI_DEADLINE_MS: '60000',
      CAPTCHAAI_SUBMIT_RETRIES: '1',
      CAPTCHAAI_FIRST_POLL_MS: '{"turnstile":2000}',
      CAPTCHAAI_TIME_SCALE: '0.5',
    });

    // Assess
    expect(read).toEqual({
      timings: { deadlineMs: 60_000, submitRetries: 1, firstPollMs: { turnstile: 2_000 } },
      timeScale: 0.5,
    });
    expect(readTimingsFromEnv({})).toEqual({ timings: {}, timeScale: 1 });
  });

  it('applies a plain CAPTCHAAI_FIRST_POLL_MS number to every type', () => {
    expect(readTimingsFromEnv({ CAPTCHAAI_FIRST_POLL_MS: '1000' }).timings.firstPollMs).toEqual({
      recaptcha_v2: 1_000,
      recaptcha_v3: 1_000,
      recaptcha_enterprise: 1_000,
      turnstile: 1_000,
      image: 1_000,
    });
  });

  it('reads the poll interval per type and the poll budget from the environment', () => {
    const read = readTimingsFromEnv({
      CAPTCHAAI_POLL_INTERVAL_MS: '{"turnstile":1500}',
      CAPTCHAAI_POLL_BUDGET: '12',
      CAPTCHAAI_RATE_LIMIT_BACKOFF_MS: '2000',
    });
    expect(read.timings).toEqual({
      pollIntervalMs: { turnstile: 1_500 },
      pollBudget: 12,
      rateLimitBackoffMs: 2_000,
    });
    expect(resolveTimings(read.timings).pollIntervalMs).toEqual({
      ...DEFAULT_TIMINGS.pollIntervalMs,
      turnstile: 1_500,
    });
    expect(resolveTimings({ pollIntervalMs: 4_000 }).pollIntervalMs.image).toBe(4_000);
  });

  it('schedules the first poll, then the interval, and keeps the last poll of the budget for the deadline', () => {
    const t = { pollBudget: 4, deadlineMs: 120_000, firstPollMs: 15_000, intervalMs: 3_000 };
    expect(pollWaitMs(t, 0, 0)).toBe(15_000);
    expect(pollWaitMs(t, 1, 15_000)).toBe(3_000);
    expect(pollWaitMs(t, 2, 18_000)).toBe(3_000);
    // The fourth and last call of the budget waits for the deadline.
    expect(pollWaitMs(t, 3, 21_000)).toBe(99_000);
    expect(pollWaitMs(t, 4, 120_000)).toBeUndefined();
    // Never past the deadline.
    expect(pollWaitMs(t, 1, 118_000)).toBe(2_000);
  });

  it.each([
    { env: { CAPTCHAAI_POLL_BUDGET: '0' }, name: 'CAPTCHAAI_POLL_BUDGET' },
    { env: { CAPTCHAAI_POLL_INTERVAL_MS: '{"turnstile":"x"}' }, name: 'CAPTCHAAI_POLL_INTERVAL_MS' },
    { env: { CAPTCHAAI_DEADLINE_MS: 'soon' }, name: 'CAPTCHAAI_DEADLINE_MS' },
    { env: { CAPTCHAAI_SUBMIT_RETRIES: '1.5' }, name: 'CAPTCHAAI_SUBMIT_RETRIES' },
    { env: { CAPTCHAAI_TIME_SCALE: '0' }, name: 'CAPTCHAAI_TIME_SCALE' },
    { env: { CAPTCHAAI_FIRST_POLL_MS: '{"hcaptcha":1}' }, name: 'CAPTCHAAI_FIRST_POLL_MS' },
  ])('names $name when its value is malformed', ({ env, name }) => {
    expect(() => readTimingsFromEnv(env)).toThrow(ConfigError);
    expect(() => readTimingsFromEnv(env)).toThrow(name);
  });
});
