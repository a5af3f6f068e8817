import { Logger } from '@aws-lambda-powertools/logger';
import type { AttributeValue } from '@aws-sdk/client-dynamodb';
import { SendMessageBatchCommand, type SendMessageBatchRequestEntry, SQSClient } from '@aws-sdk/client-sqs';
import type { DynamoDBBatchResponse, DynamoDBRecord, DynamoDBStreamEvent } from 'aws-lambda';
import { awsClientOptions } from './common/aws-clients.js';
import { ConfigError } from './common/errors.js';
import { ENDED_STATUSES, OUTCOME_FIELDS } from './records/fields.js';

/**
 * The outcome publisher: the outcome table's stream in, one SQS message per final outcome out.
 * Publishing from the stream (not from the worker) is what makes it survive a worker crash:
 * once the final write is in the table, its stream record exists and this function sends it,
 * whatever happened to the invocation that wrote it.
 *
 * A record is published when its new image has a final status (submitted, failed, rejected,
 * stopped) that the old image did not have: claims, releases and lease renewals publish
 * nothing. At-least-once: a retried batch sends again, so consumers upsert on record_key
 * (a `stopped` record that is redriven later publishes its next final status too; the newer
 * `updated_at` wins).
 *
 * The message carries only the fields named in OUTCOME_MESSAGE_FIELDS, never a token, a key or
 * the lease owner.
 */

export const PUBLISHED_STATUSES: ReadonlySet<string> = new Set(ENDED_STATUSES);

/** Fields of an outcome message, in order; everything else on the row stays in the table. */
export const OUTCOME_MESSAGE_FIELDS = OUTCOME_FIELDS;

export type OutcomeMessage = Partial<Record<(typeof OUTCOME_MESSAGE_FIELDS)[number], string | number>> & {
  record_key: string;
  status: string;
};

/** SQS takes at most 10 entries per SendMessageBatch. */
const BATCH_ENTRIES = 10;

type Image = Record<string, AttributeValue> | undefined;

function text(image: Image, name: string): string | undefined {
  return image?.[name]?.S;
}

/** The message for a stream record, or undefined when the record is not a new final outcome. */
export function outcomeMessageOf(record: DynamoDBRecord): OutcomeMessage | undefined {
  // The aws-lambda stream types are structurally the SDK's AttributeValue.
  const next = record.dynamodb?.NewImage as Image;
  const previous = record.dynamodb?.OldImage as Image;
  const status = text(next, 'status');
  const key = text(next, 'record_key');
  if (!status || !key || !PUBLISHED_STATUSES.has(status)) return undefined;
  if (text(previous, 'status') === status) return undefined;
  const message: Record<string, string | number> = {};
  for (const field of OUTCOME_MESSAGE_FIELDS) {
    const value = next?.[field];
    if (value?.S !== undefined) message[field] = value.S;
    else if (value?.N !== undefined) message[field] = Number(value.N);
  }
  return message as OutcomeMessage;
}

function entryOf(message: OutcomeMessage, id: string): SendMessageBatchRequestEntry {
  const attributes: SendMessageBatchRequestEntry['MessageAttributes'] = {
    record_key: { DataType: 'String', StringValue: message.record_key },
    status: { DataType: 'String', StringValue: message.status },
  };
  if (typeof message.batch_id === 'string') {
    attributes.batch_id = { DataType: 'String', StringValue: message.batch_id };
  }
  return { Id: id, MessageBody: JSON.stringify(message), MessageAttributes: attributes };
}

export interface PublisherDeps {
  sqs: SQSClient;
  queueUrl: string;
  logger: Logger;
}

type Pending = { sequence: string; message: OutcomeMessage };

/** One SendMessageBatch; the sequence numbers of the entries SQS did not take. */
async function sendBatch(chunk: Pending[], deps: PublisherDeps): Promise<string[]> {
  const out = await deps.sqs.send(
    new SendMessageBatchCommand({
      QueueUrl: deps.queueUrl,
      Entries: chunk.map((p, j) => entryOf(p.message, String(j))),
    }),
  );
  return (out.Failed ?? []).flatMap((f) => chunk[Number(f.Id)]?.sequence ?? []);
}

/**
 * Sends a chunk; when SQS refuses the whole call, each entry is sent again on its own, so a record
 * that can never be sent fails alone and does not take the good records of its call with it to
 * the stream's failure destination.
 */
async function sendChunk(chunk: Pending[], deps: PublisherDeps): Promise<string[]> {
  try {
    return await sendBatch(chunk, deps);
  } catch (err) {
    if (chunk.length > 1) return (await Promise.all(chunk.map((p) => sendChunk([p], deps)))).flat();
    deps.logger.error('could not publish an outcome; the stream will retry it', {
      errorName: (err as Error).name,
      errorMessage: (err as Error).message,
      record_key: chunk[0]?.message.record_key,
    });
    return chunk.map((p) => p.sequence);
  }
}

/**
 * Publishes a stream batch. Returns Lambda's partial batch response for streams: the sequence
 * numbers of records not sent (Lambda retries the batch from the lowest of them, so nothing
 * after a failure is skipped). A record is reported only when it could not be sent on its own.
 */
export async function publishOutcomes(
  event: DynamoDBStreamEvent,
  deps: PublisherDeps,
): Promise<DynamoDBBatchResponse> {
  const pending: Pending[] = [];
  for (const record of event.Records) {
    const message = outcomeMessageOf(record);
    const sequence = record.dynamodb?.SequenceNumber;
    if (message && sequence) pending.push({ sequence, message });
  }
  const failed: string[] = [];
  for (let i = 0; i < pending.length; i += BATCH_ENTRIES) {
    failed.push(...(await sendChunk(pending.slice(i, i + BATCH_ENTRIES), deps)));
  }
  deps.logger.info('published outcomes', {
    records: event.Records.length,
    published: pending.length - failed.length,
    failed: failed.length,
  });
  return { batchItemFailures: failed.map((itemIdentifier) => ({ itemIdentifier })) };
}

/** Reads the publisher's configuration: OUTCOMES_QUEUE_URL. */
export function readPublisherConfig(env: NodeJS.ProcessEnv): { queueUrl: string } {
  const queueUrl = env.OUTCOMES_QUEUE_URL?.trim();
  if (!queueUrl) throw new ConfigError('OUTCOMES_QUEUE_URL', 'is required (the outcomes queue URL)');
  return { queueUrl };
}

let moduleDeps: PublisherDeps | undefined;

/** Lambda entry point: config read and clients created once per instance. */
export const handler = async (event: DynamoDBStreamEvent): Promise<DynamoDBBatchResponse> => {
  moduleDeps ??= {
    ...readPublisherConfig(process.env),
    sqs: new SQSClient(awsClientOptions()),
    logger: new Logger({
      serviceName: process.env.POWERTOOLS_SERVICE_NAME ?? 'threadgate-outcome-publisher',
    }),
  };
  if (!Array.isArray(event?.Records)) {
    throw new TypeError('the outcome publisher expects a DynamoDB stream event with a Records array');
  }
  return publishOutcomes(event, moduleDeps);
};
