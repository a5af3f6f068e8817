import { describe, expect, it } from 'vitest';
import { formatLoadSummary, type LoadSummary, loadFailures, planLoad } from '../../../../local/load/plan.js';
import { generatedRecords } from '../../../../local/stack/records.js';

const keyOf = (body: string) => (JSON.parse(body) as { record_key: string }).record_key;

describe('load plan: producers and duplicates', () => {
  it('sends every record once plus 5 % of them a second time, from another producer', () => {
    // Prepare
    const bodies = generatedRecords('http://127.0.0.1:1', 'sitekey', 1000, 'load');
    // Act
    const plan = planLoad(bodies, 4, 0.05);
    // Assess
    const all = plan.streams.flat().map(keyOf);
    expect(plan.streams).toHaveLength(4);
    expect(plan.messages).toBe(1050);
    expect(all).toHaveLength(1050);
    expect(new Set(all).size).toBe(1000);
    expect(plan.duplicatedKeys).toHaveLength(50);
    const counts = new Map<string, number>();
    for (const k of all) counts.set(k, (counts.get(k) ?? 0) + 1);
    expect(
      [...counts]
        .filter(([, n]) => n === 2)
        .map(([k]) => k)
        .sort(),
    ).toEqual([...plan.duplicatedKeys].sort());
    // The two copies of a duplicated record come from two producers.
    for (const key of plan.duplicatedKeys) {
      const holders = plan.streams.filter((s) => s.some((b) => keyOf(b) === key));
      expect(holders).toHaveLength(2);
    }
    // Producers carry about the same share.
    for (const s of plan.streams) expect(s.length).toBeGreaterThanOrEqual(250);
  });

  it('with one producer, no duplicates or all duplicated, still sends each record and its copies', () => {
    const bodies = generatedRecords('http://127.0.0.1:1', 'sitekey', 10, 'one');
    expect(planLoad(bodies, 1, 0).streams).toEqual([bodies]);
    const doubled = planLoad(bodies, 1, 1);
    expect(doubled.messages).toBe(20);
    expect(doubled.streams[0]?.map(keyOf).sort()).toEqual([...bodies, ...bodies].map(keyOf).sort());
  });

  it('refuses a producer count below 1 and a share outside [0, 1]', () => {
    expect(() => planLoad([], 0, 0.05)).toThrow(RangeError);
    expect(() => planLoad([], 2, 1.5)).toThrow(RangeError);
  });
});

function summary(overrides: Partial<LoadSummary> = {}): LoadSummary {
  return {
    records: 100,
    messages: 105,
    duplicates: 5,
    producers: 4,
    cap: 10,
    plan_threads: 10,
    time_scale: 0.1,
    complete: true,
    outcomes: { submitted: 100 },
    unfinished: 0,
    in_php: 100,
    records_solved_twice: 0,
    dlq: 0,
    queue_left: 0,
    max_in_flight: 10,
    zero_balance: 0,
    wall_s: 100,
    run_s: 60,
    records_per_s: 1.7,
    memory: {
      function_memory_mb: 320,
      environments: 10,
      environment_peak_mb: 150,
      environment_peak_heap_used_mb: 80,
      process_peak_rss_mb: 1500,
      process_rss_per_environment_mb: 150,
    },
    log_dir: '/tmp/x',
    ...overrides,
  };
}

describe('load invariants', () => {
  it('passes a run where every invariant held', () => {
    expect(loadFailures(summary())).toEqual([]);
    expect(formatLoadSummary(summary(), [])).toContain('every invariant held');
  });

  it.each([
    ['a record without an outcome', { complete: false, unfinished: 1 }, /1 records have no final outcome/],
    ['a DLQ message', { dlq: 2 }, /2 messages in the DLQ/],
    ['messages left in the queue', { queue_left: 3 }, /3 messages left/],
    [
      'a record solved twice',
      { in_php: 101, records_solved_twice: 1 },
      /101 in.php requests for 100 records/,
    ],
    ['in flight above the cap', { max_in_flight: 11 }, /max in flight 11 above the cap 10/],
    ['a ZERO_BALANCE answer', { zero_balance: 1 }, /1 ERROR_ZERO_BALANCE/],
    [
      'an environment above the function memory',
      { memory: { ...summary().memory, environment_peak_mb: 400 } },
      /environment peaked at ~400 MB/,
    ],
  ] as const)('fails on %s', (_name, overrides, message) => {
    const failures = loadFailures(summary(overrides as Partial<LoadSummary>));
    expect(failures).toHaveLength(1);
    expect(failures[0]).toMatch(message);
    expect(formatLoadSummary(summary(), failures)).toContain('FAILED:');
  });
});
