import { Logger } from '@aws-lambda-powertools/logger';
import { CreateTableCommand, DescribeTableCommand } from '@aws-sdk/client-dynamodb';
import {
  DescribeStreamCommand,
  DynamoDBStreamsClient,
  GetRecordsCommand,
  GetShardIteratorCommand,
} from '@aws-sdk/client-dynamodb-streams';
import { CreateQueueCommand, type SQSClient } from '@aws-sdk/client-sqs';
import type { DynamoDBRecord, DynamoDBStreamEvent } from 'aws-lambda';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError } from '../../../functions/common/errors.js';
import {
  OUTCOME_MESSAGE_FIELDS,
  outcomeMessageOf,
  publishOutcomes,
  readPublisherConfig,
} from '../../../functions/outcome-publisher.js';
import { OutcomesStore } from '../../../functions/records/store.js';
import { addAwsFaults, clearAwsFaults } from '../../../local/emulator/fault-client.js';
import { MOTO_REGION, type MotoServer } from '../../../local/emulator/moto.js';
import { type AwsClients, clientsFor, receive, startMoto } from '../../fixtures/aws.js';

let moto: MotoServer;
let clients: AwsClients;
let streams: DynamoDBStreamsClient;
let next = 0;
const logger = new Logger({ logLevel: 'SILENT' });

beforeAll(async () => {
  moto = await startMoto();
  clients = clientsFor(moto);
  streams = new DynamoDBStreamsClient({
    endpoint: moto.endpoint,
    region: MOTO_REGION,
    credentials: { accessKeyId: 'testing', secretAccessKey: 'testing' },
  });
});
afterAll(async () => {
  await moto?.stop();
});

/** A table with a NEW_AND_OLD_IMAGES stream, a store on it, and the stream's records so far. */
async function streamedTable() {
  const tableName = `publisher-${++next}`;
  await clients.ddb.send(
    new CreateTableCommand({
      TableName: tableName,
      KeySchema: [{ AttributeName: 'record_key', KeyType: 'HASH' }],
      AttributeDefinitions: [{ AttributeName: 'record_key', AttributeType: 'S' }],
      BillingMode: 'PAY_PER_REQUEST',
      StreamSpecification: { StreamEnabled: true, StreamViewType: 'NEW_AND_OLD_IMAGES' },
    }),
  );
  const table = await clients.ddb.send(new DescribeTableCommand({ TableName: tableName }));
  const streamArn = table.Table!.LatestStreamArn!;
  const store = new OutcomesStore({ client: clients.ddb, tableName });
  return {
    store,
    /** Every record of the stream from its start, in the shape Lambda hands a stream mapping. */
    async event(): Promise<DynamoDBStreamEvent> {
      const shard = (await streams.send(new DescribeStreamCommand({ StreamArn: streamArn })))
        .StreamDescription!.Shards![0]!;
      const iterator = await streams.send(
        new GetShardIteratorCommand({
          StreamArn: streamArn,
          ShardId: shard.ShardId,
          ShardIteratorType: 'TRIM_HORIZON',
        }),
      );
      const out = await streams.send(new GetRecordsCommand({ ShardIterator: iterator.ShardIterator }));
      return { Records: (out.Records ?? []) as unknown as DynamoDBRecord[] };
    },
  };
}

async function outcomesQueue(sqs: SQSClient): Promise<string> {
  const out = await sqs.send(new CreateQueueCommand({ QueueName: `outcomes-${++next}` }));
  return out.QueueUrl!;
}

const lease = { leaseMs: 60_000, captchaType: 'recaptcha_v2' };

describe('outcome publisher (moto DynamoDB stream and SQS)', () => {
  it('publishes each final outcome once and nothing for claims and releases', async () => {
    // Prepare: submitted, failed (after a release), rejected, stopped then claimed again
    const t = await streamedTable();
    const queueUrl = await outcomesQueue(clients.sqs);
    await t.store.claim('ok', { owner: 'a', ...lease, batchId: 'b1' });
    await t.store.finish('ok', 'a', {
      status: 'submitted',
      reason: 'OK',
      targetStatus: 200,
      attempts: 1,
      solveMs: 900,
    });
    await t.store.claim('bad', { owner: 'a', ...lease, batchId: 'b1' });
    await t.store.release('bad', 'a', 1);
    await t.store.claim('bad', { owner: 'b', ...lease, batchId: 'b1' });
    await t.store.finish('bad', 'b', { status: 'failed', reason: 'TARGET_HTTP_500', targetStatus: 500 });
    await t.store.reject('odd', 'pageurl: must be an absolute http(s) URL', 'b1');
    await t.store.claim('halt', { owner: 'a', ...lease });
    await t.store.finish('halt', 'a', { status: 'stopped', reason: 'ERROR_KEY_DOES_NOT_EXIST', attempts: 1 });
    await t.store.claim('halt', { owner: 'b', ...lease });
    const event = await t.event();
    // Act
    const result = await publishOutcomes(event, { sqs: clients.sqs, queueUrl, logger });
    // Assess
    expect(result.batchItemFailures).toEqual([]);
    const messages = await receive(clients.sqs, queueUrl, 10, 0);
    const bodies = messages.map((m) => JSON.parse(m.Body!) as Record<string, unknown>);
    expect(bodies.map((b) => [b.record_key, b.status]).sort()).toEqual(
      [
        ['bad', 'failed'],
        ['halt', 'stopped'],
        ['odd', 'rejected'],
        ['ok', 'submitted'],
      ].sort(),
    );
    expect(bodies.find((b) => b.record_key === 'ok')).toMatchObject({
      batch_id: 'b1',
      reason: 'OK',
      target_status: 200,
      attempts: 1,
      captcha_type: 'recaptcha_v2',
      solve_ms: 900,
      created_at: expect.any(String),
      updated_at: expect.any(String),
    });
    for (const body of bodies) {
      expect(Object.keys(body).every((k) => (OUTCOME_MESSAGE_FIELDS as readonly string[]).includes(k))).toBe(
        true,
      );
      expect(body).not.toHaveProperty('lease_owner');
    }
    const ok = messages.find((m) => JSON.parse(m.Body!).record_key === 'ok')!;
    expect(ok.MessageAttributes?.status?.StringValue).toBe('submitted');
    expect(ok.MessageAttributes?.batch_id?.StringValue).toBe('b1');
  });

  it('reports only the record SQS refuses, resending the rest of a refused call one by one', async () => {
    // Prepare: 12 final outcomes (two SendMessageBatch calls); the emulator refuses every send that
    // carries r11, so the second call (r10, r11) fails as a whole
    const t = await streamedTable();
    for (let i = 0; i < 12; i++) await t.store.reject(`r${i}`, 'sitekey: is required');
    const event = await t.event();
    const queueUrl = await outcomesQueue(clients.sqs);
    await addAwsFaults(moto.endpoint, [
      {
        operation: 'SendMessageBatch',
        service: 'sqs',
        contains: ['\\"r11\\"'],
        times: 0,
        error: 'InvalidParameterValue',
      },
    ]);
    // Act
    const result = await publishOutcomes(event, { sqs: clients.sqs, queueUrl, logger });
    await clearAwsFaults(moto.endpoint);
    // Assess
    // (moto writes a new row as two stream records, the key alone and then the update.)
    const final = event.Records.filter((r) => outcomeMessageOf(r) !== undefined);
    expect(final).toHaveLength(12);
    const poison = final.find((r) => outcomeMessageOf(r)?.record_key === 'r11')!.dynamodb!.SequenceNumber!;
    expect(result.batchItemFailures.map((f) => f.itemIdentifier)).toEqual([poison]);
    const sent = [
      ...(await receive(clients.sqs, queueUrl, 10, 30)),
      ...(await receive(clients.sqs, queueUrl, 10, 30)),
    ].map((m) => JSON.parse(m.Body!).record_key);
    expect(sent.sort()).toEqual(Array.from({ length: 11 }, (_, i) => `r${i}`).sort());
  });

  it('ignores a record whose status did not change to a final one', () => {
    const image = (status: string) => ({ record_key: { S: 'k' }, status: { S: status } });
    const record = (old: unknown, now: unknown) =>
      ({ dynamodb: { OldImage: old, NewImage: now, SequenceNumber: '1' } }) as unknown as DynamoDBRecord;
    expect(outcomeMessageOf(record(image('in_progress'), image('in_progress')))).toBeUndefined();
    expect(outcomeMessageOf(record(image('submitted'), image('submitted')))).toBeUndefined();
    expect(outcomeMessageOf(record(image('submitted'), undefined))).toBeUndefined();
    expect(outcomeMessageOf(record(image('stopped'), image('submitted')))).toEqual({
      record_key: 'k',
      status: 'submitted',
    });
  });

  it('names OUTCOMES_QUEUE_URL when it is missing', () => {
    expect(() => readPublisherConfig({})).toThrow(ConfigError);
    expect(() => readPublisherConfig({})).toThrow(/^OUTCOMES_QUEUE_URL: is required/);
  });
});
