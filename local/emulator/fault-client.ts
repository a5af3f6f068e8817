/**
 * The moto launcher's fault injection and request log (local/emulator/faults.py), over its
 * control routes: make the Nth matching call fail with an AWS error, on the wire, and read back
 * what the emulator was asked. Used by the end-to-end tests and the chaos run.
 */

/** One fault rule (faults.py documents each field). */
export interface AwsFaultRule {
  /** The operation, e.g. `UpdateItem`, `SendMessage`. */
  operation: string;
  /** e.g. `dynamodb`, `sqs`: found in the X-Amz-Target prefix (lower case). */
  service?: string;
  /** Only calls whose DynamoDB `Key` (PutItem: `Item`) has these string values, e.g. `{ record_key: 'r-1' }`. */
  key?: Record<string, string>;
  /** Strings that must all appear in the request body. */
  contains?: string[];
  /** The first matching call that fails, 1-based. @default 1 */
  nth?: number;
  /** Matching calls that fail from the nth on; 0 = every one. @default 1 (with `rate`: 0) */
  times?: number;
  /** Instead of nth: each matching call fails with this probability, drawn from `seed` (`times` caps the failures). */
  rate?: number;
  /** @default 1 */
  seed?: number | string;
  /** AWS error code. @default InternalServerError */
  error?: string;
  /** HTTP status. @default 500 for InternalServerError / ServiceUnavailable, else 400 */
  status?: number;
  message?: string;
  /** Carry the call out and only replace its answer by the error (it landed; its answer was lost). */
  apply?: boolean;
  /**
   * Instead of failing: carry the call out and answer it after this many ms. A DynamoDB call
   * holds the emulator's DynamoDB lock meanwhile, as a slow call does in moto's one process, so
   * every other DynamoDB call waits behind it.
   */
  delay_ms?: number;
}

export interface AwsFaultRuleState extends Required<Omit<AwsFaultRule, 'service' | 'key' | 'rate'>> {
  id: number;
  service: string | null;
  key: Record<string, string> | null;
  rate: number | null;
  /** Calls that matched so far. */
  seen: number;
  /** Calls it failed so far. */
  failed: number;
}

/** One request the emulator served (faults.py's request log). */
export interface AwsRequestEntry {
  seq: number;
  /** Epoch ms at which it was answered. */
  t: number;
  /** `DynamoDB_20120810.UpdateItem`, `AmazonSQS.SendMessage`, … */
  op: string;
  /** HTTP status answered; 499: not carried out, its client had hung up when its turn came. */
  status: number;
  /** The rule that failed it, if one did. */
  fault?: number;
  /** DynamoDB: the Key's string values. */
  key?: Record<string, string>;
  /** DynamoDB writes: UpdateExpression and ConditionExpression (first 300 characters). */
  update?: string;
  condition?: string;
  /** DynamoDB: ExpressionAttributeValues' string values up to 64 characters. */
  values?: Record<string, string>;
}

export const AWS_FAULTS_PATH = '/_threadgate/faults';
export const AWS_REQUESTS_PATH = '/_threadgate/requests';

async function call<T>(url: string, init?: RequestInit): Promise<T> {
  const res = await fetch(url, init);
  const body = (await res.json()) as T & { error?: string };
  if (!res.ok) throw new Error(`moto launcher ${init?.method ?? 'GET'} ${url}: ${body.error ?? res.status}`);
  return body;
}

/** Adds rules; returns their ids. */
export async function addAwsFaults(endpoint: string, rules: AwsFaultRule[]): Promise<number[]> {
  const out = await call<{ ids: number[] }>(`${endpoint}${AWS_FAULTS_PATH}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ rules }),
  });
  return out.ids;
}

export async function awsFaults(endpoint: string): Promise<AwsFaultRuleState[]> {
  return (await call<{ rules: AwsFaultRuleState[] }>(`${endpoint}${AWS_FAULTS_PATH}`)).rules;
}

export async function clearAwsFaults(endpoint: string): Promise<void> {
  await call(`${endpoint}${AWS_FAULTS_PATH}`, { method: 'DELETE' });
}

/** The request log after `since` (a `next` from an earlier read; 0 for all that is kept). */
export async function awsRequests(
  endpoint: string,
  since = 0,
): Promise<{ next: number; entries: AwsRequestEntry[] }> {
  return call(`${endpoint}${AWS_REQUESTS_PATH}?since=${since}`);
}
