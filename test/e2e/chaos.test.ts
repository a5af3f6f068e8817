import { describe, expect, it } from 'vitest';
import { formatChaos } from '../../local/chaos/plan.js';
import { runChaos } from '../../local/chaos/run.js';

/**
 * The chaos run's short version (docs/chaos.md has the measured one): records through the local
 * stack with every kind of fault drawn often on the wire, judged by the checker from the
 * stand-ins' own logs. No runtime kill here: a killed runtime's messages come back only after
 * the queue's visibility timeout, a minute; the kills are proven in crash-restart.test.ts.
 */
describe('chaos run, short (local stack)', () => {
  it('30 records under lost in.php answers, dropped POST answers and failing DynamoDB writes: no invariant broken', async () => {
    const result = await runChaos({
      records: 30,
      seed: 6,
      timeScale: 0.01,
      threads: 8,
      reserve: 2,
      rates: {
        lostHtml502: 0.1,
        lostDrop: 0.1,
        lostLate: 0.1,
        postDropped: 0.1,
        finalWriteFails: 0.2,
        throttle: 0.05,
      },
      killMeanS: 0,
      maxKills: 0,
      maxSeconds: 240,
      log: () => undefined,
    });
    // Every kind of fault was drawn and landed.
    const f = result.faults;
    for (const [kind, n] of Object.entries({
      lostHtml502: f.lostHtml502,
      lostDrop: f.lostDrop,
      lostLate: f.lostLate,
      postDropped: f.postDropped,
      finalWriteFailed: f.finalWriteFailed,
      throttled: f.throttled,
    })) {
      expect(n, `${kind} drawn`).toBeGreaterThan(0);
    }
    expect(result.violations, formatChaos(result)).toEqual([]);
  }, 400_000);
});
