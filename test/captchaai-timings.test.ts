import { describe, expect, it } from 'vitest';
import {
  DEFAULT_TIMINGS,
  readTimingsFromEnv,
  resolveTimings,
} from '../functions/shared/captchaai/timings.js';
import { ConfigError } from '../functions/shared/errors.js';

describe('CaptchaAI timings', () => {
  it("defaults to CaptchaAI's published waits", () => {
    expect(DEFAULT_TIMINGS).toMatchObject({
      firstPollMs: { recaptcha_v2: 15_000, turnstile: 5_000 },
      pollIntervalMs: 5_000,
      serverErrorWaitMs: 10_000,
      submitBackoffMs: 10_000,
      submitRetries: 2,
      deadlineMs: 120_000,
    });
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

  it.each([
    { env: { CAPTCHAAI_DEADLINE_MS: 'soon' }, name: 'CAPTCHAAI_DEADLINE_MS' },
    { env: { CAPTCHAAI_SUBMIT_RETRIES: '1.5' }, name: 'CAPTCHAAI_SUBMIT_RETRIES' },
    { env: { CAPTCHAAI_TIME_SCALE: '0' }, name: 'CAPTCHAAI_TIME_SCALE' },
    { env: { CAPTCHAAI_FIRST_POLL_MS: '{"hcaptcha":1}' }, name: 'CAPTCHAAI_FIRST_POLL_MS' },
  ])('names $name when its value is malformed', ({ env, name }) => {
    expect(() => readTimingsFromEnv(env)).toThrow(ConfigError);
    expect(() => readTimingsFromEnv(env)).toThrow(name);
  });
});
