import { createHash, createHmac } from 'node:crypto';
import type { ClientConfig } from '../types.js';

/**
 * The emulator's CloudWatch, over CloudWatch's JSON protocol (awsJson1_0, which moto's server
 * answers as AWS does): the four calls the runtime's Lambda metrics and alarm evaluator make.
 * Hand-written because the checkout has no CloudWatch client among its dependencies, and these
 * calls are one signed POST each. Requests are signed with SigV4 like the SDK's (moto reads the
 * service and region from the credential scope, and its usage counts the caller from the user
 * agent: ClientConfig.customUserAgent marks the runtime's own calls).
 */

const TARGET_PREFIX = 'GraniteServiceVersion20100801';
const SERVICE = 'monitoring';

export interface Dimension {
  Name: string;
  Value: string;
}

export interface MetricDatum {
  MetricName: string;
  Dimensions: Dimension[];
  /** Epoch seconds (the JSON protocol's timestamps). */
  Timestamp: number;
  Value: number;
  Unit?: string;
}

/** A metric alarm as DescribeAlarms returns it (the fields the evaluator reads). */
export interface MetricAlarm {
  AlarmName: string;
  StateValue: 'OK' | 'ALARM' | 'INSUFFICIENT_DATA';
  StateReason?: string;
  Namespace?: string;
  MetricName?: string;
  Dimensions?: Dimension[];
  Statistic?: string;
  ExtendedStatistic?: string;
  Metrics?: unknown[];
  Period?: number;
  EvaluationPeriods?: number;
  DatapointsToAlarm?: number;
  Threshold?: number;
  ComparisonOperator?: string;
  TreatMissingData?: string;
}

export type Statistic = 'SampleCount' | 'Average' | 'Sum' | 'Minimum' | 'Maximum';

/** One period of GetMetricStatistics: its start (epoch seconds) and the statistics asked for. */
export type Datapoint = { Timestamp: number } & Partial<Record<Statistic, number>>;

export class CloudWatchError extends Error {
  override name = 'CloudWatchError';
}

const sha256 = (data: string) => createHash('sha256').update(data).digest('hex');
const hmac = (key: string | Buffer, data: string) => createHmac('sha256', key).update(data).digest();

export class EmulatorCloudWatch {
  private readonly url: URL;

  /** `customUserAgent`: the runtime's marks its own calls; a test's are counted as the harness's. */
  constructor(private readonly config: Omit<ClientConfig, 'customUserAgent'> & { customUserAgent?: string }) {
    if (!config.endpoint) throw new CloudWatchError('the emulator has no endpoint (AWS_ENDPOINT_URL)');
    this.url = new URL(config.endpoint);
  }

  /** One call: `operation`'s JSON input in, its JSON output back, or a CloudWatchError naming AWS's error. */
  async call<T>(operation: string, input: object): Promise<T> {
    const body = JSON.stringify(input);
    const headers: Record<string, string> = {
      'content-type': 'application/x-amz-json-1.0',
      host: this.url.host,
      'x-amz-date': new Date().toISOString().replace(/[-:]|\.\d{3}/g, ''),
      'x-amz-target': `${TARGET_PREFIX}.${operation}`,
    };
    const response = await fetch(new URL('/', this.url), {
      method: 'POST',
      headers: {
        ...headers,
        authorization: this.authorization(headers, body),
        ...(this.config.customUserAgent ? { 'user-agent': this.config.customUserAgent } : {}),
      },
      body,
    });
    const text = await response.text();
    if (!response.ok) {
      const error = (text ? JSON.parse(text) : {}) as { __type?: string; message?: string; Message?: string };
      throw new CloudWatchError(
        `${operation}: ${response.status} ${error.__type ?? ''} ${error.message ?? error.Message ?? ''}`.trim(),
      );
    }
    return (text ? JSON.parse(text) : {}) as T;
  }

  /** SigV4's Authorization header for a POST to `/` (https://docs.aws.amazon.com/IAM/latest/UserGuide/create-signed-request.html). */
  private authorization(headers: Record<string, string>, body: string): string {
    const amzDate = headers['x-amz-date'] ?? '';
    const scope = `${amzDate.slice(0, 8)}/${this.config.region}/${SERVICE}/aws4_request`;
    const names = Object.keys(headers).sort();
    const canonical = [
      'POST',
      '/',
      '',
      ...names.map((n) => `${n}:${headers[n]}`),
      '',
      names.join(';'),
      sha256(body),
    ].join('\n');
    const toSign = ['AWS4-HMAC-SHA256', amzDate, scope, sha256(canonical)].join('\n');
    let key = hmac(`AWS4${this.config.credentials.secretAccessKey}`, amzDate.slice(0, 8));
    for (const part of [this.config.region, SERVICE, 'aws4_request']) key = hmac(key, part);
    const signature = createHmac('sha256', key).update(toSign).digest('hex');
    return `AWS4-HMAC-SHA256 Credential=${this.config.credentials.accessKeyId}/${scope}, SignedHeaders=${names.join(';')}, Signature=${signature}`;
  }

  putMetricData(namespace: string, data: MetricDatum[]): Promise<unknown> {
    return this.call('PutMetricData', { Namespace: namespace, MetricData: data });
  }

  /** Every metric alarm (DescribeAlarms, all pages). */
  async metricAlarms(): Promise<MetricAlarm[]> {
    const alarms: MetricAlarm[] = [];
    let next: string | undefined;
    do {
      const out = await this.call<{ MetricAlarms?: MetricAlarm[]; NextToken?: string }>('DescribeAlarms', {
        AlarmTypes: ['MetricAlarm'],
        ...(next ? { NextToken: next } : {}),
      });
      alarms.push(...(out.MetricAlarms ?? []));
      next = out.NextToken;
    } while (next);
    return alarms;
  }

  /** Datapoints of one metric between two epoch seconds, `period` seconds each. */
  async statistics(
    metric: { Namespace: string; MetricName: string; Dimensions: Dimension[] },
    range: { start: number; end: number; period: number; statistics: Statistic[] },
  ): Promise<Datapoint[]> {
    const out = await this.call<{ Datapoints?: Datapoint[] }>('GetMetricStatistics', {
      ...metric,
      StartTime: range.start,
      EndTime: range.end,
      Period: range.period,
      Statistics: range.statistics,
    });
    return out.Datapoints ?? [];
  }

  setAlarmState(alarmName: string, state: MetricAlarm['StateValue'], reason: string): Promise<unknown> {
    return this.call('SetAlarmState', { AlarmName: alarmName, StateValue: state, StateReason: reason });
  }
}
