import {
  DeleteMessageBatchCommand,
  GetQueueAttributesCommand,
  type Message,
  PurgeQueueCommand,
  ReceiveMessageCommand,
  SendMessageBatchCommand,
  SQSClient,
} from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
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
