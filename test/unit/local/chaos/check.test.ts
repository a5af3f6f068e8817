import { describe, expect, it } from 'vitest';
import { type ChaosEvidence, checkChaos } from '../../../../local/chaos/check.js';
import type { LoggedCaptchaEvent } from '../../../../local/standins/captchaai/wire.js';

let seq = 0;
function ev<T extends object>(e: T): T & { seq: number; t: number } {
  seq += 1;
  return { ...e, seq, t: seq };
}

function clean(): ChaosEvidence {
  seq = 0;
  return {
    keys: ['a', 'b'],
    cap: 2,
    deadlineMs: 1000,
    cooldownMs: 500,
    captcha: [
      ev({ kind: 'in.php', record: 'a', taskId: '1', inFlight: 1 }),
      ev({ kind: 'in.php', record: 'b', taskId: '2', inFlight: 2 }),
      ev({ kind: 'task-end', record: 'a', taskId: '1', state: 'solved', inFlight: 1 }),
      ev({ kind: 'task-end', record: 'b', taskId: '2', state: 'solved', inFlight: 0 }),
    ] as LoggedCaptchaEvent[],
    target: [ev({ kind: 'post', record: 'a', status: 200 }), ev({ kind: 'post', record: 'b', status: 200 })],
    rows: new Map([
      ['a', { status: 'submitted' }],
      ['b', { status: 'submitted' }],
    ]),
    dlqKeys: [],
    queueLeft: 0,
    logText: 'nothing secret here',
    secrets: ['the-api-key-0123456789'],
  };
}

describe('chaos checker', () => {
  it('passes a clean run and reports its figures', () => {
    const { figures, violations } = checkChaos(clean());
    expect(violations).toEqual([]);
    expect(figures).toMatchObject({
      records: 2,
      maxThreadsHeld: 2,
      inPhpTotal: 2,
      inPhpPerRecord: { '1': 2 },
      postsPerRecord: { '1': 2 },
      outcomes: { submitted: 2 },
    });
  });

  it('allows a second in.php after the deadline (plus the cool-down after a lost answer, less the slack) or at once after UNSOLVABLE, not earlier', () => {
    const e = clean();
    e.captcha = [
      { ...ev({ kind: 'in.php', record: 'a', taskId: '1', lost: 'html502', inFlight: 1 }), t: 0 },
      { ...ev({ kind: 'in.php', record: 'b', taskId: '2', inFlight: 2 }), t: 0 },
      { ...ev({ kind: 'task-end', record: 'a', taskId: '1', state: 'solved', inFlight: 1 }), t: 20 },
      { ...ev({ kind: 'task-end', record: 'b', taskId: '2', state: 'unsolvable', inFlight: 0 }), t: 30 },
      { ...ev({ kind: 'in.php', record: 'b', taskId: '4', inFlight: 1 }), t: 31 },
      { ...ev({ kind: 'in.php', record: 'a', taskId: '3', inFlight: 2 }), t: 1480 },
      { ...ev({ kind: 'task-end', record: 'a', taskId: '3', state: 'solved', inFlight: 1 }), t: 1490 },
      { ...ev({ kind: 'task-end', record: 'b', taskId: '4', state: 'solved', inFlight: 0 }), t: 1500 },
    ] as LoggedCaptchaEvent[];
    expect(checkChaos(e)).toMatchObject({
      violations: [],
      figures: { lostAnswers: { html502: 1 }, inPhpPerRecord: { '2': 2 } },
    });
    e.captcha.push({
      ...ev({ kind: 'in.php', record: 'a', error: 'ERROR_ZERO_BALANCE', inFlight: 0 }),
      t: 1780,
    });
    expect(checkChaos(e).violations).toEqual([
      "a record submitted again before its task's deadline: a (300 ms after task 3, 1000 ms needed)",
    ]);
  });

  it('allows a new task at once after the earlier one was answered (a release before the POST), not after an unread end', () => {
    const e = clean();
    e.captcha = [
      { ...ev({ kind: 'in.php', record: 'a', taskId: '1', inFlight: 1 }), t: 0 },
      { ...ev({ kind: 'task-end', record: 'a', taskId: '1', state: 'solved', inFlight: 0 }), t: 10 },
      { ...ev({ kind: 'res.php', record: 'a', taskId: '1', answer: 'OK', inFlight: 0 }), t: 11 },
      { ...ev({ kind: 'in.php', record: 'a', taskId: '2', inFlight: 1 }), t: 20 },
      { ...ev({ kind: 'task-end', record: 'a', taskId: '2', state: 'solved', inFlight: 0 }), t: 30 },
      { ...ev({ kind: 'in.php', record: 'a', taskId: '3', inFlight: 1 }), t: 40 },
      { ...ev({ kind: 'task-end', record: 'a', taskId: '3', state: 'solved', inFlight: 0 }), t: 50 },
      { ...ev({ kind: 'in.php', record: 'b', taskId: '4', inFlight: 1 }), t: 60 },
      { ...ev({ kind: 'task-end', record: 'b', taskId: '4', state: 'solved', inFlight: 0 }), t: 70 },
    ] as LoggedCaptchaEvent[];
    // Task 2's end was never read by the worker: task 3 came too early; task 1's was read.
    expect(checkChaos(e).violations).toEqual([
      "a record submitted again before its task's deadline: a (20 ms after task 2, 1000 ms needed)",
    ]);
  });

  it('names every broken invariant: the cap, overlapping tasks, two POSTs, unended records, DLQ, queue, a leaked secret', () => {
    const e = clean();
    e.captcha.splice(2, 0, ev({ kind: 'in.php', record: 'a', taskId: '9', inFlight: 3 }));
    e.target.push(ev({ kind: 'post', record: 'a', status: 0, reason: 'DROPPED_AFTER_POST' }));
    e.rows.set('b', { status: 'in_progress' });
    e.dlqKeys = ['x'];
    e.queueLeft = 2;
    e.logText = 'oops the-api-key-0123456789';
    const { violations } = checkChaos(e);
    expect(violations).toEqual([
      `tasks holding threads reached 3, above the cap of 2; first at ${new Date(7).toISOString()} on the in.php of a; holding threads: a (task 1, 6 ms, 0 res.php), b (task 2, 5 ms, 0 res.php), a (task 9, 0 ms, 0 res.php)`,
      'a record submitted while its earlier task held a thread: a (task 9 beside 1)',
      "a record submitted again before its task's deadline: a (6 ms after task 1, 1000 ms needed)",
      'more than one form POST: a ×2',
      'records that never ended: b (in_progress)',
      'DLQ not empty: x',
      'jobs queue not empty: 2 messages left',
      '1 secret(s) (the key or a token) found in the logs',
    ]);
  });

  it('a cancelled batch: no in.php after the bound, no POST of a record answered after it, no other record cancelled', () => {
    const e = clean();
    e.keys = ['a', 'b', 'c'];
    e.rows.set('c', { status: 'cancelled' });
    e.captcha = [
      { ...ev({ kind: 'in.php', record: 'a', taskId: '1', inFlight: 1 }), t: 0 },
      { ...ev({ kind: 'in.php', record: 'b', taskId: '2', inFlight: 2 }), t: 0 },
      { ...ev({ kind: 'res.php', record: 'b', taskId: '2', answer: 'OK', inFlight: 2 }), t: 500 },
      { ...ev({ kind: 'task-end', record: 'b', taskId: '2', state: 'solved', inFlight: 1 }), t: 500 },
      { ...ev({ kind: 'res.php', record: 'a', taskId: '1', answer: 'OK', inFlight: 1 }), t: 5_000 },
      { ...ev({ kind: 'task-end', record: 'a', taskId: '1', state: 'solved', inFlight: 0 }), t: 5_000 },
    ] as LoggedCaptchaEvent[];
    e.target = [
      { ...ev({ kind: 'post', record: 'b', status: 200 }), t: 600 },
      { ...ev({ kind: 'post', record: 'a', status: 200 }), t: 5_100 },
    ];
    // b's answer came before the cancel: posted, as it would have been. a and c: the cancelled batch.
    e.cancel = { keys: new Set(['b', 'c']), at: 1_000, boundMs: 1_000 };
    expect(checkChaos(e).violations).toEqual([]);
    expect(checkChaos(e).figures.cancel).toEqual({
      records: 2,
      outcomes: { submitted: 1, cancelled: 1 },
      inPhpAfter: 0,
      postsAfter: 0,
    });
    // a is in the cancelled batch: its answer after the bound must not be posted.
    e.cancel = { keys: new Set(['a', 'c']), at: 1_000, boundMs: 1_000 };
    expect(checkChaos(e).violations).toEqual([
      "a record of the cancelled batch answered after the cancel's bound was posted: a",
    ]);
    // An in.php of the batch well after the bound; a record of another batch cancelled.
    e.captcha.push({ ...ev({ kind: 'in.php', record: 'c', taskId: '3', inFlight: 1 }), t: 4_000 });
    e.cancel = { keys: new Set(['c']), at: 1_000, boundMs: 1_000 };
    e.rows.set('a', { status: 'cancelled' });
    expect(checkChaos(e).violations).toEqual([
      "in.php of the cancelled batch after the cancel's bound: c (3000 ms after the cancel)",
      'records of another batch ended cancelled: a',
    ]);
  });
});
