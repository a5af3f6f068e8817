import {
  DeleteMessageBatchCommand,
  GetQueueAttributesCommand,
  ListMessageMoveTasksCommand,
  type Message,
  PurgeQueueCommand,
  ReceiveMessageCommand,
  SendMessageBatchCommand,
  SQSClient,
  StartMessageMoveTaskCommand,
} from '@aws-sdk/client-sqs';
import { mockClient } from 'aws-sdk-client-mock';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { redrive } from '../cli/commands/redrive.js';
import { awsContext } from '../cli/stack.js';
import { type CliStack, cliEnv, runCli, startCliStack } from './cli-fixture.js';

let stack: CliStack;
let sqs: SQSClient;

async function depth(queueUrl: string): Promise<number> {
  const out = await sqs.send(
    new GetQueueAttributesCommand({
      QueueUrl: queueUrl,
      AttributeNames: ['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible'],
    }),
  );
  return (
    Number(out.Attributes?.ApproximateNumberOfMessages) +
    Number(out.Attributes?.ApproximateNumberOfMessagesNotVisible)
  );
}

/** Puts `count` messages in the DLQ as the worker would: body plus error_code / record_key / reason attributes. */
async function fillDlq(count: number): Promise<string[]> {
  const bodies: string[] = [];
  for (let start = 0; start < count; start += 10) {
    const entries = [];
    for (let i = start; i < Math.min(count, start + 10); i++) {
      const body = JSON.stringify({
        record_key: `dead-${i}`,
        sitekey: 's',
        pageurl: 'https://a.example/',
        submit_url: 'https://a.example/s',
      });
      bodies.push(body);
      entries.push({
        Id: String(i),
        MessageBody: body,
        MessageAttributes: {
          error_code: { DataType: 'String', StringValue: 'ERROR_WRONG_USER_KEY' },
          record_key: { DataType: 'String', StringValue: `dead-${i}` },
          reason: { DataType: 'String', StringValue: 'stop-class error' },
        },
      });
    }
    await sqs.send(new SendMessageBatchCommand({ QueueUrl: stack.outputs.DlqUrl, Entries: entries }));
  }
  return bodies;
}

/** Receives (and deletes) everything in a queue. */
async function drain(queueUrl: string): Promise<Message[]> {
  const all: Message[] = [];
  for (let empty = 0; empty < 2; ) {
    const out = await sqs.send(
      new ReceiveMessageCommand({
        QueueUrl: queueUrl,
        MaxNumberOfMessages: 10,
        MessageAttributeNames: ['All'],
        VisibilityTimeout: 60,
      }),
    );
    const messages = out.Messages ?? [];
    if (messages.length === 0) {
      empty++;
      continue;
    }
    all.push(...messages);
    await sqs.send(
      new DeleteMessageBatchCommand({
        QueueUrl: queueUrl,
        Entries: messages.map((m, i) => ({ Id: String(i), ReceiptHandle: m.ReceiptHandle })),
      }),
    );
  }
  return all;
}

beforeAll(async () => {
  // A jobs queue that takes smaller messages than the DLQ, so one message can be refused.
  stack = await startCliStack({ jobsMaximumMessageSize: 2048 });
  sqs = new SQSClient({ ...stack.clientConfig, useQueueUrlAsEndpoint: false });
});

afterAll(async () => {
  await stack?.stop();
});

beforeEach(async () => {
  await sqs.send(new PurgeQueueCommand({ QueueUrl: stack.outputs.QueueUrl }));
  await sqs.send(new PurgeQueueCommand({ QueueUrl: stack.outputs.DlqUrl }));
});

describe('threadgate redrive', () => {
  it('moves every DLQ message back to the jobs queue exactly once, attributes kept, when the endpoint lacks StartMessageMoveTask', async () => {
    // Prepare
    const bodies = await fillDlq(35);

    // Act
    const run = await runCli(['redrive', '--json'], { env: cliEnv(stack.moto) });

    // Assess
    expect(run.code).toBe(0);
    expect(JSON.parse(run.stdout)).toEqual({ method: 'receive-send-delete', moved: 35, failed: 0 });
    expect(run.stderr).toContain('StartMessageMoveTask is not available');
    expect(await depth(stack.outputs.DlqUrl!)).toBe(0);
    const moved = await drain(stack.outputs.QueueUrl!);
    expect(moved.map((m) => m.Body).sort()).toEqual([...bodies].sort());
    expect(moved[0]?.MessageAttributes?.error_code?.StringValue).toBe('ERROR_WRONG_USER_KEY');
  });

  it('moves at most --max messages and leaves the rest in the DLQ', async () => {
    // Prepare
    await fillDlq(12);

    // Act
    const run = await runCli(['redrive', '--max', '5'], { env: cliEnv(stack.moto) });

    // Assess
    expect(run.code).toBe(0);
    expect(run.stdout).toContain('moved 5 messages');
    expect(await depth(stack.outputs.QueueUrl!)).toBe(5);
    expect(await depth(stack.outputs.DlqUrl!)).toBe(7);
  });

  it('reports progress lines on stderr when not on a terminal', async () => {
    // Prepare
    await fillDlq(3);

    // Act
    const run = await runCli(['redrive'], { env: cliEnv(stack.moto) });

    // Assess
    expect(run.code).toBe(0);
    expect(run.stderr).toMatch(/^redrive: 3\/3 messages 100% .* in \d+:\d\d$/m);
  });

  it('keeps a message the jobs queue refuses in the DLQ, visible, and still moves the others', async () => {
    // Prepare: 11 ordinary messages and one larger than the jobs queue accepts.
    const bodies = await fillDlq(11);
    const tooBig = JSON.stringify({ record_key: 'too-big', form: { note: 'x'.repeat(3000) } });
    await sqs.send(
      new SendMessageBatchCommand({
        QueueUrl: stack.outputs.DlqUrl,
        Entries: [{ Id: 'big', MessageBody: tooBig }],
      }),
    );

    // Act
    const run = await runCli(['redrive', '--json'], { env: cliEnv(stack.moto) });

    // Assess
    expect(run.code).toBe(4);
    expect(JSON.parse(run.stdout)).toEqual({ method: 'receive-send-delete', moved: 11, failed: 1 });
    expect(run.stderr).toMatch(/not sent \(.+\); it stays in the DLQ/);
    expect((await drain(stack.outputs.QueueUrl!)).map((m) => m.Body).sort()).toEqual([...bodies].sort());
    expect((await drain(stack.outputs.DlqUrl!)).map((m) => m.Body)).toEqual([tooBig]);
  });

  it('rejects a --max that is not a positive integer', async () => {
    // Act
    const run = await runCli(['redrive', '--max', '0'], { env: cliEnv(stack.moto) });

    // Assess
    expect(run.code).toBe(2);
    expect(run.stderr).toContain('--max must be a positive integer');
  });
});

describe('redrive where SQS has StartMessageMoveTask (AWS)', () => {
  const queues = {
    dlqUrl: 'https://sqs.eu-west-1.amazonaws.com/123456789012/dlq',
    queueUrl: 'https://sqs.eu-west-1.amazonaws.com/123456789012/jobs',
    queueArn: 'arn:aws:sqs:eu-west-1:123456789012:jobs',
    max: undefined,
  };
  const dlqArn = 'arn:aws:sqs:eu-west-1:123456789012:dlq';

  async function mockedAws() {
    const aws = await awsContext({ region: 'eu-west-1' }, {});
    const sqsMock = mockClient(aws.clients.sqs);
    sqsMock
      .on(GetQueueAttributesCommand)
      .resolves({ Attributes: { QueueArn: dlqArn, ApproximateNumberOfMessages: '40' } });
    return { aws, sqsMock };
  }

  it('starts a move task from the DLQ to the jobs queue and follows it to completion', async () => {
    // Prepare
    const { aws, sqsMock } = await mockedAws();
    sqsMock.on(StartMessageMoveTaskCommand).resolves({ TaskHandle: 'handle-1' });
    sqsMock
      .on(ListMessageMoveTasksCommand)
      .resolvesOnce({
        Results: [
          { Status: 'RUNNING', ApproximateNumberOfMessagesMoved: 10, ApproximateNumberOfMessagesToMove: 40 },
        ],
      })
      .resolves({
        Results: [
          {
            Status: 'COMPLETED',
            ApproximateNumberOfMessagesMoved: 40,
            ApproximateNumberOfMessagesToMove: 40,
          },
        ],
      });

    // Act
    const result = await redrive(aws, queues, { pollMs: 1 });

    // Assess
    expect(result).toEqual({ method: 'StartMessageMoveTask', moved: 40, failed: 0, taskHandle: 'handle-1' });
    expect(sqsMock.commandCalls(StartMessageMoveTaskCommand)[0]?.args[0].input).toEqual({
      SourceArn: dlqArn,
      DestinationArn: queues.queueArn,
    });
    expect(sqsMock.commandCalls(ReceiveMessageCommand)).toHaveLength(0);
  });

  it('follows a move task that is already running instead of moving by hand', async () => {
    // Prepare
    const { aws, sqsMock } = await mockedAws();
    sqsMock
      .on(StartMessageMoveTaskCommand)
      .rejects(Object.assign(new Error('a task is already running'), { name: 'UnsupportedOperation' }));
    sqsMock
      .on(ListMessageMoveTasksCommand)
      .resolvesOnce({
        Results: [{ Status: 'RUNNING', TaskHandle: 'earlier', ApproximateNumberOfMessagesMoved: 5 }],
      })
      .resolves({
        Results: [{ Status: 'COMPLETED', TaskHandle: 'earlier', ApproximateNumberOfMessagesMoved: 40 }],
      });

    // Act
    const result = await redrive(aws, queues, { pollMs: 1 });

    // Assess
    expect(result).toMatchObject({ method: 'StartMessageMoveTask', moved: 40, taskHandle: 'earlier' });
    expect(sqsMock.commandCalls(ReceiveMessageCommand)).toHaveLength(0);
  });

  it('says how many moved and to run again when the task fails', async () => {
    // Prepare
    const { aws, sqsMock } = await mockedAws();
    sqsMock.on(StartMessageMoveTaskCommand).resolves({ TaskHandle: 'handle-2' });
    sqsMock.on(ListMessageMoveTasksCommand).resolves({
      Results: [{ Status: 'FAILED', ApproximateNumberOfMessagesMoved: 12, FailureReason: 'AccessDenied' }],
    });

    // Act + Assess
    await expect(redrive(aws, queues, { pollMs: 1 })).rejects.toThrow(
      /move task failed after 12 messages: AccessDenied; run `threadgate redrive` again/,
    );
  });
});
