import seedrandom from 'seedrandom';
import { describe, expect, it } from 'vitest';
import { CHAOS_DEFAULTS, finalWriteFaults, formatChaos, parseRates } from '../../../../local/chaos/plan.js';

describe('chaos plan', () => {
  it('parses rates over the defaults and names a bad one', () => {
    expect(parseRates('lostDrop=0.5, throttle=0')).toEqual({
      ...CHAOS_DEFAULTS.rates,
      lostDrop: 0.5,
      throttle: 0,
    });
    expect(parseRates('')).toEqual(CHAOS_DEFAULTS.rates);
    expect(() => parseRates('lost=0.1')).toThrow(/unknown fault "lost"/);
    expect(() => parseRates('lostDrop=2')).toThrow(/rate of lostDrop must be within/);
    expect(() => parseRates('lostDrop')).toThrow(/rate of lostDrop/);
  });

  it('draws final-write faults for a seeded share of the records, the same for the same seed', () => {
    const keys = Array.from({ length: 1000 }, (_, i) => `k${i}`);
    const rules = finalWriteFaults(keys, 0.1, seedrandom('s'));
    expect(finalWriteFaults(keys, 0.1, seedrandom('s'))).toEqual(rules);
    expect(rules.length).toBeGreaterThan(60);
    expect(rules.length).toBeLessThan(140);
    expect(rules.some((r) => r.times === 0)).toBe(true);
    for (const r of rules) {
      expect(r).toMatchObject({ operation: 'UpdateItem', contains: ['":status":{"S":"submitted"}'] });
      expect(r.times).toBeLessThanOrEqual(6);
    }
    expect(finalWriteFaults(keys, 0, seedrandom('s'))).toEqual([]);
  });

  it('prints the figures and every violation', () => {
    const text = formatChaos({
      seed: 4,
      worker: { worker_memory_mb: 192, lanes: { setting: 4, r: 3, L: 4, lambda_quota_needed: 103 } },
      figures: {
        records: 2,
        maxThreadsHeld: 2,
        cap: 6,
        inPhpTotal: 3,
        inPhpPerRecord: { '1': 1, '2': 1 },
        postsPerRecord: { '1': 2 },
        outcomes: { submitted: 2 },
        failedReasons: {},
        dlq: 0,
        queueLeft: 0,
        lostAnswers: { html502: 1 },
        resPhpPerTask: { tasks: 3, mean: 2.5, max: 4 },
        cancel: { records: 1, outcomes: { cancelled: 1 }, inPhpAfter: 0, postsAfter: 0 },
      },
      faults: {
        lostHtml502: 1,
        lostDrop: 0,
        lostLate: 0,
        postDropped: 0,
        finalWriteFailed: 0,
        finalWriteRules: 0,
        throttled: 0,
        kills: 1,
        timeoutWriteFailed: 12,
        stateThrottled: 5,
        keyRotations: 1,
        resumes: 1,
        redriven: 2,
        poisonedItems: 3,
        cancels: 1,
        cancelReadsFailed: 7,
        cancelReads: 30,
        dnsServfails: 9,
        dnsOutages: 2,
        dlqSendsFailed: 1,
        dlqSends: 4,
        dlqWithoutReason: 0,
      },
      violations: ['more than one form POST: a ×2'],
      elapsedS: 3,
      logDir: '/tmp/x',
    });
    expect(text).toContain('threads held   at most 2 (cap 6)');
    expect(text).toContain('worker         192 MB, lanes 4: r 3 invocations of L 4 lanes');
    expect(text).toContain(
      'failed writes after a timeout 12; state reads throttled 5; key rotations 1 (pauses resumed 1, DLQ redriven 2); poisoned SolveTimes items 3',
    );
    expect(text).toContain('res.php        per task: mean 2.5, max 4 (3 tasks)');
    expect(text).toContain(
      'batch cancels 1; cancel reads failed 7 of 30; DNS SERVFAIL answers 9 (2 outages); DLQ sends failed 1 of 4; DLQ messages without a reason 0',
    );
    expect(text).toContain('cancelled      batch of 1: cancelled: 1; after the cancel: in.php 0, POSTs 0');
    expect(text).toContain('records by in.php count: 1: 1, 2: 1');
    expect(text).toContain('runtime kills 1');
    expect(text).toContain('VIOLATIONS\n  - more than one form POST: a ×2');
  });
});
