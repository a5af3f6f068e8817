import {
  CancelMessageMoveTaskCommand,
  DeleteMessageBatchCommand,
  GetQueueAttributesCommand,
  ListMessageMoveTasksCommand,
  type Message,
  PurgeQueueCommand,
  ReceiveMessageCommand,
  SendMessageBatchCommand,
  SendMessageCommand,
  SQSClient,
  StartMessageMoveTaskCommand,
} from '@aws-sdk/client-sqs';
import { mockClient } from 'aws-sdk-client-mock';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { redrive } from '../../../cli/commands/redrive.js';
import { awsContext } from '../../../cli/stack.js';
import { type CliStack, cliEnv, runCli, startCliStack } from '../../fixtures/cli.js';

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

const invalidJobAttributes = {
  error_code: { DataType: 'String', StringValue: 'INVALID_JOB' },
  reason: { DataType: 'String', StringValue: 'body is not valid JSON' },
};

/**
 * A stand-in for a worker that fails every message again: it receives from the jobs queue and
 * sends each body (with the worker's DLQ attributes) back to the DLQ. stop() lets it empty the
 * jobs queue first and returns the bodies it received.
 */
function bouncingWorker(): { stop(): Promise<string[]> } {
  const received: string[] = [];
  let stopping = false;
  const loop = (async () => {
    for (;;) {
      const out = await sqs.send(
        new ReceiveMessageCommand({
          QueueUrl: stack.outputs.QueueUrl,
          MaxNumberOfMessages: 10,
          WaitTimeSeconds: 1,
          MessageAttributeNames: ['All'],
        }),
      );
      if (stopping && !out.Messages?.length) return;
      for (const m of out.Messages ?? []) {
        received.push(m.Body ?? '');
        await sqs.send(
          new SendMessageBatchCommand({
            QueueUrl: stack.outputs.DlqUrl,
            Entries: [{ Id: '0', MessageBody: m.Body ?? '', MessageAttributes: m.MessageAttributes }],
          }),
        );
        await sqs.send(
          new DeleteMessageBatchCommand({
            QueueUrl: stack.outputs.QueueUrl,
            Entries: [{ Id: '0', ReceiptHandle: m.ReceiptHandle }],
          }),
        );
      }
    }
  })();
  return {
    async stop() {
      stopping = true;
      await loop;
      return received;
    },
  };
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
    expect(JSON.parse(run.stdout)).toEqual({
      method: 'receive-send-delete',
      moved: 35,
      failed: 0,
      skipped: { invalid: 0, repeat: 0 },
      interrupted: false,
    });
    expect(run.stderr).toContain('leaves INVALID_JOB messages in the DLQ');
    expect(await depth(stack.outputs.DlqUrl!)).toBe(0);
    const moved = await drain(stack.outputs.QueueUrl!);
    expect(moved.map((m) => m.Body).sort()).toEqual([...bodies].sort());
    expect(moved[0]?.MessageAttributes?.error_code?.StringValue).toBe('ERROR_WRONG_USER_KEY');
  });

  it('keeps each message’s tenant (MessageGroupId) through the move; a copy without one gets its batch_id', async () => {
    // Prepare: one message SQS moved keeping its group, one worker copy that carries none
    const body = (key: string) => JSON.stringify({ record_key: key, batch_id: 'nightly-3' });
    await sqs.send(
      new SendMessageCommand({
        QueueUrl: stack.outputs.DlqUrl,
        MessageBody: body('grouped'),
        MessageGroupId: 'partner',
      }),
    );
    await sqs.send(new SendMessageCommand({ QueueUrl: stack.outputs.DlqUrl, MessageBody: body('copied') }));

    // Act
    const run = await runCli(['redrive', '--json'], { env: cliEnv(stack.moto) });

    // Assess
    expect(run.code).toBe(0);
    const groups: Record<string, string | undefined> = {};
    for (let round = 0; round < 5 && Object.keys(groups).length < 2; round++) {
      const out = await sqs.send(
        new ReceiveMessageCommand({
          QueueUrl: stack.outputs.QueueUrl,
          MaxNumberOfMessages: 10,
          MessageSystemAttributeNames: ['MessageGroupId'],
        }),
      );
      for (const m of out.Messages ?? [])
        groups[JSON.parse(m.Body ?? '{}').record_key] = m.Attributes?.MessageGroupId;
    }
    expect(groups).toEqual({ grouped: 'partner', copied: 'nightly-3' });
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
    expect(run.stderr).toMatch(/^redrive: 3\/3 messages 100% .*in \d+:\d\d$/m);
  });

  it('ends, moves a stop-class message once and skips an INVALID_JOB one with its reason while the worker fails both again', async () => {
    // Prepare: the DLQ as the worker leaves it (a stop-class message and an unkeyed bad one), and
    // a worker that sends whatever reaches the jobs queue straight back to the DLQ, as the real
    // one does while the key is still revoked or the body still broken.
    const stopBodies = await fillDlq(12);
    await sqs.send(
      new SendMessageBatchCommand({
        QueueUrl: stack.outputs.DlqUrl,
        Entries: [
          { Id: 'bad', MessageBody: '{"record_key": "broken', MessageAttributes: invalidJobAttributes },
        ],
      }),
    );
    const worker = bouncingWorker();

    // Act
    const run = await runCli(['redrive', '--json'], { env: cliEnv(stack.moto) });
    const received = await worker.stop();

    // Assess
    expect(run.code).toBe(0);
    const result = JSON.parse(run.stdout);
    expect(result).toMatchObject({ method: 'receive-send-delete', moved: 12, failed: 0, interrupted: false });
    expect(result.skipped.invalid).toBe(1);
    expect(received.sort()).toEqual([...stopBodies].sort());
    const left = await drain(stack.outputs.DlqUrl!);
    expect(left.map((m) => m.Body).sort()).toEqual([...stopBodies, '{"record_key": "broken'].sort());
    expect(result.skipped.repeat).toBeLessThanOrEqual(12);
  });

  it('explains the skipped INVALID_JOB message and moves it with --include-invalid', async () => {
    // Prepare
    await sqs.send(
      new SendMessageBatchCommand({
        QueueUrl: stack.outputs.DlqUrl,
        Entries: [{ Id: 'bad', MessageBody: 'not json', MessageAttributes: invalidJobAttributes }],
      }),
    );

    // Act
    const skipping = await runCli(['redrive'], { env: cliEnv(stack.moto) });
    const including = await runCli(['redrive', '--include-invalid', '--json'], { env: cliEnv(stack.moto) });

    // Assess
    expect(skipping.code).toBe(0);
    expect(skipping.stdout).toContain('moved 0 messages');
    expect(skipping.stdout).toMatch(
      /skipped 1 INVALID_JOB \(no usable record_key or not JSON.*--include-invalid\)/,
    );
    expect(including.code).toBe(0);
    expect(JSON.parse(including.stdout)).toMatchObject({ moved: 1, skipped: { invalid: 0 } });
    expect((await drain(stack.outputs.QueueUrl!)).map((m) => m.Body)).toEqual(['not json']);
  });

  it('prints the summary so far when interrupted, and loses no message', async () => {
    // Prepare
    const bodies = await fillDlq(60);

    // Act: SIGINT as soon as the move starts.
    let signalled = false;
    const run = await runCli(['redrive'], {
      env: cliEnv(stack.moto),
      onStderr: (text, child) => {
        if (!signalled && text.includes('moving by receive')) {
          signalled = true;
          child.kill('SIGINT');
        }
      },
    });

    // Assess
    expect(run.code).toBe(130);
    const moved = Number(/^interrupted: moved (\d+) messages? from the DLQ/m.exec(run.stdout)?.[1]);
    expect(moved).toBeLessThan(60);
    const inQueue = await drain(stack.outputs.QueueUrl!);
    const inDlq = await drain(stack.outputs.DlqUrl!);
    expect(inQueue).toHaveLength(moved);
    expect([...inQueue, ...inDlq].map((m) => m.Body).sort()).toEqual([...bodies].sort());
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
    expect(JSON.parse(run.stdout)).toMatchObject({ method: 'receive-send-delete', moved: 11, failed: 1 });
    expect(run.stderr).toMatch(/not sent \(.+\); it stays in the DLQ/);
    expect((await drain(stack.outputs.QueueUrl!)).map((m) => m.Body).sort()).toEqual([...bodies].sort());
    expect((await drain(stack.outputs.DlqUrl!)).map((m) => m.Body)).toEqual([tooBig]);
  });

  it('rejects a --max that is not a positive integer', async () => {
    // Act
    const run = await runCli(['redrive', '--max', '0'], { env: cliEnv(stack.moto) });

    // Assess
    expect(run.code).toBe(64);
    expect(run.stderr).toContain('--max must be a positive integer');
  });
});

describe('redrive where SQS has StartMessageMoveTask (AWS)', () => {
  const queues = {
    dlqUrl: 'https://sqs.eu-west-1.amazonaws.com/123456789012/dlq',
    queueUrl: 'https://sqs.eu-west-1.amazonaws.com/123456789012/jobs',
    queueArn: 'arn:aws:sqs:eu-west-1:123456789012:jobs',
    max: undefined,
    includeInvalid: true,
  };
  const quiet = { pollMs: 1, note: () => undefined };
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
    const result = await redrive(aws, queues, quiet);

    // Assess
    expect(result).toEqual({
      method: 'StartMessageMoveTask',
      moved: 40,
      failed: 0,
      skipped: { invalid: 0, repeat: 0 },
      interrupted: false,
      taskHandle: 'handle-1',
    });
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
    const result = await redrive(aws, queues, quiet);

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
    await expect(redrive(aws, queues, quiet)).rejects.toThrow(
      /move task failed after 12 messages: AccessDenied; run `threadgate redrive` again/,
    );
  });

  it('cancels the move task once it moved as many as it counted at its start, so none moves twice', async () => {
    // Prepare: the task keeps running because moved messages come back to the DLQ.
    const { aws, sqsMock } = await mockedAws();
    sqsMock.on(StartMessageMoveTaskCommand).resolves({ TaskHandle: 'handle-3' });
    sqsMock.on(ListMessageMoveTasksCommand).resolves({
      Results: [
        {
          Status: 'RUNNING',
          TaskHandle: 'handle-3',
          ApproximateNumberOfMessagesMoved: 40,
          ApproximateNumberOfMessagesToMove: 40,
        },
      ],
    });
    sqsMock.on(CancelMessageMoveTaskCommand).resolves({ ApproximateNumberOfMessagesMoved: 40 });

    // Act
    const result = await redrive(aws, queues, quiet);

    // Assess
    expect(result).toMatchObject({ method: 'StartMessageMoveTask', moved: 40, interrupted: false });
    expect(sqsMock.commandCalls(CancelMessageMoveTaskCommand)[0]?.args[0].input).toEqual({
      TaskHandle: 'handle-3',
    });
  });

  it('moves by hand, leaving INVALID_JOB messages, unless --include-invalid', async () => {
    // Prepare
    const { aws, sqsMock } = await mockedAws();
    sqsMock.on(ReceiveMessageCommand).resolves({ Messages: [] });
    const notes: string[] = [];

    // Act
    const result = await redrive(
      aws,
      { ...queues, includeInvalid: false },
      { pollMs: 1, note: (line) => notes.push(line) },
    );

    // Assess
    expect(result.method).toBe('receive-send-delete');
    expect(sqsMock.commandCalls(StartMessageMoveTaskCommand)).toHaveLength(0);
    expect(notes.join('\n')).toContain('StartMessageMoveTask cannot filter');
  });
});
