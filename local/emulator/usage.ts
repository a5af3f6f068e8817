/**
 * The moto launcher's usage counts (local/emulator/usage.py), over its control route: every AWS
 * request the emulator served, by caller, service, operation and resource, with the DynamoDB
 * request units AWS would bill for it. The bench prices a run from them (bench/report/costs.ts).
 */

/** The user agent the local runtime's own clients send (its event source mappings' pollers among them). */
export const RUNTIME_USER_AGENT = 'threadgate-local-runtime';

export const AWS_USAGE_PATH = '/_threadgate/usage';

/**
 * Who made a call: `function:<name>` (a function's SDK client, named by the runtime's
 * AWS_SDK_UA_APP_ID), `runtime` (the local runtime, as Lambda's own pollers), `harness` (the
 * bench or a test: the producer's sends, probes, checks).
 */
export type AwsCaller = `function:${string}` | 'function' | 'runtime' | 'harness';

/** One service, operation and resource as one caller used it. */
export interface AwsUsageRow {
  caller: AwsCaller;
  /** `dynamodb`, `sqs`, `ssm`, `secretsmanager`, `lambda`, `dynamodbstreams`, … */
  service: string;
  /** `UpdateItem`, `ReceiveMessage`, …; the Lambda REST API as `GET functions/concurrency`. */
  operation: string;
  /** The table (`table/index` for an index), queue name, parameter or secret; '' when none. */
  resource: string;
  requests: number;
  /** Answered with a status of 400 or more (conditional failures included). */
  errors: number;
  /** SQS: one request per 64 KB chunk of payload; other services: the requests. */
  billed_requests: number;
  /** DynamoDB: write request units on the table (failed conditional writes included). */
  write_units: number;
  /** DynamoDB: write request units the writes cost in secondary indexes. */
  index_write_units: number;
  /** DynamoDB: read request units (eventually consistent reads count half). */
  read_units: number;
  conditional_failures: number;
  items_written: number;
}

export interface AwsUsage {
  /** Epoch ms the counts started (the launcher's start or the last reset). */
  since: number;
  calls: AwsUsageRow[];
}

/** The counts since the launcher started or the last reset. */
export async function awsUsage(endpoint: string): Promise<AwsUsage> {
  const res = await fetch(`${endpoint}${AWS_USAGE_PATH}`);
  if (!res.ok) throw new Error(`moto launcher GET ${AWS_USAGE_PATH}: ${res.status}`);
  return (await res.json()) as AwsUsage;
}

/** Starts the counts again; answers the (empty) counts. */
export async function resetAwsUsage(endpoint: string): Promise<AwsUsage> {
  const res = await fetch(`${endpoint}${AWS_USAGE_PATH}`, { method: 'DELETE' });
  if (!res.ok) throw new Error(`moto launcher DELETE ${AWS_USAGE_PATH}: ${res.status}`);
  return (await res.json()) as AwsUsage;
}
