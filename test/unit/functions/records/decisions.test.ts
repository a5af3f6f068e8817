import { describe, expect, it } from 'vitest';
import {
  BadTaskError,
  CaptchaError,
  DnsUnavailableError,
  InvalidJobError,
  InvocationEndingError,
  LaneStoppedError,
  PollTimeoutError,
  StopClassError,
  TargetError,
  TaskMayExistError,
  TransientError,
  UnsolvableError,
} from '../../../../functions/common/errors.js';
import { BatchCancelledError, CancelUnknownError } from '../../../../functions/records/cancellations.js';
import { claimOwner } from '../../../../functions/records/claim-owner.js';
import {
  type DecisionContext,
  decideClaimConflict,
  decideCrash,
  decideFinalWriteLost,
  decideOutcome,
  decidePauseFailed,
  decidePriorPhase,
  decideRejectConflict,
  decideStopMetElsewhere,
  decideTargetResponse,
  type PriorPhase,
  type RecordDecision,
} from '../../../../functions/records/decisions.js';
import type { OutcomeRow } from '../../../../functions/records/store.js';

const ctx: DecisionContext = { receiveCount: 1, transientReceiveLimit: 3, cooldownMs: 5_000 };
const lastReceive: DecisionContext = { ...ctx, receiveCount: 3 };
const ending: DecisionContext = { ...ctx, aborted: true };

describe('decideOutcome: a record sent back before its in.php', () => {
  it.each([
    [
      'another lane met the stop',
      new LaneStoppedError('the invocation is stopping'),
      'STOPPED_BY_ANOTHER_LANE',
    ],
    ['the invocation is ending', new InvocationEndingError('too little is left'), 'INVOCATION_ENDING'],
  ])('%s: retried with its claim released below the receive limit', (_, err, reason) => {
    expect(decideOutcome(err, ctx)).toEqual({ action: 'retry', release: true, reason });
  });

  it.each([
    [
      'another lane met the stop',
      new LaneStoppedError('the invocation is stopping'),
      'STOPPED_BY_ANOTHER_LANE',
    ],
    ['the invocation is ending', new InvocationEndingError('too little is left'), 'INVOCATION_ENDING'],
  ])(
    '%s: on the last allowed receive it ends in the DLQ with its reason, its claim released',
    (_, err, code) => {
      const decision = decideOutcome(err, lastReceive);
      expect(decision).toMatchObject({ action: 'dlq', errorCode: code, release: true });
      expect((decision as { reason: string }).reason).toMatch(/receive 3\): nothing was sent; redrive it/);
    },
  );
});

describe('decideOutcome: an error met while working a record', () => {
  it.each([
    [
      'an invalid job with a record key is rejected with its reason',
      new InvalidJobError('pageurl: must be an absolute http(s) URL', 'r1'),
      ctx,
      { action: 'reject', recordKey: 'r1', reason: 'pageurl: must be an absolute http(s) URL' },
    ],
    [
      'an invalid job without a record key goes to the DLQ',
      new InvalidJobError('message: not valid JSON'),
      ctx,
      { action: 'dlq', errorCode: 'INVALID_JOB', reason: 'message: not valid JSON' },
    ],
    [
      'a stop-class error stops the pipeline',
      new StopClassError('ERROR_KEY_DOES_NOT_EXIST', 'the API key does not exist or was revoked'),
      ctx,
      {
        action: 'stop',
        code: 'ERROR_KEY_DOES_NOT_EXIST',
        reason: 'the API key does not exist or was revoked',
        lastReceive: false,
      },
    ],
    [
      'a poll timeout fails the record and keeps the slot for the cool-down',
      new PollTimeoutError('POLL_TIMEOUT'),
      ctx,
      { action: 'fail', reason: 'POLL_TIMEOUT', cooldownMs: 5_000 },
    ],
    [
      'a lost in.php answer below the receive limit holds the slot for the cool-down, then is retried, releasing the claim',
      new TaskMayExistError('SUBMIT_ANSWER_LOST'),
      ctx,
      { action: 'retry', release: true, reason: 'SUBMIT_ANSWER_LOST', cooldownMs: 5_000 },
    ],
    [
      'a lost in.php answer at the receive limit fails the record with its code and the cool-down',
      new TaskMayExistError('SUBMIT_ANSWER_LOST'),
      lastReceive,
      { action: 'fail', reason: 'SUBMIT_ANSWER_LOST', cooldownMs: 5_000 },
    ],
    [
      'a transient error below the receive limit is retried, releasing the claim',
      new TransientError('ERROR_SERVER_ERROR'),
      { ...ctx, receiveCount: 2 },
      { action: 'retry', release: true, reason: 'ERROR_SERVER_ERROR' },
    ],
    [
      'a transient error at the receive limit fails the record TRANSIENT_EXHAUSTED',
      new TransientError('ERROR_SERVER_ERROR'),
      lastReceive,
      { action: 'fail', reason: 'TRANSIENT_EXHAUSTED' },
    ],
    [
      'unsolvable (after its resubmission) fails the record',
      new UnsolvableError('ERROR_CAPTCHA_UNSOLVABLE'),
      ctx,
      { action: 'fail', reason: 'ERROR_CAPTCHA_UNSOLVABLE' },
    ],
    [
      'a bad task fails the record with its code',
      new BadTaskError('ERROR_GOOGLEKEY'),
      ctx,
      { action: 'fail', reason: 'ERROR_GOOGLEKEY' },
    ],
    [
      'another CaptchaAI error fails the record',
      new CaptchaError('ERROR_ODD'),
      ctx,
      { action: 'fail', reason: 'ERROR_ODD' },
    ],
    [
      'a target error fails the record with its code',
      new TargetError('TOKEN_EXPIRED', 'old'),
      ctx,
      { action: 'fail', reason: 'TOKEN_EXPIRED' },
    ],
    [
      'an unknown error below the receive limit is retried keeping the lease',
      new Error('ProvisionedThroughputExceeded'),
      ctx,
      { action: 'retry', release: false, reason: 'INTERNAL_ERROR' },
    ],
    [
      'an unknown error at the receive limit fails the record INTERNAL_ERROR',
      new Error('ProvisionedThroughputExceeded'),
      lastReceive,
      { action: 'fail', reason: 'INTERNAL_ERROR' },
    ],
    [
      'any error once the invocation is ending is retried keeping the lease (ABORTED)',
      new TargetError('TARGET_TIMEOUT', 'aborted'),
      ending,
      { action: 'retry', release: false, reason: 'ABORTED' },
    ],
    [
      'even a stop-class error is left alone once the invocation is ending',
      new StopClassError('IP_BANNED', 'banned'),
      ending,
      { action: 'retry', release: false, reason: 'ABORTED' },
    ],
  ])('%s', (_name, error, context, decision) => {
    expect(decideOutcome(error, context)).toEqual(decision);
  });
});

describe('decideClaimConflict: the claim was refused', () => {
  it.each([
    [
      'a finished record drops the duplicate message',
      'finished',
      { action: 'drop', reason: 'ALREADY_FINISHED' },
    ],
    [
      'a record leased elsewhere is retried without touching that lease',
      'leased',
      { action: 'retry', release: false, reason: 'LEASED_ELSEWHERE' },
    ],
  ] as const)('%s', (_name, why, decision) => {
    expect(decideClaimConflict(why)).toEqual(decision);
  });

  it('a copy of a record another message holds is dropped on its receive limit, retried before it', () => {
    const copy = { messageId: 'copy', leaseOwner: claimOwner('holder', 1, 'r'), transientReceiveLimit: 3 };
    expect(decideClaimConflict('leased', 1_700_000_060_000, { ...copy, receiveCount: 3 })).toEqual({
      action: 'drop',
      reason: 'HELD_BY_ANOTHER_MESSAGE',
    });
    expect(decideClaimConflict('leased', 1_700_000_060_000, { ...copy, receiveCount: 2 })).toMatchObject({
      action: 'retry',
      reason: 'LEASED_ELSEWHERE',
    });
  });

  it('another receive of the same message is retried on its receive limit, never dropped (its delete would delete the holder)', () => {
    expect(
      decideClaimConflict('leased', 1_700_000_060_000, {
        messageId: 'holder',
        leaseOwner: claimOwner('holder', 4, 'r'),
        receiveCount: 5,
        transientReceiveLimit: 3,
      }),
    ).toMatchObject({ action: 'retry', reason: 'LEASED_ELSEWHERE' });
  });

  it('a record leased elsewhere is retried not before that lease expires', () => {
    expect(decideClaimConflict('leased', 1_700_000_060_000)).toEqual({
      action: 'retry',
      release: false,
      reason: 'LEASED_ELSEWHERE',
      notBefore: 1_700_000_060_000,
    });
  });
});

describe('decideTargetResponse: the form POST answered', () => {
  it.each([
    [200, { status: 'submitted', reason: 'OK' }],
    [204, { status: 'submitted', reason: 'OK' }],
    [302, { status: 'submitted', reason: 'OK' }],
    [399, { status: 'submitted', reason: 'OK' }],
    [199, { status: 'failed', reason: 'TARGET_HTTP_199' }],
    [400, { status: 'failed', reason: 'TARGET_HTTP_400' }],
    [403, { status: 'failed', reason: 'TARGET_HTTP_403' }],
    [500, { status: 'failed', reason: 'TARGET_HTTP_500' }],
  ])('HTTP %i → %o', (httpStatus, outcome) => {
    expect(decideTargetResponse(httpStatus)).toEqual(outcome);
  });
});

describe('decideCrash: the record handling itself threw; the row read after it decides', () => {
  const lease = 5_000_000;
  const claimed = (extra: Partial<OutcomeRow> = {}): OutcomeRow => ({
    record_key: 'r',
    status: 'in_progress',
    lease_owner: 'me',
    lease_expires_at: lease,
    ...extra,
  });
  const first = {
    receiveCount: 1,
    transientReceiveLimit: 3,
    owner: 'me',
    now: 1_000_000,
    retryDelayMs: 30_000,
  };
  const last = { ...first, receiveCount: 3 };
  it.each<[string, Parameters<typeof decideCrash>[0], RecordDecision]>([
    [
      'our claim without a task or posting marker is released, so the redelivery claims at once',
      { ...first, row: claimed() },
      { action: 'retry', release: true, reason: 'INTERNAL_ERROR' },
    ],
    [
      'our claim with a task marker keeps its lease, and the message comes back when it ends',
      { ...first, row: claimed({ task_id: 't1', task_submitted_at: 1 }) },
      { action: 'retry', release: false, reason: 'INTERNAL_ERROR', notBefore: lease },
    ],
    [
      'our claim with a posting marker ends OUTCOME_UNKNOWN now',
      { ...first, row: claimed({ posting_at: 2 }) },
      { action: 'fail', reason: 'OUTCOME_UNKNOWN' },
    ],
    [
      'a final row (the write landed, its answer lost) drops the message',
      { ...first, row: claimed({ status: 'submitted' }) },
      { action: 'drop', reason: 'ALREADY_FINISHED' },
    ],
    [
      "another owner's lease is waited out",
      { ...first, row: claimed({ lease_owner: 'other' }) },
      { action: 'retry', release: false, reason: 'INTERNAL_ERROR', notBefore: lease },
    ],
    [
      'a row that could not be read: retried after the retry delay doubled per receive so far',
      { ...first, receiveCount: 2, rowUnknown: true },
      { action: 'retry', release: false, reason: 'INTERNAL_ERROR', notBefore: 1_000_000 + 4 * 30_000 },
    ],
    [
      'on the last receive our claim ends failed INTERNAL_ERROR',
      { ...last, row: claimed({ task_id: 't1', task_submitted_at: 1 }) },
      { action: 'fail', reason: 'INTERNAL_ERROR' },
    ],
    [
      'on the last receive without a claim of ours a DLQ copy carries the reason',
      { ...last, rowUnknown: true },
      {
        action: 'dlq',
        errorCode: 'INTERNAL_ERROR',
        reason: "the record's handling failed on its last allowed receive (3) and its row could not be read",
      },
    ],
  ])('%s', (_name, crash, decision) => {
    expect(decideCrash(crash)).toEqual(decision);
  });
});

describe('decidePriorPhase: what an earlier claim left on the row', () => {
  const t = { now: 1_000_000, deadlineMs: 6_000, cooldownMs: 2_000 };
  const row = (extra: Partial<OutcomeRow>): OutcomeRow => ({
    record_key: 'r',
    status: 'in_progress',
    ...extra,
  });
  it.each<[string, OutcomeRow | undefined, PriorPhase]>([
    ['no earlier row: start afresh', undefined, { kind: 'fresh' }],
    ['an earlier claim without a task: start afresh', row({}), { kind: 'fresh' }],
    [
      'a posting marker without a final status: failed OUTCOME_UNKNOWN, never posted again',
      row({ task_id: '1', task_submitted_at: t.now - 1_000, posting_at: t.now - 500 }),
      { kind: 'posted', decision: { action: 'fail', reason: 'OUTCOME_UNKNOWN' } },
    ],
    [
      'a task within its deadline: resumed, not submitted again',
      row({ task_id: '7', task_submitted_at: t.now - 5_999 }),
      { kind: 'resume', taskId: '7', submittedAt: t.now - 5_999 },
    ],
    [
      'a task past its deadline but within the cool-down: hold the slot until it must be finished',
      row({ task_id: '7', task_submitted_at: t.now - 6_000 }),
      { kind: 'wait', until: t.now + 2_000 },
    ],
    [
      'a task past its deadline and the cool-down: start afresh',
      row({ task_id: '7', task_submitted_at: t.now - 8_000 }),
      { kind: 'fresh' },
    ],
    [
      'a stopped row with a task within its deadline: resumed',
      row({ status: 'stopped', task_id: '8', task_submitted_at: t.now - 1 }),
      { kind: 'resume', taskId: '8', submittedAt: t.now - 1 },
    ],
  ])('%s', (_what, previous, phase) => {
    expect(decidePriorPhase(previous, t)).toEqual(phase);
  });
});

describe('decideFinalWriteLost: the final write threw on every try', () => {
  it('retries FINAL_WRITE_FAILED keeping the lease, not before it expires', () => {
    expect(decideFinalWriteLost(1_700_000_060_000)).toEqual({
      action: 'retry',
      release: false,
      reason: 'FINAL_WRITE_FAILED',
      notBefore: 1_700_000_060_000,
    });
  });
});

describe('resolver hiccups and invalid redeliveries', () => {
  const ctx: DecisionContext = { receiveCount: 1, transientReceiveLimit: 3, cooldownMs: 0 };
  const hiccup = new InvalidJobError('pageurl: host "a" could not be resolved now (EAI_AGAIN)', 'r1', {
    cause: new DnsUnavailableError('DNS_UNAVAILABLE', 'host "a" could not be resolved now (EAI_AGAIN)'),
  });
  it('a host check that met DNS_UNAVAILABLE is retried below the receive limit', () => {
    expect(decideOutcome(hiccup, ctx)).toEqual({
      action: 'retry',
      release: false,
      reason: 'DNS_UNAVAILABLE',
    });
  });
  it('at the receive limit it is rejected with its reason', () => {
    expect(decideOutcome(hiccup, { ...ctx, receiveCount: 3 })).toMatchObject({
      action: 'reject',
      recordKey: 'r1',
    });
  });
  const pageHiccup = new DnsUnavailableError(
    'DNS_UNAVAILABLE',
    'host "a" could not be resolved now (ESERVFAIL)',
  );
  it('a page load that met DNS_UNAVAILABLE is released and retried below the receive limit, not failed', () => {
    expect(decideOutcome(pageHiccup, ctx)).toEqual({
      action: 'retry',
      release: true,
      reason: 'DNS_UNAVAILABLE',
    });
    expect(decideOutcome(pageHiccup, { ...ctx, receiveCount: 3 })).toEqual({
      action: 'fail',
      reason: 'DNS_UNAVAILABLE',
    });
  });
  it('a DNS_UNAVAILABLE after the posting marker is final: the record is never worked again', () => {
    expect(decideOutcome(pageHiccup, { ...ctx, posting: true })).toEqual({
      action: 'fail',
      reason: 'DNS_UNAVAILABLE',
    });
  });
  it.each<[string, OutcomeRow | undefined, RecordDecision]>([
    [
      'a final row: drop the duplicate',
      { record_key: 'r', status: 'failed' },
      { action: 'drop', reason: 'ALREADY_FINISHED' },
    ],
    [
      'an in_progress row: retry, not before its lease expires',
      { record_key: 'r', status: 'in_progress', lease_expires_at: 42 },
      { action: 'retry', release: false, reason: 'REJECT_CONFLICT', notBefore: 42 },
    ],
    [
      'a stopped row: retry',
      { record_key: 'r', status: 'stopped' },
      { action: 'retry', release: false, reason: 'REJECT_CONFLICT' },
    ],
  ])('a rejected write meeting %s', (_what, row, decision) => {
    expect(decideRejectConflict(row)).toEqual(decision);
  });
});

describe('decideStopMetElsewhere', () => {
  const stop = { action: 'stop', code: 'ERROR_KEY_DOES_NOT_EXIST', reason: 'refused' } as const;
  it('gives the record back with its claim released at once when the stop came at in.php (no task exists)', () => {
    expect(decideStopMetElsewhere(stop, 180_000)).toEqual({
      action: 'retry',
      release: true,
      reason: 'STOPPED_BY_ANOTHER_LANE',
    });
  });
  it('keeps the slot until the task must be finished, then releases the claim, when the stop came at res.php', () => {
    expect(decideStopMetElsewhere({ ...stop, taskId: '71' }, 180_000)).toEqual({
      action: 'retry',
      release: true,
      reason: 'STOPPED_BY_ANOTHER_LANE',
      cooldownMs: 180_000,
    });
  });
  it("ends in the DLQ with STOPPED_BY_ANOTHER_LANE on the last allowed receive, never `stopped`: the stop was another record's", () => {
    expect(decideStopMetElsewhere({ ...stop, lastReceive: true }, 180_000)).toMatchObject({
      action: 'dlq',
      errorCode: 'STOPPED_BY_ANOTHER_LANE',
      release: true,
    });
    expect(decideStopMetElsewhere({ ...stop, taskId: '7', lastReceive: true }, 180_000)).toMatchObject({
      action: 'dlq',
      cooldownMs: 180_000,
    });
  });
});

describe('decidePauseFailed', () => {
  const stop = { action: 'stop', code: 'ERROR_KEY_DOES_NOT_EXIST', reason: 'refused' } as const;
  it('releases the claim when the stop came at in.php (no task exists)', () => {
    expect(decidePauseFailed(stop, 9_000)).toEqual({
      action: 'retry',
      release: true,
      reason: 'PAUSE_FAILED',
    });
  });
  it('keeps the claim and its task marker until the lease expires when the stop came at res.php', () => {
    expect(decidePauseFailed({ ...stop, taskId: '71' }, 9_000)).toEqual({
      action: 'retry',
      release: false,
      reason: 'PAUSE_FAILED',
      notBefore: 9_000,
    });
  });
  it('records the stop on the last receive instead of leaving the message to a redrive without a reason', () => {
    expect(decidePauseFailed({ ...stop, lastReceive: true }, 9_000)).toEqual({ action: 'record-stop' });
  });
});

describe('the batch cancel asked before an in.php', () => {
  const cancel = { batchId: 'b', cancelledAt: '2026-12-06T00:00:00.000Z', reason: 'wrong form' };
  it('a cancelled batch ends the record cancelled, nothing wasted', () => {
    expect(decideOutcome(new BatchCancelledError(cancel), ctx)).toEqual({
      action: 'cancel',
      reason: 'BATCH_CANCELLED: wrong form',
      wasted: false,
    });
  });
  it('an unknown cancel releases the claim and retries; on the last receive it fails CANCEL_UNKNOWN', () => {
    const unknown = new CancelUnknownError('b');
    expect(decideOutcome(unknown, ctx)).toEqual({ action: 'retry', release: true, reason: 'CANCEL_UNKNOWN' });
    expect(decideOutcome(unknown, lastReceive)).toEqual({ action: 'fail', reason: 'CANCEL_UNKNOWN' });
    expect(decideOutcome(unknown, ending)).toMatchObject({
      action: 'retry',
      release: false,
      reason: 'ABORTED',
    });
  });
});
