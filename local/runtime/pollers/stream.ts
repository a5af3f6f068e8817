import { setTimeout as sleep } from 'node:timers/promises';
import {
  DescribeStreamCommand,
  DynamoDBStreamsClient,
  GetRecordsCommand,
  GetShardIteratorCommand,
  type _Record as StreamRecord,
} from '@aws-sdk/client-dynamodb-streams';
import { type EventSourceMappingConfiguration, GetEventSourceMappingCommand } from '@aws-sdk/client-lambda';
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
 * and Lambda's retry rules — a failed invocation is retried with the same batch; with
 * ReportBatchItemFailures, the batch is retried from the lowest reported sequence number, and
 * the records before it count as done. A disabled mapping stops polling.
 */

/** Wait between GetRecords calls on an idle shard (Lambda polls a shard about 4 times a second). */
const IDLE_POLL_MS = 250;
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

export class StreamPoller {
  readonly stats: StreamMappingStats;
  private readonly streams: DynamoDBStreamsClient;
  private startingPosition: 'TRIM_HORIZON' | 'LATEST' = 'TRIM_HORIZON';
  private reportBatchItemFailures = false;
  private readonly shards = new Map<string, Promise<void>>();

  constructor(
    private readonly runtime: RuntimeContext,
    private readonly host: FunctionHost,
    mapping: EventSourceMappingConfiguration,
  ) {
    this.streams = new DynamoDBStreamsClient(runtime.clientConfig);
    this.stats = {
      uuid: mapping.UUID ?? '',
      functionName: host.name,
      streamArn: mapping.EventSourceArn ?? '',
      enabled: false,
      batchSize: 100,
      delivered: 0,
      invocations: 0,
      retries: 0,
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
    this.reportBatchItemFailures = (m.FunctionResponseTypes ?? []).includes('ReportBatchItemFailures');
    if (!enabled) return;
    const description = await this.streams.send(
      new DescribeStreamCommand({ StreamArn: this.stats.streamArn }),
    );
    for (const shard of description.StreamDescription?.Shards ?? []) {
      const id = shard.ShardId;
      if (id && !this.shards.has(id)) this.shards.set(id, this.readShard(id));
    }
  }

  private async iterator(shardId: string, after?: string, at?: string): Promise<string | undefined> {
    const out = await this.streams.send(
      new GetShardIteratorCommand({
        StreamArn: this.stats.streamArn,
        ShardId: shardId,
        ...(at !== undefined
          ? { ShardIteratorType: 'AT_SEQUENCE_NUMBER', SequenceNumber: at }
          : after !== undefined
            ? { ShardIteratorType: 'AFTER_SEQUENCE_NUMBER', SequenceNumber: after }
            : { ShardIteratorType: this.startingPosition }),
      }),
    );
    return out.ShardIterator;
  }

  private async readShard(shardId: string): Promise<void> {
    let iterator: string | undefined;
    /** Last sequence number acknowledged by the function. */
    let done: string | undefined;
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
        iterator = out.NextShardIterator;
        const records = out.Records ?? [];
        if (records.length === 0) {
          await sleep(IDLE_POLL_MS);
          continue;
        }
        const batch = records.map((r) => ({
          sequence: r.dynamodb?.SequenceNumber ?? '',
          event: toLambdaRecord(r, this.stats.streamArn, this.runtime.region),
        }));
        const from = await this.deliver(batch);
        if (from === undefined) {
          done = batch[batch.length - 1]?.sequence;
          this.stats.delivered += batch.length;
          continue;
        }
        // Records before the failed one are done; read again from the failed one.
        const index = batch.findIndex((r) => r.sequence === from);
        this.stats.delivered += Math.max(0, index);
        done = index > 0 ? batch[index - 1]?.sequence : done;
        this.stats.retries += 1;
        iterator = await this.iterator(shardId, undefined, from);
        await sleep(RETRY_MS);
      } catch (err) {
        if (this.runtime.stopped) return;
        this.runtime.emit({
          type: 'error',
          where: `stream ${this.stats.streamArn}`,
          message: errorMessage(err),
        });
        iterator = undefined; // start again after the last acknowledged record
        await sleep(1000);
      }
    }
  }

  /** Invokes one batch; returns the sequence number to retry from, or undefined when it is done. */
  private async deliver(
    batch: { sequence: string; event: Record<string, unknown> }[],
  ): Promise<string | undefined> {
    while (!this.runtime.stopped && !this.host.hasCapacity()) await sleep(50);
    this.stats.invocations += 1;
    let result: InvokeResult;
    try {
      result = await this.host.invoke({ Records: batch.map((r) => r.event) });
    } catch (err) {
      result = { ok: false, error: { errorType: 'Runtime.Error', errorMessage: errorMessage(err) } };
    }
    return retryFrom(batch, result, this.reportBatchItemFailures);
  }

  async stop(): Promise<void> {
    await Promise.allSettled(this.shards.values());
  }
}
