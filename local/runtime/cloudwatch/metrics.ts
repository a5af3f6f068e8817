import { errorMessage, type LambdaMetricName } from '../types.js';
import type { EmulatorCloudWatch, MetricDatum } from './client.js';

/**
 * Lambda's own metrics of each function, published to the emulator's CloudWatch as Lambda
 * publishes them to an account's: namespace AWS/Lambda, dimension FunctionName, Invocations
 * (every invocation that ran, failed ones included), Errors (an invocation that failed: the
 * handler threw, its environment's process or thread died, it timed out) and Throttles (a
 * scheduled invocation refused for want of reserved concurrency). Lambda also publishes Errors
 * as 0 beside Invocations, so an alarm on Errors sees datapoints, not missing data, while the
 * function runs cleanly; so does this. moto stores what it is given and computes none of it.
 *
 * Counts are summed per function and published together every FLUSH_MS (Lambda aggregates per
 * minute; an alarm on a 5-minute Sum sees the same total), one PutMetricData for all functions,
 * and once more at `stop`. A failed call never reaches an invocation: it is logged, and its
 * counts are put back and go with the next call.
 */

export const LAMBDA_NAMESPACE = 'AWS/Lambda';
const FLUSH_MS = 5_000;

export class LambdaMetrics {
  /** Counts not published yet: function → metric → count. */
  private pending = new Map<string, Map<LambdaMetricName, number>>();
  private flushing: Promise<void> = Promise.resolve();
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly cloudwatch: EmulatorCloudWatch,
    /** runtime.log: failed publishes go there. */
    private readonly log: (line: string) => void,
  ) {
    this.timer = setInterval(() => void this.flush(), FLUSH_MS);
    this.timer.unref();
  }

  /** One more of `metric` for the function; Invocations also brings an Errors datapoint (0 if none). */
  count(functionName: string, metric: LambdaMetricName): void {
    if (metric === 'Invocations') this.add(functionName, 'Errors', 0);
    this.add(functionName, metric, 1);
  }

  private add(functionName: string, metric: LambdaMetricName, value: number): void {
    let counts = this.pending.get(functionName);
    if (!counts) {
      counts = new Map();
      this.pending.set(functionName, counts);
    }
    counts.set(metric, (counts.get(metric) ?? 0) + value);
  }

  /** Publishes what has been counted so far (one call after another: a flush waits for the one before). */
  flush(): Promise<void> {
    this.flushing = this.flushing.then(() => this.publish());
    return this.flushing;
  }

  /** The last flush: nothing counted before `stop` is lost while the emulator answers. */
  stop(): Promise<void> {
    clearInterval(this.timer);
    return this.flush();
  }

  private async publish(): Promise<void> {
    if (this.pending.size === 0) return;
    const batch = this.pending;
    this.pending = new Map();
    const now = Date.now() / 1000;
    const data: MetricDatum[] = [...batch].flatMap(([functionName, counts]) =>
      [...counts].map(([metric, value]) => ({
        MetricName: metric,
        Dimensions: [{ Name: 'FunctionName', Value: functionName }],
        Timestamp: now,
        Value: value,
        Unit: 'Count',
      })),
    );
    try {
      await this.cloudwatch.putMetricData(LAMBDA_NAMESPACE, data);
    } catch (err) {
      this.log(`Lambda metrics not published (sent again with the next): ${errorMessage(err)}`);
      for (const [functionName, counts] of batch)
        for (const [metric, value] of counts) this.add(functionName, metric, value);
    }
  }
}
