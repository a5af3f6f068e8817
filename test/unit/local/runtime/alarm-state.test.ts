import { describe, expect, it } from 'vitest';
import {
  type AlarmRule,
  decideAlarmState,
  notEvaluated,
} from '../../../../local/runtime/cloudwatch/alarms.js';
import type { MetricAlarm } from '../../../../local/runtime/cloudwatch/client.js';

/** The local alarm evaluator's decision (local/runtime/cloudwatch/alarms.ts), on plain datapoints. */

/** The worker-errors alarm's rule: Errors Sum ≥ 1 in 1 of 1 periods, missing data not breaching. */
const WORKER_ERRORS: AlarmRule = {
  ComparisonOperator: 'GreaterThanOrEqualToThreshold',
  Threshold: 1,
  EvaluationPeriods: 1,
  TreatMissingData: 'notBreaching',
};

const state = (rule: AlarmRule, values: (number | undefined)[]) => decideAlarmState(rule, values)?.state;

describe('the local alarm evaluator decides', () => {
  it('each comparison operator against the threshold, equal values included or not', () => {
    const rule = (ComparisonOperator: string): AlarmRule => ({ ...WORKER_ERRORS, ComparisonOperator });
    expect(state(rule('GreaterThanOrEqualToThreshold'), [1])).toBe('ALARM');
    expect(state(rule('GreaterThanOrEqualToThreshold'), [0])).toBe('OK');
    expect(state(rule('GreaterThanThreshold'), [1])).toBe('OK');
    expect(state(rule('GreaterThanThreshold'), [1.5])).toBe('ALARM');
    expect(state(rule('LessThanThreshold'), [1])).toBe('OK');
    expect(state(rule('LessThanThreshold'), [0])).toBe('ALARM');
    expect(state(rule('LessThanOrEqualToThreshold'), [1])).toBe('ALARM');
    expect(state(rule('LessThanOrEqualToThreshold'), [2])).toBe('OK');
  });

  it('ALARM once DatapointsToAlarm of the EvaluationPeriods breach (M of N), OK below it', () => {
    const twoOfFive: AlarmRule = { ...WORKER_ERRORS, EvaluationPeriods: 5, DatapointsToAlarm: 2 };
    expect(decideAlarmState(twoOfFive, [0, 3, 0, 0, 1])).toEqual({ state: 'ALARM', breaching: 2, needed: 2 });
    expect(decideAlarmState(twoOfFive, [0, 3, 0, 0, 0])).toEqual({ state: 'OK', breaching: 1, needed: 2 });
    // Without DatapointsToAlarm every period must breach.
    const fiveOfFive: AlarmRule = { ...WORKER_ERRORS, EvaluationPeriods: 5 };
    expect(state(fiveOfFive, [1, 1, 1, 1, 0])).toBe('OK');
    expect(state(fiveOfFive, [1, 1, 1, 1, 1])).toBe('ALARM');
  });

  it('missing periods as TreatMissingData says', () => {
    const twoOfThree = (TreatMissingData?: string): AlarmRule => ({
      ...WORKER_ERRORS,
      EvaluationPeriods: 3,
      DatapointsToAlarm: 2,
      TreatMissingData,
    });
    const none = [undefined, undefined, undefined];
    // notBreaching: no data is OK (the worker-errors alarm before any error, INSUFFICIENT_DATA → OK).
    expect(state(twoOfThree('notBreaching'), none)).toBe('OK');
    expect(state(twoOfThree('notBreaching'), [undefined, 1, undefined])).toBe('OK');
    // breaching: a missing period counts against the threshold.
    expect(state(twoOfThree('breaching'), [undefined, 1, 0])).toBe('ALARM');
    expect(state(twoOfThree('breaching'), none)).toBe('ALARM');
    // missing (the default): no data at all is INSUFFICIENT_DATA; otherwise the present ones count.
    expect(state(twoOfThree('missing'), none)).toBe('INSUFFICIENT_DATA');
    expect(state(twoOfThree(undefined), none)).toBe('INSUFFICIENT_DATA');
    expect(state(twoOfThree('missing'), [1, undefined, 1])).toBe('ALARM');
    expect(state(twoOfThree('missing'), [1, undefined, 0])).toBe('OK');
    // ignore: no data at all keeps the state the alarm has.
    expect(decideAlarmState(twoOfThree('ignore'), none)).toBeUndefined();
    expect(state(twoOfThree('ignore'), [undefined, 2, 1])).toBe('ALARM');
  });

  it('to leave alone what it cannot evaluate, saying why', () => {
    const base: MetricAlarm = {
      AlarmName: 'a',
      StateValue: 'OK',
      Namespace: 'AWS/Lambda',
      MetricName: 'Errors',
      Statistic: 'Sum',
      Period: 300,
      ...WORKER_ERRORS,
    };
    expect(notEvaluated(base)).toBeUndefined();
    expect(
      notEvaluated({ ...base, MetricName: undefined, Metrics: [{ Id: 'e', Expression: 'm1 * 2' }] }),
    ).toMatch(/math expression/);
    expect(notEvaluated({ ...base, Statistic: undefined, ExtendedStatistic: 'p99' })).toMatch(/percentile/);
    expect(notEvaluated({ ...base, ComparisonOperator: 'LessThanLowerOrGreaterThanUpperThreshold' })).toMatch(
      /comparison/,
    );
  });
});
