import { describe, expect, it } from 'vitest';
import { e2eTarget, expectationsFor, expectedKnobs } from './e2e/target.js';

describe('end-to-end target selection', () => {
  it('runs against moto and the local runtime unless THREADGATE_E2E_TARGET says localstack', () => {
    expect(e2eTarget({})).toBe('moto');
    expect(e2eTarget({ THREADGATE_E2E_TARGET: '' })).toBe('moto');
    expect(e2eTarget({ THREADGATE_E2E_TARGET: 'moto' })).toBe('moto');
    expect(e2eTarget({ THREADGATE_E2E_TARGET: 'localstack' })).toBe('localstack');
  });

  it('refuses an unknown target by naming the variable and the allowed values', () => {
    expect(() => e2eTarget({ THREADGATE_E2E_TARGET: 'aws' })).toThrow(
      'THREADGATE_E2E_TARGET: must be "moto" (the default) or "localstack", got "aws"',
    );
  });
});

describe('end-to-end assertions chosen by target', () => {
  it('on moto + the local runtime, checks that in flight follows the cap down and up', () => {
    expect(expectationsFor('moto')).toMatchObject({
      capChange: 'in-flight-follows',
      concurrentInvocations: 'cap',
      capRecords: 200,
    });
  });

  it("on LocalStack (one poller per mapping), checks that the adjuster's values land instead", () => {
    expect(expectationsFor('localstack')).toMatchObject({
      capChange: 'knobs-land',
      concurrentInvocations: 'one',
    });
  });

  it('waits longer for the adjuster on LocalStack, whose scheduler fires rules about once a real minute', () => {
    expect(expectationsFor('localstack').adjusterWaitMs).toBeGreaterThan(60_000);
    expect(expectationsFor('localstack').adjusterWaitMs).toBeGreaterThan(
      expectationsFor('moto').adjusterWaitMs,
    );
  });

  it('expects the reserved concurrency and the mapping maximum both at the cap, and no maximum for a cap of 1', () => {
    expect(expectedKnobs(2)).toEqual({ reservedConcurrency: 2, mappingMaximum: 2 });
    expect(expectedKnobs(10)).toEqual({ reservedConcurrency: 10, mappingMaximum: 10 });
    expect(expectedKnobs(1)).toEqual({ reservedConcurrency: 1, mappingMaximum: undefined });
  });
});
