import { describe, expect, it } from 'vitest';
import {
  BadTaskError,
  CaptchaError,
  InvalidJobError,
  PollTimeoutError,
  StopClassError,
  TargetError,
  TransientError,
  UnsolvableError,
} from '../functions/shared/errors.js';
import { decideOutcome } from '../functions/shared/outcome-mapping.js';

const ctx = { receiveCount: 1, transientReceiveLimit: 3, cooldownMs: 5_000 };

describe('decideOutcome', () => {
  it.each([
    [
      'an invalid job with a record key is rejected with its reason',
      new InvalidJobError('pageurl: must be an absolute http(s) URL', 'r1'),
      { action: 'reject', recordKey: 'r1', reason: 'pageurl: must be an absolute http(s) URL' },
    ],
    [
      'an invalid job without a record key goes to the DLQ',
      new InvalidJobError('message: not valid JSON'),
      { action: 'dlq', errorCode: 'INVALID_JOB', reason: 'message: not valid JSON' },
    ],
    [
      'a stop-class error stops the pipeline',
      new StopClassError('ERROR_KEY_DOES_NOT_EXIST', 'the API key does not exist or was revoked'),
      {
        action: 'stop',
        code: 'ERROR_KEY_DOES_NOT_EXIST',
        reason: 'the API key does not exist or was revoked',
      },
    ],
    [
      'a poll timeout fails the record and keeps the slot for the cool-down',
      new PollTimeoutError('POLL_TIMEOUT'),
      { action: 'fail', reason: 'POLL_TIMEOUT', cooldownMs: 5_000 },
    ],
    [
      'unsolvable (after its resubmission) fails the record',
      new UnsolvableError('ERROR_CAPTCHA_UNSOLVABLE'),
      { action: 'fail', reason: 'ERROR_CAPTCHA_UNSOLVABLE' },
    ],
    [
      'a bad task fails the record with its code',
      new BadTaskError('ERROR_GOOGLEKEY'),
      { action: 'fail', reason: 'ERROR_GOOGLEKEY' },
    ],
    [
      'another CaptchaAI error fails the record',
      new CaptchaError('ERROR_ODD'),
      { action: 'fail', reason: 'ERROR_ODD' },
    ],
    [
      'a target error fails the record with its code',
      new TargetError('TOKEN_EXPIRED', 'old'),
      { action: 'fail', reason: 'TOKEN_EXPIRED' },
    ],
  ])('%s', (_name, error, decision) => {
    expect(decideOutcome(error, ctx)).toEqual(decision);
  });

  it('retries a transient error (releasing the claim) while the receive count is below the limit, then fails it', () => {
    const err = new TransientError('ERROR_SERVER_ERROR');
    expect(decideOutcome(err, { ...ctx, receiveCount: 2 })).toEqual({
      action: 'retry',
      release: true,
      reason: 'ERROR_SERVER_ERROR',
    });
    expect(decideOutcome(err, { ...ctx, receiveCount: 3 })).toEqual({
      action: 'fail',
      reason: 'TRANSIENT_EXHAUSTED',
    });
  });

  it('retries an unknown error keeping the lease, then fails it as INTERNAL_ERROR', () => {
    const err = new Error('ProvisionedThroughputExceeded');
    expect(decideOutcome(err, ctx)).toEqual({ action: 'retry', release: false, reason: 'INTERNAL_ERROR' });
    expect(decideOutcome(err, { ...ctx, receiveCount: 3 })).toEqual({
      action: 'fail',
      reason: 'INTERNAL_ERROR',
    });
  });
});
