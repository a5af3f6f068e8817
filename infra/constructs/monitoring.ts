import { Duration } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as actions from 'aws-cdk-lib/aws-cloudwatch-actions';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import * as sns from 'aws-cdk-lib/aws-sns';
import type * as sqs from 'aws-cdk-lib/aws-sqs';
import { Construct } from 'constructs';
import { METRICS_NAMESPACE } from './worker.js';

/** The worker's outcome counter (dimension `status`: outcome statuses, `cancelled` included, plus `dlq`, `lost_claim`). */
export const OUTCOMES_METRIC = 'Outcomes';

export interface MonitoringProps {
  readonly stackName: string;
  readonly queue: sqs.IQueue;
  readonly dlq: sqs.IQueue;
  readonly worker: lambda.IFunction;
  readonly adjuster: lambda.IFunction;
  /** Alarm threshold for the oldest job's age. */
  readonly oldestMessageAlarmSeconds: number;
  /** SNS topic the alarms notify. @default none */
  readonly alarmTopicArn?: string;
  /** The most lanes per worker invocation: above 1 the in-flight figure counts lanes. @default 1 */
  readonly lanes?: number;
  /** The outcome stream's publisher and failure queue (absent with `outcomeStream=false`). */
  readonly outcomeStream?: {
    readonly publisher: lambda.IFunction;
    readonly failures: sqs.IQueue;
    /** Alarm when the stream's oldest unpublished record is older than this. @default 300 */
    readonly iteratorAgeAlarmSeconds?: number;
  };
}

/** Alarms on the outcome stream: its publisher's lag and errors, and records it gave up on. */
export interface OutcomeStreamAlarms {
  readonly iteratorAge: cloudwatch.Alarm;
  readonly publisherErrors: cloudwatch.Alarm;
  readonly unpublished: cloudwatch.Alarm;
}

/**
 * Alarms and the dashboard. Nothing here is referenced by another resource: moto's
 * CloudFormation (the local stack) has no alarms of its own; its launcher puts them
 * (local/emulator/stack_alarms.py) with a Ref but no GetAtt, and skips composite alarms, and a
 * GetAtt to an alarm fails the deploy — so no alarm widgets and no composite alarms.
 */
export class Monitoring extends Construct {
  readonly dlqNotEmpty: cloudwatch.Alarm;
  readonly pipelinePaused: cloudwatch.Alarm;
  readonly oldestMessageAge: cloudwatch.Alarm;
  readonly adjusterErrors: cloudwatch.Alarm;
  /** Worker invocations that crashed, ran out of memory or timed out (Lambda counts each as an Error). */
  readonly workerErrors: cloudwatch.Alarm;
  /** Undefined without the outcome stream. */
  readonly outcomeStream: OutcomeStreamAlarms | undefined;
  readonly dashboard: cloudwatch.Dashboard;

  constructor(scope: Construct, id: string, props: MonitoringProps) {
    super(scope, id);
    const m = monitoringMetrics(props);
    const alarm = (alarmId: string, o: Omit<cloudwatch.AlarmProps, 'treatMissingData'>) =>
      new cloudwatch.Alarm(this, alarmId, {
        ...o,
        treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      });
    const atLeastOne = {
      threshold: 1,
      evaluationPeriods: 1,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
    };
    this.dlqNotEmpty = alarm('DlqNotEmpty', {
      alarmName: `${props.stackName}-dlq-not-empty`,
      alarmDescription:
        'Jobs reached the DLQ (stop-class failures or messages SQS gave up on). Read their error_code/reason attributes; fix the cause, then `threadgate redrive`.',
      metric: m.dlqDepth,
      ...atLeastOne,
    });
    this.pipelinePaused = alarm('PipelinePaused', {
      alarmName: `${props.stackName}-pipeline-paused`,
      alarmDescription:
        'The pipeline is paused (stop-class CaptchaAI error: bad key, IP ban, no active plan). `threadgate status` shows why; fix it, then `threadgate resume`.',
      metric: m.paused,
      ...atLeastOne,
    });
    this.oldestMessageAge = alarm('OldestMessageAge', {
      alarmName: `${props.stackName}-oldest-job-age`,
      alarmDescription: `A job has waited over ${props.oldestMessageAlarmSeconds} s in the queue: the pipeline is paused, the cap is too small for the load, or the worker is failing.`,
      metric: m.oldestAge,
      threshold: props.oldestMessageAlarmSeconds,
      evaluationPeriods: 5,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
    });
    this.adjusterErrors = alarm('AdjusterErrors', {
      alarmName: `${props.stackName}-cap-adjuster-errors`,
      alarmDescription:
        'The cap adjuster failed: the cap no longer follows the plan. Read the cap adjuster log group for the error.',
      metric: m.adjusterErrors,
      ...atLeastOne,
    });
    // Errors only: the worker reports a record's failure as a batch item failure, so an Error is an
    // invocation that died. Throttles are left out: the adjuster keeps reserved concurrency at or
    // above the mapping maximum, so the poller is not throttled; a batch that is goes back to the
    // queue with one more receive, which the DLQ and oldest-job alarms catch if it repeats.
    this.workerErrors = alarm('WorkerErrors', {
      alarmName: `${props.stackName}-worker-errors`,
      alarmDescription:
        "Worker invocations failed: a crash, out of memory or a timeout. Their records come back after the jobs queue's visibility timeout. Read the worker's log group.",
      metric: props.worker.metricErrors({ period: Duration.minutes(5), statistic: 'Sum' }),
      ...atLeastOne,
    });
    this.outcomeStream = props.outcomeStream
      ? outcomeStreamAlarms(this, props.stackName, props.outcomeStream)
      : undefined;
    if (props.alarmTopicArn) {
      const topic = sns.Topic.fromTopicArn(this, 'AlarmTopic', props.alarmTopicArn);
      for (const a of [
        this.dlqNotEmpty,
        this.pipelinePaused,
        this.oldestMessageAge,
        this.adjusterErrors,
        this.workerErrors,
        ...(this.outcomeStream ? Object.values(this.outcomeStream) : []),
      ]) {
        a.addAlarmAction(new actions.SnsAction(topic));
      }
    }
    this.dashboard = new cloudwatch.Dashboard(this, 'Dashboard', {
      dashboardName: props.stackName,
      defaultInterval: Duration.hours(3),
    });
    addDashboardWidgets(this.dashboard, props, m);
  }
}

type MonitoringMetrics = ReturnType<typeof monitoringMetrics>;

/** Every metric the alarms and the dashboard read. */
function monitoringMetrics(props: MonitoringProps) {
  const minute = Duration.minutes(1);
  // Powertools adds the service name (the stack name) as a dimension to every metric.
  const custom = (metricName: string, statistic: string, extra: Record<string, string> = {}) =>
    new cloudwatch.Metric({
      namespace: METRICS_NAMESPACE,
      metricName,
      dimensionsMap: { service: props.stackName, ...extra },
      statistic,
      period: minute,
    });
  const byDimension = (metricName: string, dimension: string, label: string) =>
    new cloudwatch.MathExpression({
      expression: `SEARCH('{${METRICS_NAMESPACE},service,${dimension}} MetricName="${metricName}" service="${props.stackName}"', 'Sum', 60)`,
      label,
      usingMetrics: {},
      period: minute,
    });
  const maxPerMinute = { period: minute, statistic: 'Maximum' };
  return {
    minute,
    custom,
    byDimension,
    dlqDepth: props.dlq.metricApproximateNumberOfMessagesVisible(maxPerMinute),
    queueDepth: props.queue.metricApproximateNumberOfMessagesVisible(maxPerMinute),
    queueInFlight: props.queue.metricApproximateNumberOfMessagesNotVisible(maxPerMinute),
    oldestAge: props.queue.metricApproximateAgeOfOldestMessage(maxPerMinute),
    paused: custom('PipelinePaused', 'Maximum'),
    adjusterErrors: props.adjuster.metricErrors({ period: Duration.minutes(5), statistic: 'Sum' }),
    inFlight: inFlightMetric(props, custom, minute),
  };
}

/**
 * In flight: the worker's concurrent executions; with lanes, each invocation runs up to L lanes, so
 * executions × the L the adjuster publishes (an upper bound: some lanes of an invocation may idle).
 */
function inFlightMetric(
  props: MonitoringProps,
  custom: (metricName: string, statistic: string) => cloudwatch.Metric,
  period: Duration,
): cloudwatch.IMetric {
  const executions = new cloudwatch.Metric({
    namespace: 'AWS/Lambda',
    metricName: 'ConcurrentExecutions',
    dimensionsMap: { FunctionName: props.worker.functionName },
    statistic: 'Maximum',
    period,
    label: 'In flight (worker concurrent executions)',
  });
  if (!props.lanes || props.lanes <= 1) return executions;
  return new cloudwatch.MathExpression({
    expression: 'executions * FILL(lanes, REPEAT)',
    usingMetrics: { executions, lanes: custom('LanesPerInvocation', 'Maximum') },
    label: 'In flight (lanes: worker concurrent executions × lanes per invocation, at most)',
    period,
  });
}

/** The dashboard's rows: cap and in flight, queues, outcomes, solves, pipeline state, errors, stream. */
function addDashboardWidgets(
  dashboard: cloudwatch.Dashboard,
  props: MonitoringProps,
  m: MonitoringMetrics,
): void {
  const { custom, byDimension, minute } = m;
  dashboard.addWidgets(
    new cloudwatch.GraphWidget({
      title: 'Cap and in flight',
      width: 12,
      left: [
        m.inFlight,
        custom('Cap', 'Maximum', {}).with({ label: 'Cap' }),
        custom('PlanThreads', 'Maximum').with({ label: 'Plan threads' }),
        custom('WorkingThreads', 'Maximum').with({ label: 'Working threads (all clients of the key)' }),
        custom('ExternalThreadsBusy', 'Maximum').with({ label: 'Busy outside this pipeline (estimate)' }),
        custom('CapClampedByMax', 'Maximum').with({ label: 'Idle: plan above maxCap (threads)' }),
      ],
    }),
    new cloudwatch.GraphWidget({
      title: 'Queues',
      width: 12,
      left: [
        m.queueDepth.with({ label: 'Queued jobs' }),
        m.queueInFlight.with({ label: 'Jobs being worked on' }),
        m.dlqDepth.with({ label: 'DLQ depth' }),
      ],
      right: [m.oldestAge.with({ label: 'Oldest job age (s)' })],
    }),
  );
  dashboard.addWidgets(
    new cloudwatch.GraphWidget({
      title: 'Outcomes by status',
      width: 12,
      stacked: true,
      // A search: every status the worker reports shows up without listing them here.
      left: [byDimension(OUTCOMES_METRIC, 'status', 'Outcomes by status')],
    }),
    new cloudwatch.GraphWidget({
      title: 'Solves',
      width: 12,
      left: [
        custom('Solves', 'Sum').with({ label: 'Solves' }),
        byDimension('ClaimConflicts', 'reason', 'Claim conflicts (duplicates skipped)'),
        custom('StopEvents', 'Sum').with({ label: 'Stop-class events' }),
        // A record whose batch was cancelled (`threadgate cancel`) after its task was answered is not posted.
        custom('WastedSolves', 'Sum').with({ label: 'Solves of cancelled batches, not posted' }),
      ],
      right: [
        custom('SolveTime', 'Average').with({ label: 'Solve time avg (ms)' }),
        custom('SolveTime', 'p90').with({ label: 'Solve time p90 (ms)' }),
      ],
    }),
  );
  dashboard.addWidgets(
    new cloudwatch.GraphWidget({
      title: 'Pipeline state',
      width: 12,
      left: [
        m.paused.with({ label: 'Paused (1 = yes)' }),
        custom('ReservedConcurrencyFallback', 'Maximum').with({
          label: 'Reserved concurrency fallback (mapping maximum only)',
        }),
      ],
    }),
    new cloudwatch.GraphWidget({
      title: 'Worker and adjuster errors',
      width: 12,
      left: [
        props.worker.metricErrors({ period: minute }).with({ label: 'Worker errors' }),
        props.worker.metricThrottles({ period: minute }).with({ label: 'Worker throttles (should stay 0)' }),
        m.adjusterErrors.with({ label: 'Adjuster errors' }),
      ],
    }),
  );
  if (props.outcomeStream) {
    const { publisher, failures } = props.outcomeStream;
    dashboard.addWidgets(
      new cloudwatch.GraphWidget({
        title: 'Outcome stream',
        width: 12,
        left: [
          publisher.metricErrors({ period: minute }).with({ label: 'Publisher errors' }),
          failures
            .metricApproximateNumberOfMessagesVisible({ period: minute, statistic: 'Maximum' })
            .with({ label: 'Records not published (failure queue)' }),
        ],
        right: [iteratorAgeMetric(publisher).with({ label: 'Iterator age (ms)' })],
      }),
    );
  }
}

/** How far behind the stream the publisher is: the age of the newest record it was handed. */
function iteratorAgeMetric(publisher: lambda.IFunction): cloudwatch.Metric {
  return publisher.metric('IteratorAge', { period: Duration.minutes(1), statistic: 'Maximum' });
}

function outcomeStreamAlarms(
  scope: Construct,
  stackName: string,
  o: NonNullable<MonitoringProps['outcomeStream']>,
): OutcomeStreamAlarms {
  const ageSeconds = o.iteratorAgeAlarmSeconds ?? 300;
  const common = {
    evaluationPeriods: 1,
    comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
    treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
  };
  return {
    iteratorAge: new cloudwatch.Alarm(scope, 'OutcomeStreamIteratorAge', {
      ...common,
      alarmName: `${stackName}-outcome-stream-iterator-age`,
      alarmDescription: `Outcomes wait over ${ageSeconds} s to be published: the publisher is failing and retrying a batch, or cannot keep up. Read the outcome publisher's log group.`,
      metric: iteratorAgeMetric(o.publisher),
      threshold: ageSeconds * 1000,
      evaluationPeriods: 3,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
    }),
    publisherErrors: new cloudwatch.Alarm(scope, 'OutcomePublisherErrors', {
      ...common,
      alarmName: `${stackName}-outcome-publisher-errors`,
      alarmDescription:
        "The outcome publisher failed (its batch is retried, split in two, and given up after the mapping's retries). Read the outcome publisher's log group.",
      metric: o.publisher.metricErrors({ period: Duration.minutes(5), statistic: 'Sum' }),
      threshold: 1,
    }),
    unpublished: new cloudwatch.Alarm(scope, 'OutcomesNotPublished', {
      ...common,
      alarmName: `${stackName}-outcomes-not-published`,
      alarmDescription:
        'Outcome stream records were given up on and are in the failure queue (stack output OutcomeFailuresQueueUrl): their outcomes are in the table but not on the outcomes queue. `threadgate status` counts them; docs/outcomes.md says how to publish them again.',
      metric: o.failures.metricApproximateNumberOfMessagesVisible({
        period: Duration.minutes(1),
        statistic: 'Maximum',
      }),
      threshold: 1,
    }),
  };
}
