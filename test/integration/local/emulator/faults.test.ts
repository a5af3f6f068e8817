import { DynamoDBClient, GetItemCommand, PutItemCommand, UpdateItemCommand } from '@aws-sdk/client-dynamodb';
import {
  CreateQueueCommand,
  GetQueueAttributesCommand,
  ReceiveMessageCommand,
  SendMessageCommand,
  SQSClient,
} from '@aws-sdk/client-sqs';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  addAwsFaults,
  awsFaults,
  awsRequests,
  clearAwsFaults,
} from '../../../../local/emulator/fault-client.js';
import type { MotoServer } from '../../../../local/emulator/moto.js';
import { createOutcomeTable, startMoto } from '../../../fixtures/aws.js';

/**
 * The moto launcher's fault rules (local/emulator/faults.py) over real HTTP with the AWS SDK:
 * the Nth matching call fails with the chosen AWS error, only for the chosen key, and the
 * request log shows what was asked and answered.
 */
let moto: MotoServer;
let aws: { ddb: DynamoDBClient; sqs: SQSClient };
const TABLE = 'fault-outcomes';

beforeAll(async () => {
  moto = await startMoto();
  aws = { ddb: new DynamoDBClient(clientConfig()), sqs: new SQSClient(clientConfig()) };
  await createOutcomeTable(aws.ddb, TABLE);
});
afterAll(async () => {
  await moto?.stop();
});
afterEach(async () => {
  await clearAwsFaults(moto.endpoint);
});

function update(key: string, status: string) {
  return aws.ddb.send(
    new UpdateItemCommand({
      TableName: TABLE,
      Key: { record_key: { S: key } },
      UpdateExpression: 'SET #s = :status',
      ExpressionAttributeNames: { '#s': 'status' },
      ExpressionAttributeValues: { ':status': { S: status } },
    }),
  );
}

/** One attempt per call, so every injected failure reaches the test (the SDK would retry). */
function clientConfig() {
  return {
    endpoint: moto.endpoint,
    region: 'us-east-1',
    credentials: { accessKeyId: 'testing', secretAccessKey: 'testing' },
    maxAttempts: 1,
  };
}

/** A client that gives up on a call after 300 ms (and closes its connection). */
function impatientConfig() {
  return { ...clientConfig(), requestHandler: { requestTimeout: 300, throwOnRequestTimeout: true as const } };
}

async function outcome(call: Promise<unknown>): Promise<string> {
  try {
    await call;
    return 'ok';
  } catch (err) {
    return (err as { name: string }).name;
  }
}

async function statusOf(key: string): Promise<string | undefined> {
  const out = await aws.ddb.send(new GetItemCommand({ TableName: TABLE, Key: { record_key: { S: key } } }));
  return out.Item?.status?.S;
}

describe('moto launcher fault injection', () => {
  it('fails the nth UpdateItem of one key with the chosen error, and only that one', async () => {
    await addAwsFaults(moto.endpoint, [
      {
        operation: 'UpdateItem',
        key: { record_key: 'k-1' },
        nth: 2,
        error: 'ProvisionedThroughputExceededException',
      },
    ]);
    const results = [];
    for (const status of ['a', 'b', 'c']) results.push(await outcome(update('k-1', status)));
    results.push(await outcome(update('k-2', 'x')));
    expect(results).toEqual(['ok', 'ProvisionedThroughputExceededException', 'ok', 'ok']);
    // The failed call did not land: 'c' followed 'a'.
    expect(await statusOf('k-1')).toBe('c');
    const [rule] = await awsFaults(moto.endpoint);
    expect(rule).toMatchObject({ seen: 3, failed: 1, status: 400 });
  });

  it('fails a run of calls (times), every call (times 0), and only calls whose body contains a string', async () => {
    await addAwsFaults(moto.endpoint, [
      { operation: 'UpdateItem', key: { record_key: 'k-3' }, times: 2 },
      { operation: 'UpdateItem', key: { record_key: 'k-4' }, times: 0, contains: ['"S":"final"'] },
    ]);
    const run = [];
    for (let i = 0; i < 3; i++) run.push(await outcome(update('k-3', `v${i}`)));
    expect(run).toEqual(['InternalServerError', 'InternalServerError', 'ok']);
    const always = [];
    for (let i = 0; i < 4; i++) always.push(await outcome(update('k-4', 'final')));
    always.push(await outcome(update('k-4', 'other')));
    expect(always).toEqual([
      'InternalServerError',
      'InternalServerError',
      'InternalServerError',
      'InternalServerError',
      'ok',
    ]);
    expect(await statusOf('k-4')).toBe('other');
  });

  it('apply: the write lands and only its answer is the error (an answer lost after the write)', async () => {
    await addAwsFaults(moto.endpoint, [
      { operation: 'PutItem', key: { record_key: 'k-5' }, apply: true, error: 'InternalServerError' },
    ]);
    const put = aws.ddb.send(
      new PutItemCommand({ TableName: TABLE, Item: { record_key: { S: 'k-5' }, status: { S: 'landed' } } }),
    );
    expect(await outcome(put)).toBe('InternalServerError');
    expect(await statusOf('k-5')).toBe('landed');
  });

  it('rate: fails a seeded share of the matching calls, the same ones for the same seed', async () => {
    const pattern = async (key: string, seed: number) => {
      await addAwsFaults(moto.endpoint, [
        { operation: 'UpdateItem', key: { record_key: key }, rate: 0.3, seed },
      ]);
      const out = [];
      for (let i = 0; i < 20; i++) out.push(await outcome(update(key, `v${i}`)));
      return out;
    };
    const a = await pattern('k-7', 5);
    const b = await pattern('k-8', 5);
    expect(a).toEqual(b);
    expect(a.filter((r) => r !== 'ok').length).toBeGreaterThan(0);
    expect(a.filter((r) => r === 'ok').length).toBeGreaterThan(0);
  });

  it('fails SQS calls too', async () => {
    const { QueueUrl } = await aws.sqs.send(new CreateQueueCommand({ QueueName: 'fault-q' }));
    await addAwsFaults(moto.endpoint, [
      { operation: 'SendMessage', service: 'sqs', error: 'ServiceUnavailable' },
    ]);
    const first = await outcome(aws.sqs.send(new SendMessageCommand({ QueueUrl, MessageBody: 'one' })));
    const second = await outcome(aws.sqs.send(new SendMessageCommand({ QueueUrl, MessageBody: 'two' })));
    expect([first, second]).toEqual(['ServiceUnavailable', 'ok']);
    const attrs = await aws.sqs.send(
      new GetQueueAttributesCommand({ QueueUrl, AttributeNames: ['ApproximateNumberOfMessages'] }),
    );
    expect(attrs.Attributes?.ApproximateNumberOfMessages).toBe('1');
  });

  it('logs each request with its operation, key, expressions, status and the rule that failed it', async () => {
    const { next } = await awsRequests(moto.endpoint);
    await addAwsFaults(moto.endpoint, [
      { operation: 'UpdateItem', key: { record_key: 'k-6' }, error: 'ThrottlingException' },
    ]);
    await outcome(update('k-6', 'first'));
    await outcome(update('k-6', 'second'));
    const { entries } = await awsRequests(moto.endpoint, next);
    const writes = entries.filter((e) => e.key?.record_key === 'k-6');
    expect(writes.map((e) => [e.op, e.status, e.fault !== undefined, e.values?.[':status']])).toEqual([
      ['DynamoDB_20120810.UpdateItem', 400, true, 'first'],
      ['DynamoDB_20120810.UpdateItem', 200, false, 'second'],
    ]);
    expect(writes[0]?.update).toBe('SET #s = :status');
    expect(entries.every((e) => e.seq > next)).toBe(true);
  });

  it('delay_ms: a slow DynamoDB call holds the others; one whose client gave up meanwhile is not carried out', async () => {
    // Prepare: every GetItem of k-slow takes 1.5 s holding the DynamoDB lock, as a slow call does
    await addAwsFaults(moto.endpoint, [
      { operation: 'GetItem', key: { record_key: 'k-slow' }, delay_ms: 1500 },
    ]);
    const { next } = await awsRequests(moto.endpoint);
    const impatient = new DynamoDBClient(impatientConfig());
    // Act: while the slow read holds the lock, one write from a client that gives up after
    // 300 ms, and one from a patient client
    const slow = statusOf('k-slow');
    await new Promise((resolve) => setTimeout(resolve, 200));
    const abandoned = outcome(
      impatient.send(
        new PutItemCommand({
          TableName: TABLE,
          Item: { record_key: { S: 'k-gone' }, status: { S: 'written' } },
        }),
      ),
    );
    const patient = outcome(update('k-stays', 'written'));
    // Assess: the slow read answered; the impatient client timed out and its write never
    // landed; the patient one waited its turn and landed
    expect(await slow).toBeUndefined();
    expect(await abandoned).toBe('TimeoutError');
    expect(await patient).toBe('ok');
    expect(await statusOf('k-gone')).toBeUndefined();
    expect(await statusOf('k-stays')).toBe('written');
    const { entries } = await awsRequests(moto.endpoint, next);
    // (a PutItem's item is never logged: the one PutItem is the abandoned write)
    expect(entries.filter((e) => e.op.endsWith('.PutItem')).map((e) => e.status)).toEqual([499]);
    const [rule] = await awsFaults(moto.endpoint);
    expect(rule).toMatchObject({ delay_ms: 1500, seen: 1 });
    impatient.destroy();
  });

  it('a receive whose client gave up while a slow SQS call held the queues is not carried out: no receive spent', async () => {
    // Prepare: a queue that shows a received message again at once; its one message is sent by
    // a call that takes 1.5 s holding the queue lock
    const { QueueUrl } = await aws.sqs.send(
      new CreateQueueCommand({ QueueName: 'shed-q', Attributes: { VisibilityTimeout: '0' } }),
    );
    await addAwsFaults(moto.endpoint, [{ operation: 'SendMessage', service: 'sqs', delay_ms: 1500 }]);
    const impatient = new SQSClient(impatientConfig());
    // Act: a receive from a client that gives up after 300 ms, made while the send holds the lock
    const sent = outcome(aws.sqs.send(new SendMessageCommand({ QueueUrl, MessageBody: 'one' })));
    await new Promise((resolve) => setTimeout(resolve, 200));
    const abandoned = outcome(impatient.send(new ReceiveMessageCommand({ QueueUrl, WaitTimeSeconds: 0 })));
    expect(await abandoned).toBe('TimeoutError');
    expect(await sent).toBe('ok');
    // Assess: the next receive is the message's first (the abandoned one took nothing)
    const { Messages } = await aws.sqs.send(
      new ReceiveMessageCommand({ QueueUrl, MessageSystemAttributeNames: ['ApproximateReceiveCount'] }),
    );
    expect(Messages?.map((m) => m.Attributes?.ApproximateReceiveCount)).toEqual(['1']);
    impatient.destroy();
  });

  it('refuses a malformed rule with a message that names the field', async () => {
    await expect(addAwsFaults(moto.endpoint, [{ operation: 'UpdateItem', nth: 0 }])).rejects.toThrow(/nth/);
    await expect(
      addAwsFaults(moto.endpoint, [{ operation: 'UpdateItem', bogus: 1 } as never]),
    ).rejects.toThrow(/bogus/);
    expect(await awsFaults(moto.endpoint)).toEqual([]);
  });
});
