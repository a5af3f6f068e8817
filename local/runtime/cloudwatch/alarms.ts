import type { EmulatorCloudWatch, MetricAlarm, Statistic } from './client.js';

/**
 * The emulator's alarm evaluation. moto stores metric alarms and their metrics (PutMetricAlarm,
 * PutMetricData, GetMetricStatistics, SetAlarmState) but never evaluates an alarm: its states
 * change only when told to. This evaluator tells it, as CloudWatch would: for each metric alarm
 * on one metric, the statistic of its last EvaluationPeriods periods against its threshold,
 * DatapointsToAlarm of them breaching for ALARM, missing periods as TreatMissingData says, and
 * SetAlarmState when the state changes. Hand-written: no library evaluates CloudWatch alarms
 * against an emulator (moto, LocalStack's community edition and the SDKs all leave it to the
 * service), and the rule is a few lines.
 *
 * Where it differs from CloudWatch:
 * - the periods are a trailing window ending now, not periods aligned to the clock (CloudWatch's
 *   5-minute periods start at :00, :05, …, and it evaluates once a minute): a datapoint counts for
 *   exactly EvaluationPeriods × Period after it was put, the current period's partial sum included;
 * - with TreatMissingData `missing` or `ignore`, only the present datapoints of those periods are
 *   counted (CloudWatch looks further back for more), all missing is INSUFFICIENT_DATA (`missing`)
 *   or the state kept (`ignore`);
 * - alarms on a math expression (`Metrics`), a percentile (ExtendedStatistic) or an anomaly band
 *   are left as they are, and it says once which it skipped.
 */

export type AlarmState = MetricAlarm['StateValue'];

/** The fields of a metric alarm that decide its state from its datapoints. */
export type AlarmRule = Pick<
  MetricAlarm,
  'ComparisonOperator' | 'Threshold' | 'EvaluationPeriods' | 'DatapointsToAlarm' | 'TreatMissingData'
>;

const COMPARE: Record<string, (value: number, threshold: number) => boolean> = {
  GreaterThanOrEqualToThreshold: (v, t) => v >= t,
  GreaterThanThreshold: (v, t) => v > t,
  LessThanThreshold: (v, t) => v < t,
  LessThanOrEqualToThreshold: (v, t) => v <= t,
};
const STATISTICS: ReadonlySet<string> = new Set<Statistic>([
  'SampleCount',
  'Average',
  'Sum',
  'Minimum',
  'Maximum',
]);

export interface AlarmDecision {
  state: AlarmState;
  /** Periods counted as breaching (missing ones included under `breaching`). */
  breaching: number;
  /** DatapointsToAlarm (EvaluationPeriods when unset). */
  needed: number;
}

/**
 * The state `values` put an alarm in: one value per period, oldest first, undefined where the
 * period had no datapoint. Undefined: keep the state it has (`ignore` with no datapoint at all).
 */
export function decideAlarmState(rule: AlarmRule, values: (number | undefined)[]): AlarmDecision | undefined {
  const compare = COMPARE[rule.ComparisonOperator ?? ''];
  if (!compare || rule.Threshold === undefined) throw new Error(`not an alarm this evaluator decides`);
  const treat = rule.TreatMissingData ?? 'missing';
  const needed = rule.DatapointsToAlarm ?? rule.EvaluationPeriods ?? values.length;
  const present = values.filter((v) => v !== undefined);
  if (present.length === 0 && (treat === 'missing' || treat === 'ignore')) {
    return treat === 'ignore' ? undefined : { state: 'INSUFFICIENT_DATA', breaching: 0, needed };
  }
  const threshold = rule.Threshold;
  const breaching = values.filter((v) =>
    v === undefined ? treat === 'breaching' : compare(v, threshold),
  ).length;
  return { state: breaching >= needed ? 'ALARM' : 'OK', breaching, needed };
}

/** Why this evaluator leaves an alarm alone, or undefined when it evaluates it. */
export function notEvaluated(alarm: MetricAlarm): string | undefined {
  if (alarm.Metrics?.length) return 'its metric is a math expression (Metrics)';
  if (!alarm.Namespace || !alarm.MetricName) return 'it names no single metric';
  if (alarm.ExtendedStatistic) return `a percentile statistic (${alarm.ExtendedStatistic})`;
  if (!STATISTICS.has(alarm.Statistic ?? '')) return `statistic ${alarm.Statistic}`;
  if (!COMPARE[alarm.ComparisonOperator ?? '']) return `comparison ${alarm.ComparisonOperator}`;
  if (!alarm.Period || !alarm.EvaluationPeriods || alarm.Threshold === undefined)
    return 'no period, evaluation periods or threshold';
  return undefined;
}

export interface AlarmChange {
  alarmName: string;
  from: AlarmState;
  to: AlarmState;
  reason: string;
}

export class AlarmEvaluator {
  /** Alarms it has said it skips (each is named once). */
  private readonly skipped = new Set<string>();

  constructor(
    private readonly cloudwatch: EmulatorCloudWatch,
    /** runtime.log: skipped alarms and state changes go there. */
    private readonly log: (line: string) => void,
  ) {}

  /** Evaluates every metric alarm once, at `now` (epoch ms); returns the state changes it made. */
  async evaluate(now = Date.now()): Promise<AlarmChange[]> {
    const changes: AlarmChange[] = [];
    for (const alarm of await this.cloudwatch.metricAlarms()) {
      const why = notEvaluated(alarm);
      if (why) {
        if (!this.skipped.has(alarm.AlarmName)) this.log(`alarm ${alarm.AlarmName} not evaluated: ${why}`);
        this.skipped.add(alarm.AlarmName);
        continue;
      }
      const values = await this.periodValues(alarm, now);
      const decision = decideAlarmState(alarm, values);
      if (!decision || decision.state === alarm.StateValue) continue;
      const shown = values.map((v) => (v === undefined ? '-' : String(v))).join(', ');
      const reason = `local evaluator: ${decision.breaching} of the last ${values.length} periods [${shown}] ${alarm.ComparisonOperator} ${alarm.Threshold} (${decision.needed} needed for ALARM)`;
      await this.cloudwatch.setAlarmState(alarm.AlarmName, decision.state, reason);
      this.log(`alarm ${alarm.AlarmName}: ${alarm.StateValue} -> ${decision.state} (${reason})`);
      changes.push({ alarmName: alarm.AlarmName, from: alarm.StateValue, to: decision.state, reason });
    }
    return changes;
  }

  /**
   * The alarm's statistic in each of its last EvaluationPeriods periods, oldest first, one
   * GetMetricStatistics per period: moto's answer buckets from a range's first datapoint, not
   * from its start, so only a range of one period gives that period's value. The window ends at
   * the next whole second (moto compares whole seconds), so what was put just now counts.
   */
  private async periodValues(alarm: MetricAlarm, now: number): Promise<(number | undefined)[]> {
    const period = alarm.Period ?? 60;
    // notEvaluated has checked it is one of these.
    const statistic = alarm.Statistic as Statistic;
    const end = Math.floor(now / 1000) + 1;
    const count = alarm.EvaluationPeriods ?? 1;
    const metric = {
      Namespace: alarm.Namespace ?? '',
      MetricName: alarm.MetricName ?? '',
      Dimensions: alarm.Dimensions ?? [],
    };
    return Promise.all(
      Array.from({ length: count }, async (_, i) => {
        const start = end - (count - i) * period;
        const points = await this.cloudwatch.statistics(metric, {
          start,
          end: start + period,
          period,
          statistics: [statistic],
        });
        return points[0]?.[statistic];
      }),
    );
  }
}
