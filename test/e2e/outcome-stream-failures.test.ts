import { GetEventSourceMappingCommand, ListEventSourceMappingsCommand } from '@aws-sdk/client-lambda';
import {
  DeleteMessageBatchCommand,
  GetQueueAttributesCommand,
  type Message,
  ReceiveMessageCommand,
} from '@aws-sdk/client-sqs';
import { PutCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addAwsFaults, awsFaults } from '../../local/emulator/fault-client.js';
import type { LocalStack } from '../../local/stack/local-stack.js';
import { cliEnv, runCli } from '../fixtures/cli.js';
import { sharedE2eStack, uniquePrefix, waitFor } from './harness.js';
import { e2eTarget } from './target.js';

/**
 * The outcome stream's failure handling on the deployed stack (the mapping's settings as the
 * CDK sets them, run by the local runtime's stream poller the way Lambda runs them): a record
 * the publisher can never send is retried MaximumRetryAttempts times, then skipped with
 * Lambda's on-failure record in the failure queue, and the records behind it are published.
 * The poison is made on the wire: the moto launcher refuses every SendMessageBatch that
 * carries its record key, as SQS refuses a message it will not take.
 */
let stack: LocalStack;

/** Receives (and deletes) everything a queue holds now. */
async function drain(queueUrl: string): Promise<Message[]> {
  const all: Message[] = [];
  for (;;) {
    const out = await stack.sqs.send(
      new ReceiveMessageCommand({ QueueUrl: queueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 0 }),
    );
    const messages = out.Messages ?? [];
    if (messages.length === 0) return all;
    all.push(...messages);
    await stack.sqs.send(
      new DeleteMessageBatchCommand({
        QueueUrl: queueUrl,
        Entries: messages.map((m, i) => ({ Id: String(i), ReceiptHandle: m.ReceiptHandle })),
      }),
    );
  }
}

/** A final row as the worker leaves it; the stream carries it to the publisher. */
async function writeSubmitted(recordKey: string): Promise<void> {
  const now = new Date().toISOString();
  await stack.documents.send(
    new PutCommand({
      TableName: stack.outputs.TableName,
      Item: {
        record_key: recordKey,
        status: 'submitted',
        reason: 'OK',
        attempts: 1,
        created_at: now,
        updated_at: now,
      },
    }),
  );
}

describe.skipIf(e2eTarget() !== 'moto')('outcome stream failures (deployed local stack)', () => {
  beforeAll(async () => {
    stack = await sharedE2eStack('stream-failures');
  }, 600_000);
  afterAll(async () => {
    await stack?.stop();
  });

  it('a record the publisher always fails on lands in the failure queue, and the records behind it are published', async () => {
    // Prepare: the publisher's mapping as deployed, and SQS refusing every send of the poison
    const prefix = uniquePrefix('stream');
    const poison = `${prefix}-poison`;
    const behind = Array.from({ length: 5 }, (_, i) => `${prefix}-ok-${i}`);
    const endpoint = stack.moto!.endpoint;
    const mappings = await stack.lambda.send(
      new ListEventSourceMappingsCommand({ FunctionName: `${stack.stackName}-outcome-publisher` }),
    );
    const mapping = await stack.lambda.send(
      new GetEventSourceMappingCommand({ UUID: mappings.EventSourceMappings![0]!.UUID }),
    );
    expect(mapping).toMatchObject({ BisectBatchOnFunctionError: true, MaximumRecordAgeInSeconds: 3600 });
    const retries = mapping.MaximumRetryAttempts!;
    const [rule] = await addAwsFaults(endpoint, [
      {
        operation: 'SendMessageBatch',
        service: 'sqs',
        contains: [poison],
        times: 0,
        error: 'InvalidParameterValue',
        status: 400,
        message: 'One or more parameters are invalid.',
      },
    ]);
    const failedSends = async () => (await awsFaults(endpoint)).find((r) => r.id === rule)?.failed ?? 0;

    // Act: the poison first; the records behind it once the publisher has met it
    await writeSubmitted(poison);
    await waitFor('the first refused send of the poison', async () => (await failedSends()) >= 1);
    for (const key of behind) await writeSubmitted(key);
    const published: Message[] = [];
    const publishedKeys = () =>
      new Set(published.map((m) => (JSON.parse(m.Body ?? '{}') as { record_key: string }).record_key));
    await waitFor('the records behind the poison on the outcomes queue', async () => {
      published.push(...(await drain(stack.outputs.OutcomesQueueUrl!)));
      return behind.every((key) => publishedKeys().has(key));
    });
    const failuresUrl = stack.outputs.OutcomeFailuresQueueUrl!;
    await waitFor('the on-failure record', async () => {
      const a = await stack.sqs.send(
        new GetQueueAttributesCommand({
          QueueUrl: failuresUrl,
          AttributeNames: ['ApproximateNumberOfMessages'],
        }),
      );
      return Number(a.Attributes?.ApproximateNumberOfMessages) > 0;
    });
    const status = await runCli(['status', '--json', '--no-outcomes'], {
      env: cliEnv(undefined, { ...stack.awsEnv, THREADGATE_STACK: stack.stackName }),
    });
    const failures = await drain(failuresUrl);

    // Assess: tried once and retried exactly MaximumRetryAttempts times, never published
    expect(await failedSends()).toBe(1 + retries);
    expect(publishedKeys().has(poison)).toBe(false);
    expect(failures).toHaveLength(1);
    const record = JSON.parse(failures[0]!.Body!) as {
      requestContext: { condition: string; approximateInvokeCount: number };
      DDBStreamBatchInfo: Record<string, unknown>;
    };
    expect(record.requestContext).toMatchObject({
      condition: 'RetryAttemptsExhausted',
      approximateInvokeCount: 1 + retries,
    });
    expect(record.DDBStreamBatchInfo).toMatchObject({
      batchSize: 1,
      streamArn: mapping.EventSourceArn,
      shardId: expect.any(String),
    });
    expect(record.DDBStreamBatchInfo.startSequenceNumber).toBe(record.DDBStreamBatchInfo.endSequenceNumber);
    // Lambda's record names the shard and sequence numbers, not the data.
    expect(failures[0]!.Body).not.toContain(poison);
    // threadgate status shows it to the operator.
    expect(status.code).toBe(0);
    const report = JSON.parse(status.stdout);
    expect(report.outcomeFailures).toEqual({ queueUrl: failuresUrl, depth: 1, inFlight: 0 });
    expect(report.warnings.join('\n')).toContain('1 outcome stream record(s) could not be published');
  });
});
