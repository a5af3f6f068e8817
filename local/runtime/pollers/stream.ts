import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  DescribeStreamCommand,
  DynamoDBStreamsClient,
  GetRecordsCommand,
  GetShardIteratorCommand,
  type _Record as StreamRecord,
} from '@aws-sdk/client-dynamodb-streams';
import { type EventSourceMappingConfiguration, GetEventSourceMappingCommand } from '@aws-sdk/client-lambda';
import { GetQueueUrlCommand, SendMessageCommand } from '@aws-sdk/client-sqs';
import type { FunctionHost } from '../function-host.js';
import {
  errorMessage,
  type InvokeResult,
  mappingPolls,
  type RuntimeContext,
  type StreamMappingStats,
} from '../types.js';

/**
 * Lambda's DynamoDB stream poller for one event source mapping, as the emulator has no poller
 * of its own: one shard iterator per shard from the mapping's StartingPosition, batches of up to
 * BatchSize records invoked one at a time per shard (so a record key's changes stay in order),
 * and Lambda's failure rules for streams, read from the mapping:
 * - a failed invocation is retried with the same records; with ReportBatchItemFailures, from the
 *   lowest reported sequence number (the records before it are done);
 * - BisectBatchOnFunctionError: a batch whose invocation failed (an error, not reported items)
 *   is split in two and each half is tried on its own; splitting uses no retry;
 * - MaximumRetryAttempts (-1: unbounded): once a part has been retried that often it is given up;
 * - MaximumRecordAgeInSeconds (-1: unbounded): a record older than that is given up before it is
 *   sent to the function;
 * - what is given up is skipped (the records behind it go on) and, with an OnFailure
 *   destination (an SQS queue), Lambda's on-failure record is sent there: the shard, the first
 *   and last sequence numbers and the batch size, never the records' data.
 * A disabled mapping stops polling.
 */

/** Wait between GetRecords calls on a shard that had records (Lambda polls a shard about 4 times a second). */
const IDLE_POLL_MS = 250;
/**
 * The longest wait between GetRecords calls on a shard that stays empty: the wait doubles from
 * IDLE_POLL_MS up to this and drops back as soon as records come. Four empty polls a second per
 * shard were a fifth of an idle local stack's CPU (the emulator's and the runtime's); a record
 * written after a quiet spell reaches the function at most this much later.
 */
const MAX_IDLE_POLL_MS = 1_000;
/** Wait before retrying a failed batch. */
const RETRY_MS = 500;

function toLambdaRecord(record: StreamRecord, streamArn: string, region: string): Record<string, unknown> {
  const dynamodb = { ...(record.dynamodb ?? {}) } as Record<string, unknown>;
  const created = dynamodb.ApproximateCreationDateTime;
  // Lambda hands the time as epoch seconds; the SDK parsed it into a Date.
  if (created instanceof Date) dynamodb.ApproximateCreationDateTime = created.getTime() / 1000;
  return {
    eventID: record.eventID,
    eventName: record.eventName,
    eventVersion: record.eventVersion ?? '1.1',
    eventSource: 'aws:dynamodb',
    awsRegion: region,
    dynamodb,
    eventSourceARN: streamArn,
  };
}

/** The sequence number to resume from after an invocation, or undefined when the batch is done. */
export function retryFrom(
  batch: readonly { sequence: string }[],
  result: InvokeResult,
  reportBatchItemFailures: boolean,
): string | undefined {
  if (!result.ok) return batch[0]?.sequence;
  if (!reportBatchItemFailures) return undefined;
  const failures = (result.payload as { batchItemFailures?: { itemIdentifier?: unknown }[] } | undefined)
    ?.batchItemFailures;
  if (!Array.isArray(failures) || failures.length === 0) return undefined;
  const known = new Set(batch.map((r) => r.sequence));
  const reported = failures.map((f) => f?.itemIdentifier);
  // An identifier that is not a sequence number of the batch fails the whole batch, as in Lambda.
  if (reported.some((id) => typeof id !== 'string' || !known.has(id))) return batch[0]?.sequence;
  return (reported as string[]).sort((a, b) => (BigInt(a) < BigInt(b) ? -1 : 1))[0];
}

/** The failure rules of a stream mapping (see the comment at the top). */
export interface StreamFailureRules {
  reportBatchItemFailures: boolean;
  bisect: boolean;
  /** Undefined: unbounded. */
  maxRetries?: number;
  /** Undefined: unbounded. */
  maxRecordAgeMs?: number;
}

/** A part of a batch being worked on, with the retries it has used. */
export interface StreamPart<T extends { sequence: string }> {
  items: T[];
  retries: number;
}

/** What to do after one invocation of a part. */
export type StreamStep<T extends { sequence: string }> =
  | { kind: 'done'; delivered: number }
  | { kind: 'split'; delivered: number; parts: StreamPart<T>[] }
  | { kind: 'retry'; delivered: number; part: StreamPart<T> }
  | { kind: 'give-up'; delivered: number; items: T[]; retries: number };

/** Lambda's rule for a part after an invocation: done, split in two, retried, or given up. */
export function nextStep<T extends { sequence: string }>(
  part: StreamPart<T>,
  result: InvokeResult,
  rules: StreamFailureRules,
): StreamStep<T> {
  const from = retryFrom(part.items, result, rules.reportBatchItemFailures);
  if (from === undefined) return { kind: 'done', delivered: part.items.length };
  const index = Math.max(
    0,
    part.items.findIndex((r) => r.sequence === from),
  );
  const rest = part.items.slice(index);
  if (!result.ok && rules.bisect && rest.length > 1) {
    const half = Math.ceil(rest.length / 2);
    return {
      kind: 'split',
      delivered: index,
      parts: [
        { items: rest.slice(0, half), retries: 0 },
        { items: rest.slice(half), retries: 0 },
      ],
    };
  }
  if (rules.maxRetries !== undefined && part.retries >= rules.maxRetries) {
    return { kind: 'give-up', delivered: index, items: rest, retries: part.retries };
  }
  return { kind: 'retry', delivered: index, part: { items: rest, retries: part.retries + 1 } };
}

/** How many records at the front of a part are older than the maximum record age. */
export function expiredAtFront(
  items: readonly { createdMs: number | undefined }[],
  maxRecordAgeMs: number | undefined,
  now: number,
): number {
  if (maxRecordAgeMs === undefined) return 0;
  let n = 0;
  while (n < items.length && now - (items[n]?.createdMs ?? now) > maxRecordAgeMs) n += 1;
  return n;
}

/** Lambda's on-failure record for stream records it gave up on (the shard and sequence numbers, no data). */
export function onFailureRecord(o: {
  functionArn: string;
  condition: 'RetryAttemptsExhausted' | 'RecordAgeExceeded';
  invokeCount: number;
  shardId: string;
  streamArn: string;
  items: readonly { sequence: string; createdMs: number | undefined }[];
  now: Date;
}): Record<string, unknown> {
  const first = o.items[0];
  const last = o.items[o.items.length - 1];
  const arrival = (ms: number | undefined) =>
    ms === undefined ? undefined : new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z');
  return {
    requestContext: {
      requestId: randomUUID(),
      functionArn: o.functionArn,
      condition: o.condition,
      approximateInvokeCount: o.invokeCount,
    },
    responseContext: { statusCode: 200, executedVersion: '$LATEST', functionError: 'Unhandled' },
    version: '1.0',
    timestamp: o.now.toISOString(),
    DDBStreamBatchInfo: {
      shardId: o.shardId,
      startSequenceNumber: first?.sequence,
      endSequenceNumber: last?.sequence,
      approximateArrivalOfFirstRecord: arrival(first?.createdMs),
      approximateArrivalOfLastRecord: arrival(last?.createdMs),
      batchSize: o.items.length,
      streamArn: o.streamArn,
    },
  };
}

/** One stream record as the poller holds it. */
interface Item {
  sequence: string;
  createdMs: number | undefined;
  event: Record<string, unknown>;
}

export class StreamPoller {
  readonly stats: StreamMappingStats & {
    /** Records given up on (retries used up or too old) and skipped. */
    discarded: number;
    /** On-failure records sent to the mapping's destination. */
    onFailureSent: number;
  };
  private readonly streams: DynamoDBStreamsClient;
  private readonly functionArn: string;
  private startingPosition: 'TRIM_HORIZON' | 'LATEST' = 'TRIM_HORIZON';
  private rules: StreamFailureRules = { reportBatchItemFailures: false, bisect: false };
  /** The OnFailure destination's ARN, and its queue URL once looked up. */
  private onFailure: { arn: string; url?: string } | undefined;
  private readonly shards = new Map<string, Promise<void>>();

  constructor(
    private readonly runtime: RuntimeContext,
    private readonly host: FunctionHost,
    mapping: EventSourceMappingConfiguration,
  ) {
    this.streams = new DynamoDBStreamsClient(runtime.clientConfig);
    this.functionArn = mapping.FunctionArn ?? host.name;
    this.stats = {
      uuid: mapping.UUID ?? '',
      functionName: host.name,
      streamArn: mapping.EventSourceArn ?? '',
      enabled: false,
      batchSize: 100,
      delivered: 0,
      invocations: 0,
      retries: 0,
      discarded: 0,
      onFailureSent: 0,
    };
  }

  /** Re-reads the mapping and starts a reader for every shard not read yet. */
  async refresh(): Promise<void> {
    const m = await this.runtime.lambda.send(new GetEventSourceMappingCommand({ UUID: this.stats.uuid }));
    const enabled = mappingPolls(m.State);
    if (enabled !== this.stats.enabled) {
      this.runtime.runtimeLog.line(
        `stream mapping ${this.stats.uuid} → ${this.host.name}: ${enabled ? 'enabled' : 'disabled'}`,
      );
    }
    this.stats.enabled = enabled;
    this.stats.batchSize = Math.max(1, Math.min(m.BatchSize ?? 100, 10_000));
    this.startingPosition = m.StartingPosition === 'LATEST' ? 'LATEST' : 'TRIM_HORIZON';
    const bounded = (n: number | undefined) => (n === undefined || n < 0 ? undefined : n);
    const age = bounded(m.MaximumRecordAgeInSeconds);
    this.rules = {
      reportBatchItemFailures: (m.FunctionResponseTypes ?? []).includes('ReportBatchItemFailures'),
      bisect: m.BisectBatchOnFunctionError === true,
      maxRetries: bounded(m.MaximumRetryAttempts),
      maxRecordAgeMs: age === undefined ? undefined : age * 1000,
    };
    const destination = m.DestinationConfig?.OnFailure?.Destination;
    if (destination !== this.onFailure?.arn) this.onFailure = destination ? { arn: destination } : undefined;
    if (!enabled) return;
    const description = await this.streams.send(
      new DescribeStreamCommand({ StreamArn: this.stats.streamArn }),
    );
    for (const shard of description.StreamDescription?.Shards ?? []) {
      const id = shard.ShardId;
      if (id && !this.shards.has(id)) this.shards.set(id, this.readShard(id));
    }
  }

  private async iterator(shardId: string, after?: string): Promise<string | undefined> {
    const out = await this.streams.send(
      new GetShardIteratorCommand({
        StreamArn: this.stats.streamArn,
        ShardId: shardId,
        ...(after !== undefined
          ? { ShardIteratorType: 'AFTER_SEQUENCE_NUMBER', SequenceNumber: after }
          : { ShardIteratorType: this.startingPosition }),
      }),
    );
    return out.ShardIterator;
  }

  private async readShard(shardId: string): Promise<void> {
    let iterator: string | undefined;
    /** Last sequence number done with (acknowledged or given up). */
    let done: string | undefined;
    let idleMs = IDLE_POLL_MS;
    while (!this.runtime.stopped) {
      try {
        if (!this.stats.enabled || !this.host.fn) {
          await sleep(this.runtime.refreshMs);
          continue;
        }
        iterator ??= await this.iterator(shardId, done);
        const out = await this.streams.send(
          new GetRecordsCommand({ ShardIterator: iterator, Limit: this.stats.batchSize }),
        );
        const records = out.Records ?? [];
        if (records.length === 0) {
          iterator = out.NextShardIterator;
          await sleep(idleMs);
          idleMs = Math.min(MAX_IDLE_POLL_MS, idleMs * 2);
          continue;
        }
        idleMs = IDLE_POLL_MS;
        const batch: Item[] = records.map((r) => {
          const created = r.dynamodb?.ApproximateCreationDateTime;
          return {
            sequence: r.dynamodb?.SequenceNumber ?? '',
            createdMs: created instanceof Date ? created.getTime() : undefined,
            event: toLambdaRecord(r, this.stats.streamArn, this.runtime.region),
          };
        });
        await this.settle(shardId, batch);
        if (this.runtime.stopped) return;
        done = batch[batch.length - 1]?.sequence;
        iterator = out.NextShardIterator;
      } catch (err) {
        if (this.runtime.stopped) return;
        this.runtime.emit({
          type: 'error',
          where: `stream ${this.stats.streamArn}`,
          message: errorMessage(err),
        });
        iterator = undefined; // start again after the last record done with
        await sleep(1000);
      }
    }
  }

  /** Works a batch until every record of it is acknowledged or given up (nextStep's rules). */
  private async settle(shardId: string, batch: Item[]): Promise<void> {
    const work: StreamPart<Item>[] = [{ items: batch, retries: 0 }];
    while (work.length > 0 && !this.runtime.stopped) {
      const part = work[0]!;
      const expired = expiredAtFront(part.items, this.rules.maxRecordAgeMs, Date.now());
      if (expired > 0) {
        // Invoked `retries` times so far (a fresh part: not yet).
        await this.giveUp(shardId, part.items.slice(0, expired), 'RecordAgeExceeded', part.retries);
        part.items = part.items.slice(expired);
        if (part.items.length === 0) {
          work.shift();
          continue;
        }
      }
      const step = nextStep(part, await this.deliver(part.items), this.rules);
      this.stats.delivered += step.delivered;
      if (step.kind === 'done') work.shift();
      else if (step.kind === 'split') work.splice(0, 1, ...step.parts);
      else if (step.kind === 'give-up') {
        work.shift();
        await this.giveUp(shardId, step.items, 'RetryAttemptsExhausted', step.retries + 1);
      } else {
        work[0] = step.part;
        this.stats.retries += 1;
        await sleep(RETRY_MS);
      }
    }
  }

  /** Skips records Lambda gives up on, sending its on-failure record to the destination if there is one. */
  private async giveUp(
    shardId: string,
    items: Item[],
    condition: 'RetryAttemptsExhausted' | 'RecordAgeExceeded',
    invokeCount: number,
  ): Promise<void> {
    this.stats.discarded += items.length;
    this.runtime.runtimeLog.line(
      `stream mapping ${this.stats.uuid}: ${condition}, ${items.length} record(s) from ${items[0]?.sequence} skipped`,
    );
    const destination = this.onFailure;
    if (!destination) return;
    const body = JSON.stringify(
      onFailureRecord({
        functionArn: this.functionArn,
        condition,
        invokeCount,
        shardId,
        streamArn: this.stats.streamArn,
        items,
        now: new Date(),
      }),
    );
    for (let attempt = 1; ; attempt++) {
      try {
        destination.url ??= await this.queueUrlOf(destination.arn);
        await this.runtime.sqs.send(new SendMessageCommand({ QueueUrl: destination.url, MessageBody: body }));
        this.stats.onFailureSent += 1;
        return;
      } catch (err) {
        if (attempt >= 3 || this.runtime.stopped) {
          this.runtime.emit({
            type: 'error',
            where: `stream ${this.stats.streamArn} on-failure destination ${destination.arn}`,
            message: errorMessage(err),
          });
          return;
        }
        await sleep(RETRY_MS * attempt);
      }
    }
  }

  /** An SQS queue's URL from its ARN (arn:aws:sqs:REGION:ACCOUNT:NAME). */
  private async queueUrlOf(arn: string): Promise<string> {
    const [, , service, , account, name] = arn.split(':');
    if (service !== 'sqs' || !name) throw new Error(`on-failure destination ${arn} is not an SQS queue`);
    const out = await this.runtime.sqs.send(
      new GetQueueUrlCommand({ QueueName: name, QueueOwnerAWSAccountId: account }),
    );
    if (!out.QueueUrl) throw new Error(`no queue URL for ${arn}`);
    return out.QueueUrl;
  }

  /** Invokes one part of a batch; a failure to invoke counts as a failed invocation. */
  private async deliver(items: Item[]): Promise<InvokeResult> {
    while (!this.runtime.stopped && !this.host.hasCapacity()) await sleep(50);
    this.stats.invocations += 1;
    try {
      return await this.host.invoke({ Records: items.map((r) => r.event) });
    } catch (err) {
      return { ok: false, error: { errorType: 'Runtime.Error', errorMessage: errorMessage(err) } };
    }
  }

  async stop(): Promise<void> {
    await Promise.allSettled(this.shards.values());
  }
}
