import {
  DynamoDBClient,
  GetItemCommand,
  PutItemCommand,
  QueryCommand,
  UpdateItemCommand,
} from '@aws-sdk/client-dynamodb';
import {
  CreateQueueCommand,
  ReceiveMessageCommand,
  SendMessageCommand,
  SQSClient,
} from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { BATCH_INDEX_NAME } from '../../../../functions/records/batch-index.js';
import type { MotoServer } from '../../../../local/emulator/moto.js';
import {
  type AwsUsageRow,
  awsUsage,
  RUNTIME_USER_AGENT,
  resetAwsUsage,
} from '../../../../local/emulator/usage.js';
import { createOutcomeTable, startMoto } from '../../../fixtures/aws.js';

/**
 * The moto launcher's usage counts (local/emulator/usage.py) over real HTTP with the AWS SDK:
 * requests by caller and operation, and the DynamoDB request units AWS bills (item size, the
 * batch index a row with a batch_id is written to, failed conditional writes, read consistency).
 */
let moto: MotoServer;
const TABLE = 'usage-outcomes';

function config(extra: Record<string, unknown> = {}) {
  return {
    endpoint: moto.endpoint,
    region: 'us-east-1',
    credentials: { accessKeyId: 'testing', secretAccessKey: 'testing' },
    maxAttempts: 1,
    ...extra,
  };
}

let harness: DynamoDBClient;
let fn: DynamoDBClient;

beforeAll(async () => {
  moto = await startMoto();
  harness = new DynamoDBClient(config());
  // A function's client: the runtime's AWS_SDK_UA_APP_ID (AWS_EXECUTION_ENV is set per call below).
  fn = new DynamoDBClient(config({ userAgentAppId: 'tg-worker' }));
  await createOutcomeTable(harness, TABLE);
});
afterAll(async () => {
  await moto?.stop();
});
beforeEach(async () => {
  await resetAwsUsage(moto.endpoint);
});

async function rows(op: string, caller?: string): Promise<AwsUsageRow[]> {
  return (await awsUsage(moto.endpoint)).calls.filter(
    (r) => r.operation === op && (caller === undefined || r.caller === caller),
  );
}

const sum = (list: AwsUsageRow[], f: (r: AwsUsageRow) => number) => list.reduce((a, r) => a + f(r), 0);

describe('moto launcher usage counts', () => {
  it('bills a write on its size and once more in the batch index when the row has a batch_id', async () => {
    const big = 'x'.repeat(1500); // with the names and the key: over 1 KB, under 2 KB
    await harness.send(
      new PutItemCommand({ TableName: TABLE, Item: { record_key: { S: 'a' }, note: { S: big } } }),
    );
    await harness.send(
      new PutItemCommand({
        TableName: TABLE,
        Item: {
          record_key: { S: 'b' },
          batch_id: { S: 'batch-1' },
          batch_shard: { S: 'batch-1#0' },
          status_at: { S: '2026-12-03T12:00:00Z' },
        },
      }),
    );
    const puts = await rows('PutItem', 'harness');
    expect(sum(puts, (r) => r.requests)).toBe(2);
    expect(sum(puts, (r) => r.write_units)).toBe(3); // 2 for the 1.5 KB row, 1 for the small one
    expect(sum(puts, (r) => r.index_write_units)).toBe(1); // only the row with a batch_id
  });

  it('bills a failed conditional write on the item as it stands and counts the failure', async () => {
    await harness.send(new PutItemCommand({ TableName: TABLE, Item: { record_key: { S: 'c' } } }));
    await resetAwsUsage(moto.endpoint);
    const claim = () =>
      harness.send(
        new UpdateItemCommand({
          TableName: TABLE,
          Key: { record_key: { S: 'c' } },
          UpdateExpression: 'SET #s = :s',
          ConditionExpression: 'attribute_not_exists(#s)',
          ExpressionAttributeNames: { '#s': 'status' },
          ExpressionAttributeValues: { ':s': { S: 'claimed' } },
        }),
      );
    await claim();
    await expect(claim()).rejects.toThrow();
    const [row] = await rows('UpdateItem');
    expect(row).toMatchObject({ requests: 2, errors: 1, conditional_failures: 1, write_units: 2 });
  });

  it('moves an index entry with two index writes when its key changes', async () => {
    const put = (statusAt: string) =>
      harness.send(
        new PutItemCommand({
          TableName: TABLE,
          Item: { record_key: { S: 'd' }, batch_shard: { S: 'b#0' }, status_at: { S: statusAt } },
        }),
      );
    await put('1');
    await resetAwsUsage(moto.endpoint);
    await put('2');
    const [row] = await rows('PutItem');
    expect(row).toMatchObject({ write_units: 1, index_write_units: 2 });
  });

  it('halves the read units of an eventually consistent read, and sums a Query before rounding', async () => {
    await harness.send(new GetItemCommand({ TableName: TABLE, Key: { record_key: { S: 'a' } } }));
    await harness.send(
      new GetItemCommand({ TableName: TABLE, Key: { record_key: { S: 'a' } }, ConsistentRead: true }),
    );
    await harness.send(
      new QueryCommand({
        TableName: TABLE,
        IndexName: BATCH_INDEX_NAME,
        KeyConditionExpression: 'batch_shard = :b',
        ExpressionAttributeValues: { ':b': { S: 'batch-1#0' } },
      }),
    );
    expect(sum(await rows('GetItem'), (r) => r.read_units)).toBe(1.5);
    const [query] = await rows('Query');
    expect(query).toMatchObject({ read_units: 0.5, resource: `${TABLE}/${BATCH_INDEX_NAME}` });
  });

  it('names the caller: a function by its app id, the local runtime, the harness', async () => {
    process.env.AWS_EXECUTION_ENV = 'AWS_Lambda_nodejs22.x';
    try {
      await fn.send(new GetItemCommand({ TableName: TABLE, Key: { record_key: { S: 'a' } } }));
    } finally {
      delete process.env.AWS_EXECUTION_ENV;
    }
    const sqs = new SQSClient(config({ customUserAgent: RUNTIME_USER_AGENT }));
    const { QueueUrl } = await sqs.send(new CreateQueueCommand({ QueueName: 'usage-jobs' }));
    await new SQSClient(config()).send(new SendMessageCommand({ QueueUrl, MessageBody: 'x'.repeat(70_000) }));
    await sqs.send(new ReceiveMessageCommand({ QueueUrl, MaxNumberOfMessages: 1 }));
    const calls = (await awsUsage(moto.endpoint)).calls;
    expect(calls.find((r) => r.operation === 'GetItem')?.caller).toBe('function:tg-worker');
    expect(calls.find((r) => r.operation === 'ReceiveMessage')).toMatchObject({
      caller: 'runtime',
      resource: 'usage-jobs',
      billed_requests: 2, // a 70 KB message is two 64 KB chunks
    });
    expect(calls.find((r) => r.operation === 'SendMessage')).toMatchObject({
      caller: 'harness',
      billed_requests: 2,
    });
  });
});
