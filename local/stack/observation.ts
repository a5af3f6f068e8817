import { setTimeout as sleep } from 'node:timers/promises';
import { GetFunctionConfigurationCommand } from '@aws-sdk/client-lambda';
import {
  GetQueueAttributesCommand,
  type MessageAttributeValue,
  ReceiveMessageCommand,
} from '@aws-sdk/client-sqs';
import { BatchGetCommand, paginateScan } from '@aws-sdk/lib-dynamodb';
import { readCap } from '../../functions/pipeline/cap-policy.js';
import { laneShape } from '../../functions/pipeline/lanes.js';
import { isCancelKey } from '../../functions/records/cancellations.js';
import { isFinalStatus } from '../../functions/records/store.js';
import type { AnyLocalStack, LocalStack } from './local-stack.js';
import type { DeployedWorker } from './worker-shape.js';

/** Reading a running local stack back: queue depths, outcome rows, DLQ entries and the cap in force. */

/** The local runtime's figures for the worker's event source mapping (undefined without a runtime). */
export function workerMapping(stack: LocalStack) {
  return stack.runtime?.stats().mappings.find((m) => m.uuid === stack.outputs.MappingUuid);
}

/**
 * The worker as deployed: its memory, its `lanes` setting (LANES) and the shape its cap runs in
 * (the lane shape the adjuster publishes; the first shape the stack deployed until then):
 * r invocations (reserved concurrency, the mapping's maximum) of L lanes, and the account's
 * Lambda concurrency the reservation needs, r + 100 (Lambda keeps 100 unreserved).
 */
export async function deployedWorker(stack: AnyLocalStack): Promise<DeployedWorker> {
  const conf = await stack.lambda.send(
    new GetFunctionConfigurationCommand({ FunctionName: stack.outputs.WorkerFunctionName }),
  );
  const env = conf.Environment?.Variables ?? {};
  const setting = Number(env.LANES ?? 1) || 1;
  const shape =
    (setting > 1 ? await stack.control.readShape() : undefined) ??
    laneShape(await currentCap(stack), setting);
  return {
    worker_memory_mb: conf.MemorySize ?? 128,
    lanes: { setting, r: shape.r, L: shape.L, lambda_quota_needed: shape.r + 100 },
  };
}

/** The poller's concurrency comes from the deployed configuration: waits (up to 10 s) until it is `limit`. */
export async function untilPollerLimit(stack: LocalStack, limit: number): Promise<void> {
  for (let i = 0; i < 100 && (workerMapping(stack)?.limit ?? 0) !== limit; i++) await sleep(100);
}

export interface OutcomeRow {
  record_key: string;
  status: string;
  reason?: string;
  attempts?: number;
  target_status?: number;
  captcha_type?: string;
  [key: string]: unknown;
}

export interface DlqEntry {
  messageId: string;
  body: string;
  recordKey?: string;
  errorCode?: string;
  reason?: string;
}

export async function queueDepth(
  stack: Pick<LocalStack, 'sqs'>,
  queueUrl: string,
): Promise<{ visible: number; inFlight: number }> {
  const out = await stack.sqs.send(
    new GetQueueAttributesCommand({
      QueueUrl: queueUrl,
      AttributeNames: ['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible'],
    }),
  );
  return {
    visible: Number(out.Attributes?.ApproximateNumberOfMessages ?? 0),
    inFlight: Number(out.Attributes?.ApproximateNumberOfMessagesNotVisible ?? 0),
  };
}

/** What progress counts read of a row: a projection costs the emulator a fraction of a whole row. */
export const STATUS_FIELDS = ['record_key', 'status', 'reason'] as const;

/** A projection of `fields` (`status` is a reserved word, so every name goes through a placeholder). */
function projection(fields: readonly string[] | undefined) {
  if (!fields) return {};
  return {
    ProjectionExpression: fields.map((_, i) => `#f${i}`).join(', '),
    ExpressionAttributeNames: Object.fromEntries(fields.map((f, i) => [`#f${i}`, f])),
  };
}

/**
 * Every outcome row (a Scan), or only `fields` of each. A long-lived stack (a shared e2e stack,
 * `local --keep`) holds every earlier run's rows too: to follow a run, read its keys with
 * readOutcomesOf instead.
 */
export async function readOutcomes(
  stack: Pick<LocalStack, 'documents' | 'outputs'>,
  fields?: readonly string[],
): Promise<OutcomeRow[]> {
  const rows: OutcomeRow[] = [];
  for await (const page of paginateScan(
    { client: stack.documents },
    { TableName: stack.outputs.TableName, ...projection(fields) },
  )) {
    // A batch cancel is an item of the table, not a row (functions/records/cancellations.ts).
    rows.push(...((page.Items ?? []) as OutcomeRow[]).filter((r) => !isCancelKey(r.record_key)));
  }
  return rows;
}

/** Final rows already read, per table and projection: a final status never changes (conditional writes). */
const finalRows = new Map<string, Map<string, OutcomeRow>>();
/** BatchGetItem takes at most 100 keys per call. */
const BATCH_GET_KEYS = 100;

/**
 * The rows of these keys (absent keys have no row), or only `fields` of each: BatchGetItem, 100
 * keys a call, consistent reads, so the cost follows the keys asked for, not the table's size.
 * A row once final is not read again. Polled by progress loops: a Scan of a table of thousands
 * of rows costs moto's one Python thread seconds per call.
 */
export async function readOutcomesOf(
  stack: Pick<LocalStack, 'documents' | 'outputs'>,
  keys: Iterable<string>,
  fields?: readonly string[],
): Promise<Map<string, OutcomeRow>> {
  const table = stack.outputs.TableName;
  const cacheKey = `${table}|${fields?.join(',') ?? '*'}`;
  const known = finalRows.get(cacheKey) ?? new Map<string, OutcomeRow>();
  finalRows.set(cacheKey, known);
  const rows = new Map<string, OutcomeRow>();
  const wanted: string[] = [];
  for (const key of new Set(keys)) {
    const row = known.get(key);
    if (row) rows.set(key, row);
    else if (!isCancelKey(key)) wanted.push(key);
  }
  for (let i = 0; i < wanted.length; i += BATCH_GET_KEYS) {
    let Keys: Record<string, unknown>[] = wanted.slice(i, i + BATCH_GET_KEYS).map((k) => ({ record_key: k }));
    for (let round = 0; Keys.length > 0; round++) {
      if (round > 0) await sleep(Math.min(1_000, 50 * 2 ** round));
      const out = await stack.documents.send(
        new BatchGetCommand({
          RequestItems: { [table]: { Keys, ConsistentRead: true, ...projection(fields) } },
        }),
      );
      for (const row of (out.Responses?.[table] ?? []) as OutcomeRow[]) {
        rows.set(row.record_key, row);
        if (isFinalStatus(row.status)) known.set(row.record_key, row);
      }
      Keys = out.UnprocessedKeys?.[table]?.Keys ?? [];
    }
  }
  return rows;
}

function attr(attrs: Record<string, MessageAttributeValue> | undefined, name: string): string | undefined {
  return attrs?.[name]?.StringValue;
}

/**
 * The DLQ's messages with their reason attributes. Reading receives them with a short
 * visibility timeout, so they are back in the DLQ (for a redrive) a moment later.
 */
export function readDlq(
  stack: Pick<LocalStack, 'sqs' | 'outputs'>,
  visibilitySeconds = 2,
): Promise<DlqEntry[]> {
  return readMessages(stack, stack.outputs.DlqUrl, visibilitySeconds);
}

/** A queue's messages with the DLQ's reason attributes (when they carry them), read as readDlq reads. */
export async function readMessages(
  stack: Pick<LocalStack, 'sqs'>,
  queueUrl: string,
  visibilitySeconds = 2,
): Promise<DlqEntry[]> {
  const seen = new Map<string, DlqEntry>();
  for (let round = 0; round < 1000; round++) {
    const out = await stack.sqs.send(
      new ReceiveMessageCommand({
        QueueUrl: queueUrl,
        MaxNumberOfMessages: 10,
        VisibilityTimeout: visibilitySeconds,
        MessageAttributeNames: ['All'],
      }),
    );
    const messages = out.Messages ?? [];
    if (messages.length === 0) break;
    for (const m of messages) {
      seen.set(m.MessageId ?? '', {
        messageId: m.MessageId ?? '',
        body: m.Body ?? '',
        recordKey: attr(m.MessageAttributes, 'record_key'),
        errorCode: attr(m.MessageAttributes, 'error_code'),
        reason: attr(m.MessageAttributes, 'reason'),
      });
    }
  }
  return [...seen.values()];
}

/**
 * The cap in force now, in solves: the knob (the local runtime's poller limit, else, on
 * LocalStack, read back from the deployment) is in invocations, so with lanes it is times the
 * published shape's L, never above its cap (r × L ≤ cap). Without lanes the knob is the cap.
 */
export async function currentCap(stack: AnyLocalStack): Promise<number> {
  const mapping = stack.runtime?.stats().mappings.find((m) => m.uuid === stack.outputs.MappingUuid);
  const invocations =
    mapping?.limit ??
    (
      await readCap({
        lambda: stack.lambda,
        control: stack.control,
        workerFunctionName: stack.outputs.WorkerFunctionName,
      })
    ).cap ??
    0;
  const shape = await stack.control.readShape();
  return shape && shape.L > 1 ? Math.min(shape.cap, invocations * shape.L) : invocations;
}
