import {
  ChangeMessageVisibilityBatchCommand,
  DeleteMessageBatchCommand,
  GetQueueAttributesCommand,
  ListMessageMoveTasksCommand,
  type Message,
  type MessageAttributeValue,
  ReceiveMessageCommand,
  StartMessageMoveTaskCommand,
} from '@aws-sdk/client-sqs';
import type { Command } from 'commander';
import { CliError, EXIT } from '../exit-codes.js';
import { Progress } from '../progress.js';
import {
  type AwsContext,
  addStackOptions,
  explainAwsError,
  output,
  type StackOptions,
  sendMessageBatchWithRetries,
  withStack,
} from '../stack.js';

interface RedriveOptions extends StackOptions {
  max?: string;
  json?: boolean;
}

export interface RedriveResult {
  method: 'StartMessageMoveTask' | 'receive-send-delete';
  moved: number;
  /** Messages whose send kept failing; they stay in the DLQ. */
  failed: number;
  taskHandle?: string;
}

/** How long a received DLQ message stays hidden while it is being moved. */
const MOVE_VISIBILITY_SECONDS = 300;

export function registerRedrive(program: Command): void {
  addStackOptions(
    program
      .command('redrive')
      .description(
        'Move DLQ messages back to the jobs queue (StartMessageMoveTask; receive → send → delete where the endpoint lacks it)',
      ),
  )
    .option('--max <n>', 'move at most N messages (uses receive → send → delete)')
    .option('--json', 'print the result as JSON')
    .addHelpText(
      'after',
      '\nExamples:\n  $ threadgate redrive\n  $ threadgate redrive --max 100   # a few first, to see them go through\n' +
        'A paused pipeline stays paused: redriven messages wait in the queue until `threadgate resume`.\n',
    )
    .action(async (options: RedriveOptions) => {
      const max = options.max === undefined ? undefined : Number(options.max);
      if (max !== undefined && (!Number.isInteger(max) || max <= 0)) {
        throw new CliError(`--max must be a positive integer, got "${options.max}"`, EXIT.usage);
      }
      await withStack(options, async (aws, stack) => {
        const dlqUrl = output(stack, 'DlqUrl');
        const queueUrl = output(stack, 'QueueUrl');
        const queueArn = output(stack, 'QueueArn');
        const result = await redrive(aws, { dlqUrl, queueUrl, queueArn, max });
        if (options.json) process.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
        else {
          process.stdout.write(
            `moved ${result.moved} message${result.moved === 1 ? '' : 's'} from the DLQ to the jobs queue (${result.method})` +
              `${result.failed ? `; ${result.failed} could not be sent and stay in the DLQ` : ''}\n`,
          );
        }
        if (result.failed) process.exitCode = EXIT.transient;
      });
    });
}

/** Moves DLQ messages to the jobs queue; exported for tests of the StartMessageMoveTask path. */
export async function redrive(
  aws: AwsContext,
  q: { dlqUrl: string; queueUrl: string; queueArn: string; max: number | undefined },
  o: { pollMs?: number } = {},
): Promise<RedriveResult> {
  const dlq = await aws.clients.sqs.send(
    new GetQueueAttributesCommand({
      QueueUrl: q.dlqUrl,
      AttributeNames: ['QueueArn', 'ApproximateNumberOfMessages'],
    }),
  );
  const dlqArn = dlq.Attributes?.QueueArn;
  const waiting = Number(dlq.Attributes?.ApproximateNumberOfMessages ?? 0);
  if (!dlqArn) throw new CliError(`cannot read the DLQ's ARN from ${q.dlqUrl}`, EXIT.failure);
  if (q.max === undefined) {
    const task = await startMoveTask(aws, dlqArn, q.queueArn);
    if (task !== undefined) return await followMoveTask(aws, dlqArn, task, waiting, o.pollMs ?? 2000);
  }
  return await moveByHand(aws, q.dlqUrl, q.queueUrl, waiting, q.max);
}

/** Starts SQS's own move task; undefined when the endpoint does not implement it (moto). */
async function startMoveTask(
  aws: AwsContext,
  sourceArn: string,
  destinationArn: string,
): Promise<string | undefined> {
  try {
    const out = await aws.clients.sqs.send(
      new StartMessageMoveTaskCommand({ SourceArn: sourceArn, DestinationArn: destinationArn }),
    );
    return out.TaskHandle ?? '';
  } catch (err) {
    if (notImplemented(err)) {
      // A 5xx might also mean the task started anyway; never run two movers at once.
      const running = await runningMoveTask(aws, sourceArn).catch(() => undefined);
      if (running !== undefined) return running;
      process.stderr.write(
        'StartMessageMoveTask is not available at this endpoint; moving by receive → send → delete\n',
      );
      return undefined;
    }
    throw explainAwsError(err, aws);
  }
}

function notImplemented(err: unknown): boolean {
  const e = err as { name?: string; message?: string; $metadata?: { httpStatusCode?: number } };
  const status = e.$metadata?.httpStatusCode ?? 0;
  return (
    /UnsupportedOperation|InvalidAction|NotImplemented|UnknownOperation/i.test(e.name ?? '') ||
    status === 404 ||
    status === 501 ||
    (status >= 500 && /Deserialization error|not valid JSON|parse error/i.test(e.message ?? ''))
  );
}

async function runningMoveTask(aws: AwsContext, sourceArn: string): Promise<string | undefined> {
  const out = await aws.clients.sqs.send(
    new ListMessageMoveTasksCommand({ SourceArn: sourceArn, MaxResults: 1 }),
  );
  const task = out.Results?.[0];
  return task?.Status === 'RUNNING' ? (task.TaskHandle ?? '') : undefined;
}

async function followMoveTask(
  aws: AwsContext,
  sourceArn: string,
  handle: string,
  waiting: number,
  pollMs: number,
): Promise<RedriveResult> {
  const progress = new Progress({ label: 'redrive', unit: 'messages', total: waiting });
  for (;;) {
    const out = await aws.clients.sqs.send(
      new ListMessageMoveTasksCommand({ SourceArn: sourceArn, MaxResults: 1 }),
    );
    const task = out.Results?.[0];
    const moved = Number(task?.ApproximateNumberOfMessagesMoved ?? 0);
    if (task?.ApproximateNumberOfMessagesToMove !== undefined)
      progress.setTotal(task.ApproximateNumberOfMessagesToMove);
    progress.update(moved);
    if (!task || task.Status === 'COMPLETED') {
      progress.finish();
      return { method: 'StartMessageMoveTask', moved, failed: 0, taskHandle: handle };
    }
    if (task.Status === 'FAILED' || task.Status === 'CANCELLED') {
      progress.finish();
      throw new CliError(
        `the move task ${task.Status.toLowerCase()} after ${moved} messages${task.FailureReason ? `: ${task.FailureReason}` : ''}; ` +
          'run `threadgate redrive` again to move the rest',
        EXIT.transient,
      );
    }
    await new Promise((resolve) => setTimeout(resolve, pollMs));
  }
}

/**
 * The fallback mover. Each received message is sent to the jobs queue first and deleted from
 * the DLQ only after its send succeeded, so a crash can at worst leave a message in both
 * queues (the worker's idempotent outcome write absorbs that), never lose one. Within a run,
 * message ids already sent are remembered: if one shows up again (its delete failed and its
 * visibility ran out) it is deleted without a second send, so every message moves once.
 */
async function moveByHand(
  aws: AwsContext,
  dlqUrl: string,
  queueUrl: string,
  waiting: number,
  max: number | undefined,
): Promise<RedriveResult> {
  const sqs = aws.clients.sqs;
  const progress = new Progress({
    label: 'redrive',
    unit: 'messages',
    total: max === undefined ? waiting : Math.min(max, waiting),
  });
  const sent = new Set<string>();
  const refused: Message[] = [];
  let moved = 0;
  let emptyReceives = 0;
  while (max === undefined || moved < max) {
    const want = Math.min(10, max === undefined ? 10 : max - moved);
    const out = await sqs.send(
      new ReceiveMessageCommand({
        QueueUrl: dlqUrl,
        MaxNumberOfMessages: want,
        VisibilityTimeout: MOVE_VISIBILITY_SECONDS,
        WaitTimeSeconds: emptyReceives > 0 ? 1 : 0,
        MessageAttributeNames: ['All'],
      }),
    );
    const messages = out.Messages ?? [];
    if (messages.length === 0) {
      // SQS may answer empty while messages remain on other hosts; ask twice more before stopping.
      if (++emptyReceives >= 3) break;
      continue;
    }
    emptyReceives = 0;
    const fresh = messages.filter((m) => !sent.has(m.MessageId ?? ''));
    const again = messages.filter((m) => sent.has(m.MessageId ?? ''));
    const delivered = await sendToJobsQueue(aws, queueUrl, fresh);
    for (const m of fresh) if (delivered.has(m.MessageId ?? '')) sent.add(m.MessageId ?? '');
    refused.push(...fresh.filter((m) => !delivered.has(m.MessageId ?? '')));
    const toDelete = [...again, ...fresh.filter((m) => delivered.has(m.MessageId ?? ''))];
    await deleteWithRetries(aws, dlqUrl, toDelete);
    moved += delivered.size;
    progress.update(moved);
  }
  progress.finish();
  await makeVisibleAgain(aws, dlqUrl, refused);
  return { method: 'receive-send-delete', moved, failed: refused.length };
}

/** Messages the jobs queue refused stay in the DLQ; make them visible there again now, not in 5 minutes. */
async function makeVisibleAgain(aws: AwsContext, dlqUrl: string, messages: Message[]): Promise<void> {
  for (let i = 0; i < messages.length; i += 10) {
    const batch = messages.slice(i, i + 10);
    await aws.clients.sqs
      .send(
        new ChangeMessageVisibilityBatchCommand({
          QueueUrl: dlqUrl,
          Entries: batch.map((m, j) => ({
            Id: String(j),
            ReceiptHandle: m.ReceiptHandle,
            VisibilityTimeout: 0,
          })),
        }),
      )
      .catch(() => undefined); // they become visible anyway when the move's visibility timeout ends
  }
}

function attributesOf(m: Message): Record<string, MessageAttributeValue> | undefined {
  const attrs = m.MessageAttributes;
  if (!attrs || Object.keys(attrs).length === 0) return undefined;
  const copy: Record<string, MessageAttributeValue> = {};
  for (const [name, v] of Object.entries(attrs)) {
    copy[name] = {
      DataType: v.DataType,
      ...(v.StringValue !== undefined ? { StringValue: v.StringValue } : {}),
      ...(v.BinaryValue !== undefined ? { BinaryValue: v.BinaryValue } : {}),
    };
  }
  return copy;
}

/** Sends received DLQ messages to the jobs queue; returns the message ids that were sent. */
async function sendToJobsQueue(aws: AwsContext, queueUrl: string, messages: Message[]): Promise<Set<string>> {
  if (messages.length === 0) return new Set();
  const byEntry = new Map(messages.map((m, i) => [`m${i}`, m]));
  const result = await sendMessageBatchWithRetries(
    aws,
    queueUrl,
    [...byEntry].map(([id, m]) => ({
      Id: id,
      MessageBody: m.Body ?? '',
      MessageAttributes: attributesOf(m),
    })),
  );
  for (const f of result.failed) {
    const m = byEntry.get(f.id);
    process.stderr.write(
      `redrive: message ${m?.MessageId ?? f.id} not sent (${f.code}: ${f.message}); it stays in the DLQ\n`,
    );
  }
  return new Set(result.sent.map((id) => byEntry.get(id)?.MessageId ?? ''));
}

async function deleteWithRetries(aws: AwsContext, dlqUrl: string, messages: Message[]): Promise<void> {
  let pending = messages.map((m, i) => ({ Id: `d${i}`, ReceiptHandle: m.ReceiptHandle ?? '' }));
  for (let attempt = 1; pending.length > 0 && attempt <= 5; attempt++) {
    if (attempt > 1) await new Promise((resolve) => setTimeout(resolve, 200 * 2 ** (attempt - 2)));
    try {
      const out = await aws.clients.sqs.send(
        new DeleteMessageBatchCommand({ QueueUrl: dlqUrl, Entries: pending }),
      );
      const failedIds = new Set((out.Failed ?? []).map((f) => f.Id));
      pending = pending.filter((p) => failedIds.has(p.Id));
    } catch (err) {
      if (attempt === 5) throw explainAwsError(err, aws);
    }
  }
  if (pending.length) {
    // Already sent; if they reappear in this run they are deleted without a second send.
    process.stderr.write(
      `redrive: ${pending.length} moved message(s) could not be deleted from the DLQ yet\n`,
    );
  }
}
