import { describe, expect, it } from 'vitest';
import { DEFAULT_TIMINGS } from '../../../../functions/captchaai/timings.js';
import {
  AWS_MAX_ATTEMPTS,
  AWS_REQUEST_TIMEOUT_MS,
  awsCallMs,
} from '../../../../functions/common/aws-clients.js';
import { WRITE_TRIES } from '../../../../functions/records/store.js';
import { MIN_CAPTCHAAI_HTTP_TIMEOUT_MS } from '../../../../functions/worker/config.js';
import {
  AWS_CALL_MS,
  cancelAsksPerRecord,
  DEADLINE_MARGIN_MS,
  SETUP_MS,
  STOP_PATH_MS,
  shortestRecordMs,
  stopPathMs,
  submitFitsMs,
  worstCaseParts,
  worstCaseRecordMs,
} from '../../../../functions/worker/worst-case.js';

const BASE = { timeScale: 1, targetTimeoutMs: 15_000, cooldownMs: 60_000 };

describe('worstCaseRecordMs: the longest one record can take', () => {
  it('counts every CaptchaAI call at the default timings: two tasks with their successful in.php and last poll, the failed submits with threadsinfo and back-offs, the idle re-check and a key rotation', () => {
    // Prepare: by hand, from CaptchaAI's defaults (http 20 s, deadline 120 s, 2 retries after 10 s and 20 s,
    // each at least 8 × the 5 s rate-limit back-off).
    const http = DEFAULT_TIMINGS.httpTimeoutMs;
    const tasks = 2 * (2 * http + DEFAULT_TIMINGS.deadlineMs);
    const failedSubmits = 3 * 2 * http + 40_000 + 40_000;
    // A rotation adds only the stopped start (in.php and threadsinfo) and the secret read: the new
    // key continues the same budget.
    const rotation = 2 * http + AWS_CALL_MS;
    // Act
    const parts = worstCaseParts(BASE);
    // Assess
    expect(parts.captchaai).toBe(tasks + failedSubmits + rotation);
    expect(parts.setup).toBe(SETUP_MS);
    expect(parts.priorTask).toBe(60_000);
    expect(parts.ending).toBe(15_000 + 60_000);
    // The claim, the three phase markers and the final write, each with its tries and back-off.
    expect(parts.aws).toBe(5 * (WRITE_TRIES * AWS_CALL_MS + 250 + 500 + 1_000));
    expect(parts.margin).toBe(DEADLINE_MARGIN_MS);
    // A cancel read before each of the 6 in.php calls (3 failed or re-checked, 2 tasks, the
    // stopped start before the rotation) and one before the POST, each at its longest.
    expect(parts.cancelReads).toBe(7 * AWS_CALL_MS);
    expect(worstCaseRecordMs(BASE)).toBe(Object.values(parts).reduce((a, b) => a + b, 0));
  });

  it('counts a cancel read before every in.php the retry budget allows', () => {
    expect(cancelAsksPerRecord()).toBe(DEFAULT_TIMINGS.submitRetries + 5);
    expect(worstCaseParts({ ...BASE, timings: { submitRetries: 5 } }).cancelReads).toBe(10 * AWS_CALL_MS);
  });

  it('scales the CaptchaAI waits but floors each HTTP timeout at the worker’s real minimum', () => {
    const parts = worstCaseParts({ ...BASE, timeScale: 0.01 });
    const http = MIN_CAPTCHAAI_HTTP_TIMEOUT_MS;
    expect(parts.captchaai).toBe(2 * (2 * http + 1_200) + 3 * 2 * http + 400 + 400 + 2 * http + AWS_CALL_MS);
  });

  it('scales the waits between AWS tries with the time scale, floored at 50 ms, but not the calls’ timeouts', () => {
    // Prepare: at 0.01 every call is allowed its full timeout, every wait its 50 ms floor.
    const call = AWS_CALL_MS;
    // Act
    const parts = worstCaseParts({ ...BASE, timeScale: 0.01, targetTimeoutMs: 1_000, cooldownMs: 0 });
    // Assess
    expect(parts.aws).toBe(5 * (WRITE_TRIES * call + 3 * 50));
    expect(stopPathMs(0.01)).toBe(
      call + 3 * (4 * AWS_REQUEST_TIMEOUT_MS + 4 * 50 + 2 * call) + 2 * 50 + 2 * (3 * call + 2 * 50),
    );
    expect(parts.ending).toBe(stopPathMs(0.01));
    expect(stopPathMs(1)).toBe(STOP_PATH_MS);
  });

  it.each([
    ['deadlineMs', { deadlineMs: 200_000 }],
    ['httpTimeoutMs', { httpTimeoutMs: 40_000 }],
    ['submitRetries', { submitRetries: 3 }],
    ['submitBackoffMs', { submitBackoffMs: 60_000 }],
    ['rateLimitBackoffMs', { rateLimitBackoffMs: 10_000 }],
  ])('grows with %s', (_name, timings) => {
    expect(worstCaseRecordMs({ ...BASE, timings })).toBeGreaterThan(worstCaseRecordMs(BASE));
  });

  it("fits Lambda's 900 s limit at the defaults (772.75 s), which a 40 s HTTP timeout would not", () => {
    expect(worstCaseRecordMs(BASE)).toBe(772_750);
    expect(worstCaseRecordMs({ ...BASE, timings: { httpTimeoutMs: 40_000 } })).toBeGreaterThan(900_000);
  });

  it('allows each AWS call what its client allows: every attempt at the request timeout, the SDK’s waits between', () => {
    expect(AWS_CALL_MS).toBe(awsCallMs());
    expect(awsCallMs()).toBeGreaterThanOrEqual(AWS_MAX_ATTEMPTS * AWS_REQUEST_TIMEOUT_MS);
  });

  it('counts the stop path with the mapping lookup and every ResourceInUse retry of each pause try', () => {
    // Prepare: the lookup once; per try 4 ResourceInUse answers (waits 0.5 + 1 + 1.5 + 2 s), the
    // last update and the state write; waits of 1 s and 2 s between the 3 tries; DLQ copy and
    // delete, 3 tries each with waits of 0.25 s and 0.5 s.
    const perTry = 4 * AWS_REQUEST_TIMEOUT_MS + 5_000 + 2 * AWS_CALL_MS;
    expect(STOP_PATH_MS).toBe(AWS_CALL_MS + 3 * perTry + 3_000 + 2 * (3 * AWS_CALL_MS + 750));
    // Act: a record whose other endings are short.
    const parts = worstCaseParts({ ...BASE, targetTimeoutMs: 1_000, cooldownMs: 0 });
    // Assess
    expect(parts.ending).toBe(STOP_PATH_MS);
  });

  it('grows with the target timeout and the cool-down', () => {
    expect(worstCaseRecordMs({ ...BASE, targetTimeoutMs: 30_000 })).toBeGreaterThan(worstCaseRecordMs(BASE));
    expect(worstCaseRecordMs({ ...BASE, cooldownMs: 90_000 })).toBeGreaterThan(worstCaseRecordMs(BASE));
  });
});

describe('shortestRecordMs and submitFitsMs: the least a lane needs left to start a record, and an in.php', () => {
  it('counts one task, no submit retry (the idle re-check and a key rotation kept), and every other part whole', () => {
    // Prepare: by hand from the defaults: one task with its in.php and last poll, one failed in.php
    // with its threadsinfo (the idle re-check), the rotation's stopped start and secret read.
    const http = DEFAULT_TIMINGS.httpTimeoutMs;
    const full = worstCaseParts(BASE);
    const captchaai = 2 * http + DEFAULT_TIMINGS.deadlineMs + 2 * http + (2 * http + AWS_CALL_MS);
    // The cancel reads as cancelAsksPerRecord counts them with no retry (it counts the
    // resubmission's in.php too: 2 s more than one task asks at most, on the safe side).
    const cancelReads = cancelAsksPerRecord({ submitRetries: 0 }) * AWS_CALL_MS;
    // Act
    const shortest = shortestRecordMs(BASE);
    // Assess
    expect(shortest).toBe(
      full.setup + captchaai + full.priorTask + full.ending + full.aws + cancelReads + full.margin,
    );
    expect(shortest).toBe(448_750);
    // What a whole record needs beyond it: the resubmission's task, two retries with their
    // threadsinfo calls, back-offs and cancel reads.
    expect(worstCaseRecordMs(BASE) - shortest).toBe(
      2 * http + DEFAULT_TIMINGS.deadlineMs + 2 * 2 * http + 80_000 + 2 * AWS_CALL_MS,
    );
  });

  it("asks before an in.php for the shortest work without its setup and an earlier claim's task, both behind it by then", () => {
    expect(submitFitsMs(BASE)).toBe(shortestRecordMs(BASE) - SETUP_MS - BASE.cooldownMs);
    expect(submitFitsMs({ ...BASE, cooldownMs: 0 })).toBe(
      shortestRecordMs({ ...BASE, cooldownMs: 0 }) - SETUP_MS,
    );
  });
});
