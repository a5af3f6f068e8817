import { randomBytes } from 'node:crypto';
import { DynamoDBClient, ListTablesCommand, PutItemCommand } from '@aws-sdk/client-dynamodb';
import { PutSecretValueCommand, SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import { DeleteMessageCommand, ReceiveMessageCommand, SendMessageCommand } from '@aws-sdk/client-sqs';
import { SOLVE_TIMES_PARTITION } from '../../functions/pipeline/solve-time-exchange.js';
import { BatchCancels } from '../../functions/records/cancellations.js';
import { clientConfig } from '../emulator/deploy.js';
import type { LocalStack } from '../stack/local-stack.js';

/**
 * What the chaos run does as an operator and as a hostile peer: cancels a batch mid-run, rotates the API key mid-run
 * (docs/security.md: the new key in the secret, the old one refused at CaptchaAI at once), then
 * resumes a pause the rotation caused and redrives the records that stopped on the old key, as
 * `threadgate resume` and `threadgate redrive` would; and writes crafted SolveTimes items.
 */

export interface KeyRotation {
  rotated: boolean;
  resumes: number;
  redriven: number;
  /**
   * DLQ messages without the worker's `error_code` attribute: moved there by SQS after
   * maxReceiveCount, with no reason (invariant 3). They are not redriven: they stay for the checker.
   */
  withoutReason: Set<string>;
}

/** `threadgate cancel --batch ID` as the CLI does it; resolves with the epoch ms at which the cancel returned. */
export async function cancelBatch(stack: LocalStack, batchId: string): Promise<number> {
  const cancels = new BatchCancels({
    client: new DynamoDBClient(clientConfig(stack.awsEnv)),
    tableName: stack.outputs.TableName,
  });
  // The table is throttled at random in the run: an operator tries again.
  for (let attempt = 1; ; attempt++) {
    try {
      await cancels.cancel(batchId, { reason: 'chaos run: cancelled mid-run', by: 'operator' });
      return Date.now();
    } catch (err) {
      if (attempt >= 10) throw err;
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  }
}

/** The new key goes into the secret and becomes CaptchaAI's only valid key in the same moment. */
export async function rotateKey(stack: LocalStack): Promise<void> {
  const key = randomBytes(16).toString('hex');
  const secrets = new SecretsManagerClient(clientConfig(stack.awsEnv));
  await secrets.send(
    new PutSecretValueCommand({
      SecretId: stack.outputs.SecretName,
      SecretString: JSON.stringify({ apiKey: key }),
    }),
  );
  stack.captcha.setApiKey(key);
}

/**
 * After the rotation: a pipeline paused by a stop on the old key (a task polled with it) is
 * resumed, and the DLQ's messages (the records that stopped) are sent to the jobs queue again.
 */
export async function superviseRotation(
  stack: LocalStack,
  rotation: KeyRotation,
  log: (line: string) => void,
): Promise<void> {
  const state = await stack.control.readState().catch(() => undefined);
  if (state?.paused) {
    await stack.control.resume('operator', 'resumed after the key rotation (chaos run)');
    rotation.resumes += 1;
    log(`chaos: pipeline resumed after a stop on the old key (${state.code ?? state.reason ?? '?'})`);
  }
  if (state?.paused === false) rotation.redriven += await redriveStopped(stack, rotation.withoutReason);
}

/**
 * Moves the DLQ's stop copies (they carry `error_code`) back to the jobs queue, as `threadgate
 * redrive` would after a resume (a stopped record claims its row again). A message without it is
 * noted in `withoutReason` and left where it is.
 */
async function redriveStopped(stack: LocalStack, withoutReason: Set<string>): Promise<number> {
  let moved = 0;
  for (;;) {
    const out = await stack.sqs.send(
      new ReceiveMessageCommand({
        QueueUrl: stack.outputs.DlqUrl,
        MaxNumberOfMessages: 10,
        VisibilityTimeout: 30,
        MessageAttributeNames: ['All'],
      }),
    );
    const messages = out.Messages ?? [];
    const copies = messages.filter((m) => m.MessageAttributes?.error_code !== undefined);
    for (const m of messages) if (!copies.includes(m) && m.MessageId) withoutReason.add(m.MessageId);
    if (copies.length === 0) return moved;
    for (const m of copies) {
      await stack.sqs.send(
        new SendMessageCommand({ QueueUrl: stack.outputs.QueueUrl, MessageBody: m.Body ?? '' }),
      );
      await stack.sqs.send(
        new DeleteMessageCommand({ QueueUrl: stack.outputs.DlqUrl, ReceiptHandle: m.ReceiptHandle }),
      );
      moved += 1;
    }
  }
}

/**
 * Crafted items in the stack's SolveTimes table, each one the exchange must refuse: 256 answers
 * at 0–0.4 s and spread to 60 s (a 74-poll schedule if trusted), the same dated an hour ahead,
 * and one in a slot beyond the 32. Returns how many were written (0 without the table).
 */
export async function poisonSolveTimes(stack: LocalStack): Promise<number> {
  const ddb = new DynamoDBClient(clientConfig(stack.awsEnv));
  const tables = (await ddb.send(new ListTablesCommand({}))).TableNames ?? [];
  const table = tables.find((t) => t.includes('SolveTimes'));
  if (!table) return 0;
  const poison = [
    ...Array.from({ length: 200 }, (_, i) => `${i * 2}-${i * 2}`),
    ...Array.from({ length: 56 }, (_, i) => `${1_000 * (i + 4)}-${1_000 * (i + 5)}`),
  ].join(',');
  const few = Array.from({ length: 40 }, (_, i) => `${i * 10}-${i * 10}`).join(',');
  const now = Date.now();
  const items = [
    { sk: 'recaptcha_v2#5', intervals: poison, updatedAt: now },
    { sk: 'recaptcha_v2#6', intervals: few, updatedAt: now + 3_600_000 },
    { sk: 'recaptcha_v2#99', intervals: few, updatedAt: now },
  ];
  for (const item of items) {
    await ddb.send(
      new PutItemCommand({
        TableName: table,
        Item: {
          pk: { S: SOLVE_TIMES_PARTITION },
          sk: { S: item.sk },
          environment: { S: 'chaos-crafted' },
          intervals: { S: item.intervals },
          updated_at: { N: String(item.updatedAt) },
        },
      }),
    );
  }
  return items.length;
}
