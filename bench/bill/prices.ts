/**
 * AWS list prices (us-east-1, USD, free tiers ignored) the bench's bill uses, each with the page
 * it comes from, and what every AWS operation a run makes costs: a price, or an explicit "free"
 * with the reason. An operation the run counts and this file does not name is left unpriced and
 * the bill says so (test/e2e/bill.test.ts fails on it). docs/benchmark.md "What it costs a month"
 * lists the same prices.
 */

import type { AwsUsageRow } from '../../local/emulator/usage.js';

const LAMBDA = 'https://aws.amazon.com/lambda/pricing/';
const SQS = 'https://aws.amazon.com/sqs/pricing/';
const DYNAMODB = 'https://aws.amazon.com/dynamodb/pricing/on-demand/';
const SECRETS = 'https://aws.amazon.com/secrets-manager/pricing/';
const CLOUDWATCH = 'https://aws.amazon.com/cloudwatch/pricing/';
const EVENTBRIDGE = 'https://aws.amazon.com/eventbridge/pricing/';

export interface ListPrice {
  usd: number;
  /** What one `usd` buys. */
  per: string;
  source: string;
}

export const LIST_PRICES = {
  lambdaArmGbSecond: { usd: 0.0000133334, per: 'GB-second of Lambda duration, arm64', source: LAMBDA },
  lambdaRequest: { usd: 0.2 / 1e6, per: 'Lambda invocation ($0.20 per million)', source: LAMBDA },
  sqsRequest: {
    usd: 0.4 / 1e6,
    per: 'SQS standard-queue API request, each 64 KB chunk of payload one request ($0.40 per million)',
    source: SQS,
  },
  dynamodbWriteUnit: {
    usd: 0.625 / 1e6,
    per: 'DynamoDB on-demand write request unit ($0.625 per million)',
    source: DYNAMODB,
  },
  dynamodbReadUnit: {
    usd: 0.125 / 1e6,
    per: 'DynamoDB on-demand read request unit ($0.125 per million)',
    source: DYNAMODB,
  },
  secretMonth: { usd: 0.4, per: 'Secrets Manager secret per month', source: SECRETS },
  secretsApiCall: { usd: 0.05 / 10_000, per: 'Secrets Manager API call ($0.05 per 10,000)', source: SECRETS },
  logsIngestedGb: { usd: 0.5, per: 'GB of CloudWatch Logs ingested (standard class)', source: CLOUDWATCH },
  logsStoredGbMonth: { usd: 0.03, per: 'GB-month of CloudWatch Logs stored', source: CLOUDWATCH },
  customMetricMonth: {
    usd: 0.3,
    per: 'CloudWatch custom metric per month (first 10,000; EMF metrics are custom metrics)',
    source: CLOUDWATCH,
  },
  alarmMetricMonth: {
    usd: 0.1,
    per: 'CloudWatch standard-resolution alarm metric per month',
    source: CLOUDWATCH,
  },
  alarmHighResolutionMetricMonth: {
    usd: 0.3,
    per: 'CloudWatch high-resolution alarm metric per month (period under 60 s)',
    source: CLOUDWATCH,
  },
  dashboardMonth: {
    usd: 3,
    per: 'CloudWatch dashboard per month (beyond the free three)',
    source: CLOUDWATCH,
  },
} as const satisfies Record<string, ListPrice>;

/** How one AWS operation is billed. */
export type OperationPrice =
  /** Each billed request (SQS: per 64 KB chunk) at this price. */
  | { kind: 'per-request'; price: ListPrice }
  /** By the DynamoDB request units the emulator counted (table, indexes, reads). */
  | { kind: 'dynamodb-units' }
  | { kind: 'free'; why: string };

const sqsRequest: OperationPrice = { kind: 'per-request', price: LIST_PRICES.sqsRequest };
const dynamodbUnits: OperationPrice = { kind: 'dynamodb-units' };
const lambdaControlPlane: OperationPrice = {
  kind: 'free',
  why: `Lambda bills invocations and duration only; its management API (concurrency, event source mappings) has no charge (${LAMBDA})`,
};

/** What the functions' own calls cost, by service and operation. */
export const FUNCTION_OPERATIONS: Readonly<Record<string, Readonly<Record<string, OperationPrice>>>> = {
  dynamodb: Object.fromEntries(
    [
      'GetItem',
      'BatchGetItem',
      'Query',
      'Scan',
      'PutItem',
      'UpdateItem',
      'DeleteItem',
      'BatchWriteItem',
      'TransactWriteItems',
    ].map((op) => [op, dynamodbUnits]),
  ),
  sqs: Object.fromEntries(
    [
      'SendMessage',
      'SendMessageBatch',
      'ReceiveMessage',
      'DeleteMessage',
      'DeleteMessageBatch',
      'ChangeMessageVisibility',
      'ChangeMessageVisibilityBatch',
      'GetQueueAttributes',
    ].map((op) => [op, sqsRequest]),
  ),
  secretsmanager: { GetSecretValue: { kind: 'per-request', price: LIST_PRICES.secretsApiCall } },
  lambda: Object.fromEntries(
    [
      'GetFunctionConcurrency',
      'PutFunctionConcurrency',
      'DeleteFunctionConcurrency',
      'GetEventSourceMapping',
      'ListEventSourceMappings',
      'UpdateEventSourceMapping',
    ].map((op) => [op, lambdaControlPlane]),
  ),
};

/**
 * The local runtime's calls stand for what Lambda's service does for the account: its event
 * source mappings' SQS pollers are billed SQS requests; its DynamoDB Streams reads are free; the
 * rest is the runtime's own bookkeeping (reading functions, mappings, rules and code from the
 * emulator), which Lambda does internally at no charge to the account.
 */
export function runtimeOperationPrice(service: string): OperationPrice {
  if (service === 'sqs') return sqsRequest;
  if (service === 'dynamodbstreams') {
    return {
      kind: 'free',
      why: `GetRecords calls that Lambda makes for a DynamoDB stream trigger are free (${DYNAMODB})`,
    };
  }
  return {
    kind: 'free',
    why: 'the local runtime’s own bookkeeping (what Lambda’s service does internally; no call the account pays for)',
  };
}

/** The producer's sends (the upstream job writing one message per record) are the account's SQS requests. */
export const PRODUCER_OPERATIONS: ReadonlySet<string> = new Set(['SendMessage', 'SendMessageBatch']);

/** The events a schedule rule generates are AWS events on the default bus: EventBridge does not charge for them. */
export const SCHEDULE_RULE_EVENTS = {
  usd: 0,
  why: `events that an EventBridge rule generates on a schedule are AWS events on the default bus, free (custom events are $1.00 per million) (${EVENTBRIDGE})`,
} as const;

/** SQS event source mapping: Lambda long-polls a queue (20 s waits) with at least this many pollers even when it is empty. */
export const IDLE_POLLERS_PER_SQS_MAPPING = 5;
export const LONG_POLL_SECONDS = 20;
export const IDLE_POLLING_SOURCE =
  'https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-scaling.html (Lambda starts with five concurrent batches and long-polls the queue; the exact idle poll rate is not published: an estimate)';

/** How a counted call is priced (runtime and function calls; the harness's are no part of it), or undefined when nothing covers it. */
export function priceOfCall(
  row: Pick<AwsUsageRow, 'caller' | 'service' | 'operation'>,
): OperationPrice | undefined {
  if (row.caller === 'runtime') return runtimeOperationPrice(row.service);
  if (row.caller === 'harness') return undefined;
  return FUNCTION_OPERATIONS[row.service]?.[row.operation];
}
