import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  CloudFormationClient,
  CreateStackCommand,
  DescribeStacksCommand,
} from '@aws-sdk/client-cloudformation';
import {
  CreateTableCommand,
  DynamoDBClient,
  PutItemCommand,
  UpdateItemCommand,
} from '@aws-sdk/client-dynamodb';
import { EventBridgeClient, PutRuleCommand, PutTargetsCommand } from '@aws-sdk/client-eventbridge';
import {
  CreateEventSourceMappingCommand,
  CreateFunctionCommand,
  LambdaClient,
  PutFunctionConcurrencyCommand,
  UpdateEventSourceMappingCommand,
} from '@aws-sdk/client-lambda';
import { CreateBucketCommand, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import {
  CreateSecretCommand,
  PutSecretValueCommand,
  SecretsManagerClient,
} from '@aws-sdk/client-secrets-manager';
import {
  CreateQueueCommand,
  DeleteMessageCommand,
  GetQueueAttributesCommand,
  ReceiveMessageCommand,
  SendMessageBatchCommand,
  SendMessageCommand,
  SQSClient,
} from '@aws-sdk/client-sqs';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type MotoServer, startMoto } from '../../../local/emulator/moto.js';
import { writeZip } from '../../../local/emulator/zip.js';
import { LocalRuntime, ratePeriodMs, succeededMessageIds } from '../../../local/runtime/local-runtime.js';
import { QueueWatch } from '../../../local/runtime/pollers/queue-watch.js';

// A hand-made function (no CDK): it reports every invocation to a recorder on loopback, which
// holds the call for a while so concurrency can be observed, then acts on the message body.
const HANDLER = `
exports.handler = async (event, context) => {
  const records = event.Records || [];
  console.log('starting with secret ' + process.env.SECRET_VALUE);
  for (const r of records) if ((r.body || '').startsWith('log ')) console.log(r.body);
  await fetch(process.env.RECORDER_URL + '/start', {
    method: 'POST',
    body: JSON.stringify({
      event,
      context: {
        functionName: context.functionName,
        awsRequestId: context.awsRequestId,
        invokedFunctionArn: context.invokedFunctionArn,
        remainingMs: context.getRemainingTimeInMillis(),
      },
      env: {
        MARK: process.env.MARK,
        AWS_LAMBDA_FUNCTION_NAME: process.env.AWS_LAMBDA_FUNCTION_NAME,
        AWS_ENDPOINT_URL: process.env.AWS_ENDPOINT_URL,
        AWS_REGION: process.env.AWS_REGION,
      },
    }),
  });
  if (records.some((r) => r.body === 'hang')) await new Promise((resolve) => setTimeout(resolve, 60000));
  if (records.some((r) => r.body === 'throw')) throw new Error('boom');
  return {
    batchItemFailures: records.filter((r) => (r.body || '').startsWith('fail')).map((r) => ({ itemIdentifier: r.messageId })),
  };
};
`;

interface Invocation {
  event: { Records?: Record<string, unknown>[]; source?: string; 'detail-type'?: string };
  context: { functionName: string; awsRequestId: string; invokedFunctionArn: string; remainingMs: number };
  env: Record<string, string | undefined>;
}

class Recorder {
  readonly calls: Invocation[] = [];
  inFlight = 0;
  maxInFlight = 0;
  holdMs = 0;
  private server: Server | undefined;
  url = '';

  async start(): Promise<void> {
    this.server = createServer((req, res) => {
      let body = '';
      req.on('data', (c) => {
        body += c;
      });
      req.on('end', () => {
        this.calls.push(JSON.parse(body) as Invocation);
        this.inFlight++;
        this.maxInFlight = Math.max(this.maxInFlight, this.inFlight);
        setTimeout(() => {
          this.inFlight--;
          res.end('{}');
        }, this.holdMs);
      });
    });
    await new Promise<void>((resolve) => this.server?.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  bodies(): string[] {
    return this.calls.flatMap((c) => (c.event.Records ?? []).map((r) => String(r.body)));
  }

  async close(): Promise<void> {
    this.server?.closeAllConnections();
    await new Promise((resolve) => this.server?.close(resolve));
  }
}

async function waitFor(
  what: string,
  check: () => boolean | Promise<boolean>,
  timeoutMs = 20_000,
): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    if (await check()) return;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error(`timed out waiting for ${what}`);
}

describe('local runtime', () => {
  let moto: MotoServer;
  let recorder: Recorder;
  let lambda: LambdaClient;
  let sqs: SQSClient;
  let events: EventBridgeClient;
  let secrets: SecretsManagerClient;
  let roleArn: string;
  let logDir: string;
  let runtime: LocalRuntime | undefined;
  let counter = 0;

  beforeAll(async () => {
    moto = await startMoto();
    recorder = new Recorder();
    await recorder.start();
    logDir = mkdtempSync(join(tmpdir(), 'threadgate-runtime-'));
    const config = {
      endpoint: moto.endpoint,
      region: 'us-east-1',
      credentials: { accessKeyId: 'testing', secretAccessKey: 'testing' },
    };
    lambda = new LambdaClient(config);
    sqs = new SQSClient(config);
    events = new EventBridgeClient(config);
    secrets = new SecretsManagerClient(config);
    const s3 = new S3Client({ ...config, forcePathStyle: true });
    await s3.send(new CreateBucketCommand({ Bucket: 'code' }));
    await s3.send(
      new PutObjectCommand({
        Bucket: 'code',
        Key: 'recorder.zip',
        Body: writeZip([{ name: 'index.js', data: Buffer.from(HANDLER) }]),
      }),
    );
    const cfn = new CloudFormationClient(config);
    await cfn.send(
      new CreateStackCommand({
        StackName: 'roles',
        TemplateBody: JSON.stringify({
          Resources: {
            Role: {
              Type: 'AWS::IAM::Role',
              Properties: {
                RoleName: 'runtime-test',
                AssumeRolePolicyDocument: {
                  Statement: [
                    {
                      Effect: 'Allow',
                      Principal: { Service: 'lambda.amazonaws.com' },
                      Action: 'sts:AssumeRole',
                    },
                  ],
                },
              },
            },
          },
        }),
      }),
    );
    await waitFor('the role stack', async () => {
      const out = await cfn.send(new DescribeStacksCommand({ StackName: 'roles' }));
      return out.Stacks?.[0]?.StackStatus === 'CREATE_COMPLETE';
    });
    roleArn = 'arn:aws:iam::123456789012:role/runtime-test';
  });

  afterEach(async () => {
    await runtime?.stop();
    runtime = undefined;
    recorder.calls.length = 0;
    recorder.maxInFlight = 0;
    recorder.holdMs = 0;
  });

  afterAll(async () => {
    await recorder?.close();
    await moto?.stop();
    rmSync(logDir, { recursive: true, force: true });
  });

  /** A queue (with a DLQ after `maxReceiveCount` receives), the recorder function and its mapping. */
  async function deploy(opts: {
    timeout?: number;
    reserved?: number;
    maximumConcurrency?: number;
    batchSize?: number;
    visibilityTimeout?: number;
    env?: Record<string, string>;
  }) {
    const name = `fn-${++counter}`;
    const dlq = await sqs.send(new CreateQueueCommand({ QueueName: `${name}-dlq` }));
    const dlqArn = `arn:aws:sqs:us-east-1:123456789012:${name}-dlq`;
    const queue = await sqs.send(
      new CreateQueueCommand({
        QueueName: `${name}-jobs`,
        Attributes: {
          VisibilityTimeout: String(opts.visibilityTimeout ?? 30),
          RedrivePolicy: JSON.stringify({ deadLetterTargetArn: dlqArn, maxReceiveCount: 2 }),
        },
      }),
    );
    const queueArn = `arn:aws:sqs:us-east-1:123456789012:${name}-jobs`;
    await lambda.send(
      new CreateFunctionCommand({
        FunctionName: name,
        Runtime: 'nodejs22.x',
        Role: roleArn,
        Handler: 'index.handler',
        Code: { S3Bucket: 'code', S3Key: 'recorder.zip' },
        Timeout: opts.timeout ?? 10,
        Environment: { Variables: { RECORDER_URL: recorder.url, MARK: name, ...opts.env } },
      }),
    );
    if (opts.reserved !== undefined) {
      await lambda.send(
        new PutFunctionConcurrencyCommand({
          FunctionName: name,
          ReservedConcurrentExecutions: opts.reserved,
        }),
      );
    }
    const mapping = await lambda.send(
      new CreateEventSourceMappingCommand({
        FunctionName: name,
        EventSourceArn: queueArn,
        BatchSize: opts.batchSize ?? 1,
        FunctionResponseTypes: ['ReportBatchItemFailures'],
        ...(opts.maximumConcurrency
          ? { ScalingConfig: { MaximumConcurrency: opts.maximumConcurrency } }
          : {}),
      }),
    );
    return { name, queueUrl: queue.QueueUrl!, queueArn, dlqUrl: dlq.QueueUrl!, uuid: mapping.UUID! };
  }

  async function send(queueUrl: string, bodies: string[]): Promise<void> {
    for (let i = 0; i < bodies.length; i += 10) {
      await sqs.send(
        new SendMessageBatchCommand({
          QueueUrl: queueUrl,
          Entries: bodies.slice(i, i + 10).map((body, n) => ({ Id: String(n), MessageBody: body })),
        }),
      );
    }
  }

  async function queueCounts(queueUrl: string): Promise<{ visible: number; inFlight: number }> {
    const out = await sqs.send(
      new GetQueueAttributesCommand({
        QueueUrl: queueUrl,
        AttributeNames: ['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible'],
      }),
    );
    return {
      visible: Number(out.Attributes?.ApproximateNumberOfMessages),
      inFlight: Number(out.Attributes?.ApproximateNumberOfMessagesNotVisible),
    };
  }

  function start(functionName: string, extra: Partial<Parameters<typeof LocalRuntime.start>[0]> = {}) {
    return LocalRuntime.start({
      awsEnv: moto.awsEnv,
      logDir,
      functionNames: [functionName],
      refreshMs: 200,
      ...extra,
    });
  }

  /** `count` (a multiple of 10) messages `<prefix><n>`, ten per SendMessageBatch. */
  async function sendInBatches(QueueUrl: string | undefined, count: number, prefix: string): Promise<void> {
    for (let i = 0; i < count; i += 10) {
      await sqs.send(
        new SendMessageBatchCommand({
          QueueUrl,
          Entries: Array.from({ length: 10 }, (_, j) => ({
            Id: String(j),
            MessageBody: `${prefix}${i + j}`,
          })),
        }),
      );
    }
  }

  it('the moto launcher hands each message to one of 12 concurrent receives, and a waiting long poll wakes for a new message', async () => {
    // Prepare
    const { QueueUrl } = await sqs.send(new CreateQueueCommand({ QueueName: `receives-${++counter}` }));
    await sendInBatches(QueueUrl, 30, 'm');

    // Act: 12 receivers at once, each taking what it can in a few rounds
    const taken: string[] = [];
    await Promise.all(
      Array.from({ length: 12 }, async () => {
        for (let round = 0; round < 4; round++) {
          const out = await sqs.send(
            new ReceiveMessageCommand({ QueueUrl, MaxNumberOfMessages: 1, VisibilityTimeout: 300 }),
          );
          for (const m of out.Messages ?? []) taken.push(m.MessageId ?? '');
        }
      }),
    );
    const started = Date.now();
    const waiting = sqs.send(new ReceiveMessageCommand({ QueueUrl, WaitTimeSeconds: 10 }));
    await new Promise((resolve) => setTimeout(resolve, 300));
    await sqs.send(new SendMessageCommand({ QueueUrl, MessageBody: 'late' }));
    const late = await waiting;

    // Assess: all 30 taken, none twice; the long poll returned the late message, not its timeout
    expect(taken).toHaveLength(30);
    expect(new Set(taken).size).toBe(30);
    expect(late.Messages?.map((m) => m.Body)).toEqual(['late']);
    expect(Date.now() - started).toBeLessThan(10_000);
  });

  it('the moto launcher keeps every delete and every send when deletes and sends run at once', async () => {
    // Prepare: 100 messages received (invisible for 5 minutes), each waiting for its delete
    const { QueueUrl } = await sqs.send(new CreateQueueCommand({ QueueName: `deletes-${++counter}` }));
    await sendInBatches(QueueUrl, 100, 'old');
    const handles: string[] = [];
    while (handles.length < 100) {
      const out = await sqs.send(
        new ReceiveMessageCommand({ QueueUrl, MaxNumberOfMessages: 10, VisibilityTimeout: 300 }),
      );
      for (const m of out.Messages ?? []) handles.push(m.ReceiptHandle ?? '');
    }

    // Act: the 100 deletes and 100 new sends, all at once, through several connections
    const clients = Array.from(
      { length: 8 },
      () =>
        new SQSClient({
          endpoint: moto.endpoint,
          region: 'us-east-1',
          credentials: { accessKeyId: 'testing', secretAccessKey: 'testing' },
        }),
    );
    await Promise.all([
      ...handles.map((ReceiptHandle, i) =>
        clients[i % clients.length]!.send(new DeleteMessageCommand({ QueueUrl, ReceiptHandle })),
      ),
      ...Array.from({ length: 100 }, (_, i) =>
        clients[(i + 3) % clients.length]!.send(new SendMessageCommand({ QueueUrl, MessageBody: `new${i}` })),
      ),
    ]);
    for (const c of clients) c.destroy();

    // Assess: no deleted message is back (waiting for its visibility timeout), no new one lost
    const attrs = await sqs.send(
      new GetQueueAttributesCommand({
        QueueUrl,
        AttributeNames: ['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible'],
      }),
    );
    expect(attrs.Attributes).toMatchObject({
      ApproximateNumberOfMessages: '100',
      ApproximateNumberOfMessagesNotVisible: '0',
    });
  });

  it("the launcher's wake wait returns for a message sent to an empty queue and for a disable, and receives nothing", async () => {
    // Prepare: a watch on an empty queue's mapping, as an idle poller slot has
    const fn = await deploy({});
    const states: (string | undefined)[] = [];
    const watch = new QueueWatch(
      moto.endpoint,
      fn.queueArn,
      fn.uuid,
      (m) => states.push(m?.State),
      () => undefined,
    );
    try {
      await waitFor('the mapping as the watch sees it', () => states.length === 1);
      let awake = false;
      const asleep = watch.untilMessages(60_000).then(() => {
        awake = true;
      });
      await new Promise((resolve) => setTimeout(resolve, 300));
      const awakeBeforeSend = awake;
      // Act
      await sqs.send(new SendMessageCommand({ QueueUrl: fn.queueUrl, MessageBody: 'wake' }));
      const first = await Promise.race([
        asleep.then(() => 'woken'),
        new Promise((resolve) => setTimeout(() => resolve('still asleep'), 10_000)),
      ]);
      await lambda.send(new UpdateEventSourceMappingCommand({ UUID: fn.uuid, Enabled: false }));
      await waitFor('the disable as the watch sees it', () => states.at(-1) === 'Disabled');
      // Assess: woken by the message, not by its 60 s limit; the message was never received
      expect(awakeBeforeSend).toBe(false);
      expect(first).toBe('woken');
      expect(states).toEqual(['Enabled', 'Disabled']);
      expect(await queueCounts(fn.queueUrl)).toEqual({ visible: 1, inFlight: 0 });
      const look = await sqs.send(
        new ReceiveMessageCommand({ QueueUrl: fn.queueUrl, MessageSystemAttributeNames: ['All'] }),
      );
      expect(look.Messages?.[0]?.Attributes?.ApproximateReceiveCount).toBe('1');
    } finally {
      await watch.stop();
    }
  });

  it('invokes the deployed code with Lambda SQS event and context shapes and deletes the message after success', async () => {
    // Prepare
    const fn = await deploy({ timeout: 7, env: { SECRET_VALUE: 'not-for-logs' } });
    runtime = await start(fn.name, { redact: ['not-for-logs'] });
    // Act
    await sqs.send(
      new SendMessageCommand({
        QueueUrl: fn.queueUrl,
        MessageBody: '{"record_key":"r1"}',
        MessageAttributes: { origin: { DataType: 'String', StringValue: 'test' } },
      }),
    );
    await waitFor('one invocation', () => recorder.calls.length === 1);
    await waitFor('the message to be deleted', async () => {
      const c = await queueCounts(fn.queueUrl);
      return c.visible === 0 && c.inFlight === 0;
    });
    // Assess
    const call = recorder.calls[0]!;
    const record = call.event.Records?.[0] as Record<string, unknown>;
    expect(record).toMatchObject({
      body: '{"record_key":"r1"}',
      eventSource: 'aws:sqs',
      eventSourceARN: fn.queueArn,
      awsRegion: 'us-east-1',
      attributes: { ApproximateReceiveCount: '1' },
      messageAttributes: { origin: { stringValue: 'test', dataType: 'String' } },
    });
    expect(typeof record.messageId).toBe('string');
    expect(typeof record.receiptHandle).toBe('string');
    expect(call.context.functionName).toBe(fn.name);
    expect(call.context.invokedFunctionArn).toBe(`arn:aws:lambda:us-east-1:123456789012:function:${fn.name}`);
    expect(call.context.remainingMs).toBeGreaterThan(0);
    expect(call.context.remainingMs).toBeLessThanOrEqual(7000);
    expect(call.env).toEqual({
      MARK: fn.name,
      AWS_LAMBDA_FUNCTION_NAME: fn.name,
      AWS_ENDPOINT_URL: moto.endpoint,
      AWS_REGION: 'us-east-1',
    });
    expect(runtime.stats().functions[fn.name]).toMatchObject({ invocations: 1, inFlight: 0, errors: 0 });
    // Each execution environment reports its peak heap; the process its peak RSS.
    const memory = runtime.stats().functions[fn.name]?.memory;
    expect(memory?.environments).toHaveLength(1);
    expect(memory?.environments[0]?.peakHeapUsed).toBeGreaterThan(0);
    expect(memory?.environments[0]?.peakHeapTotal).toBeGreaterThanOrEqual(
      memory?.environments[0]?.peakHeapUsed ?? 0,
    );
    expect(memory?.processPeakRss).toBeGreaterThan(memory?.environments[0]?.peakHeapUsed ?? 0);
    await waitFor('the REPORT line', () =>
      /REPORT RequestId: \S+ Heap Used: [\d.]+ MB/.test(readFileSync(join(logDir, `${fn.name}.log`), 'utf8')),
    );
  });

  it('writes function output to the function log file with secrets redacted', async () => {
    // Prepare
    const fn = await deploy({ env: { SECRET_VALUE: 'sk-very-secret' } });
    runtime = await start(fn.name, { redact: ['sk-very-secret'] });
    // Act
    await send(fn.queueUrl, ['hello']);
    await waitFor('one invocation', () => recorder.calls.length === 1);
    await runtime.stop();
    runtime = undefined;
    // Assess
    const log = readFileSync(join(logDir, `${fn.name}.log`), 'utf8');
    expect(log).toContain('starting with secret ***');
    expect(log).toMatch(/START RequestId: /);
    expect(log).not.toContain('sk-very-secret');
  });

  it("redacts every key the function's secret has held: the first one, and one stored after a rotation while running", async () => {
    // Prepare: the function's environment names its key's secret (as CAPTCHAAI_SECRET_NAME does).
    const secretName = `runtime-test/key-${++counter}`;
    const keyA = `A${'0123456789abcdef'.repeat(2)}`;
    const keyB = `B${'fedcba9876543210'.repeat(2)}`;
    await secrets.send(new CreateSecretCommand({ Name: secretName, SecretString: keyA }));
    const fn = await deploy({ env: { CAPTCHAAI_SECRET_NAME: secretName } });
    runtime = await start(fn.name);
    const running = runtime;
    // Act: the key is rotated while the runtime runs; then a function logs both keys.
    await secrets.send(new PutSecretValueCommand({ SecretId: secretName, SecretString: keyB }));
    await waitFor('the runtime to read the new version', () => running.redactions.knows(keyB));
    await send(fn.queueUrl, [`log old ${keyA} new ${keyB}`]);
    await waitFor('one invocation', () => recorder.calls.length === 1);
    await runtime.stop();
    runtime = undefined;
    // Assess
    const log = readFileSync(join(logDir, `${fn.name}.log`), 'utf8');
    expect(log).toContain('log old *** new ***');
    expect(log).not.toContain(keyA);
    expect(log).not.toContain(keyB);
  });

  it('keeps concurrency at min(reserved concurrency, mapping maximum) and follows changes while running', async () => {
    // Prepare
    const fn = await deploy({ reserved: 3, maximumConcurrency: 5 });
    recorder.holdMs = 300;
    runtime = await start(fn.name);
    expect(runtime.stats().mappings[0]?.limit).toBe(3);
    // Act: a first wave at min(3, 5)
    await send(
      fn.queueUrl,
      Array.from({ length: 12 }, (_, i) => `a${i}`),
    );
    await waitFor('the first wave', () => recorder.calls.length === 12);
    const firstMax = recorder.maxInFlight;
    // Act: the mapping maximum drops to 2 while reserved concurrency rises to 6
    await lambda.send(
      new PutFunctionConcurrencyCommand({ FunctionName: fn.name, ReservedConcurrentExecutions: 6 }),
    );
    await lambda.send(
      new UpdateEventSourceMappingCommand({ UUID: fn.uuid, ScalingConfig: { MaximumConcurrency: 2 } }),
    );
    await waitFor('the new limit', () => runtime?.stats().mappings[0]?.limit === 2);
    await waitFor('the first wave to finish', () => runtime?.stats().functions[fn.name]?.inFlight === 0);
    recorder.maxInFlight = 0;
    await send(
      fn.queueUrl,
      Array.from({ length: 8 }, (_, i) => `b${i}`),
    );
    await waitFor('the second wave', () => recorder.calls.length === 20);
    // Assess
    expect(firstMax).toBeLessThanOrEqual(3);
    expect(firstMax).toBeGreaterThan(1);
    expect(recorder.maxInFlight).toBeLessThanOrEqual(2);
    expect(runtime.stats().functions[fn.name]?.maxInFlight).toBeLessThanOrEqual(3);
  });

  it('stops polling while the mapping is disabled and leaves the messages in the queue', async () => {
    // Prepare
    const fn = await deploy({ reserved: 2 });
    runtime = await start(fn.name);
    await lambda.send(new UpdateEventSourceMappingCommand({ UUID: fn.uuid, Enabled: false }));
    await waitFor('the mapping to be seen disabled', () => runtime?.stats().mappings[0]?.enabled === false);
    // Act
    await send(fn.queueUrl, ['x1', 'x2', 'x3']);
    await new Promise((resolve) => setTimeout(resolve, 1500));
    const whileDisabled = recorder.calls.length;
    const queued = await queueCounts(fn.queueUrl);
    await lambda.send(new UpdateEventSourceMappingCommand({ UUID: fn.uuid, Enabled: true }));
    await waitFor('the backlog after enabling', () => recorder.calls.length === 3);
    // Assess
    expect(whileDisabled).toBe(0);
    expect(queued).toEqual({ visible: 3, inFlight: 0 });
    expect(recorder.calls.map((c) => c.event.Records?.[0]?.attributes)).toEqual(
      Array.from({ length: 3 }, () => expect.objectContaining({ ApproximateReceiveCount: '1' })),
    );
  });

  it('deletes only the successful messages of a partial batch response and leaves the rest to redrive', async () => {
    // Prepare
    const fn = await deploy({ batchSize: 5, visibilityTimeout: 3 });
    runtime = await start(fn.name);
    // Act
    await send(fn.queueUrl, ['ok1', 'fail1', 'ok2', 'fail2']);
    await waitFor('the failed messages in the DLQ', async () => (await queueCounts(fn.dlqUrl)).visible === 2);
    await waitFor('the jobs queue to drain', async () => {
      const c = await queueCounts(fn.queueUrl);
      return c.visible === 0 && c.inFlight === 0;
    });
    // Assess
    const dlq = await sqs.send(new ReceiveMessageCommand({ QueueUrl: fn.dlqUrl, MaxNumberOfMessages: 10 }));
    expect((dlq.Messages ?? []).map((m) => m.Body).sort()).toEqual(['fail1', 'fail2']);
    const bodies = recorder.bodies();
    expect(bodies.filter((b) => b.startsWith('ok')).sort()).toEqual(['ok1', 'ok2']);
    expect(bodies.filter((b) => b === 'fail1')).toHaveLength(2);
  });

  it('terminates an invocation that outlives the function timeout and leaves the message for redelivery', async () => {
    // Prepare
    const fn = await deploy({ timeout: 1, visibilityTimeout: 2 });
    runtime = await start(fn.name);
    // Act
    await send(fn.queueUrl, ['hang']);
    await waitFor('a redelivery', () => recorder.calls.length === 2);
    // Assess
    expect(runtime.stats().functions[fn.name]?.timeouts).toBeGreaterThanOrEqual(1);
    expect(recorder.calls.map((c) => c.event.Records?.[0]?.attributes)).toEqual([
      expect.objectContaining({ ApproximateReceiveCount: '1' }),
      expect.objectContaining({ ApproximateReceiveCount: '2' }),
    ]);
  });

  it('fails the whole batch when the handler throws', async () => {
    // Prepare
    const fn = await deploy({ batchSize: 5, visibilityTimeout: 30 });
    runtime = await start(fn.name);
    // Act
    await send(fn.queueUrl, ['throw']);
    await waitFor('an error', () => runtime?.stats().functions[fn.name]?.errors === 1);
    // Assess
    expect(await queueCounts(fn.queueUrl)).toEqual({ visible: 0, inFlight: 1 });
    expect(runtime.stats().mappings[0]).toMatchObject({ received: 1, deleted: 0, failedItems: 1 });
  });

  it("delivers a DynamoDB stream mapping's records in Lambda's stream event shape, in order, each once", async () => {
    // Prepare: a table with a stream and the recorder function mapped to it
    const ddb = new DynamoDBClient({
      endpoint: moto.endpoint,
      region: 'us-east-1',
      credentials: { accessKeyId: 'testing', secretAccessKey: 'testing' },
    });
    const name = `fn-${++counter}`;
    const table = await ddb.send(
      new CreateTableCommand({
        TableName: `${name}-table`,
        KeySchema: [{ AttributeName: 'pk', KeyType: 'HASH' }],
        AttributeDefinitions: [{ AttributeName: 'pk', AttributeType: 'S' }],
        BillingMode: 'PAY_PER_REQUEST',
        StreamSpecification: { StreamEnabled: true, StreamViewType: 'NEW_AND_OLD_IMAGES' },
      }),
    );
    const streamArn = table.TableDescription!.LatestStreamArn!;
    await lambda.send(
      new CreateFunctionCommand({
        FunctionName: name,
        Runtime: 'nodejs22.x',
        Role: roleArn,
        Handler: 'index.handler',
        Code: { S3Bucket: 'code', S3Key: 'recorder.zip' },
        Timeout: 10,
        Environment: { Variables: { RECORDER_URL: recorder.url, MARK: name } },
      }),
    );
    await lambda.send(
      new CreateEventSourceMappingCommand({
        FunctionName: name,
        EventSourceArn: streamArn,
        StartingPosition: 'TRIM_HORIZON',
        BatchSize: 100,
        FunctionResponseTypes: ['ReportBatchItemFailures'],
      }),
    );
    for (const pk of ['a', 'b', 'c']) {
      await ddb.send(
        new PutItemCommand({ TableName: `${name}-table`, Item: { pk: { S: pk }, n: { N: '1' } } }),
      );
    }
    // Act
    runtime = await start(name);
    await waitFor(
      'three stream records',
      () => recorder.calls.flatMap((c) => c.event.Records ?? []).length >= 3,
    );
    await ddb.send(
      new UpdateItemCommand({
        TableName: `${name}-table`,
        Key: { pk: { S: 'a' } },
        UpdateExpression: 'SET n = :two',
        ExpressionAttributeValues: { ':two': { N: '2' } },
      }),
    );
    await waitFor('the update', () => recorder.calls.flatMap((c) => c.event.Records ?? []).length >= 4);
    // The function sees a batch before the poller counts it delivered (that happens once it returns).
    await waitFor('the poller to count the update', () => (runtime?.stats().streams[0]?.delivered ?? 0) >= 4);
    // Assess
    const records = recorder.calls.flatMap((c) => c.event.Records ?? []) as {
      eventName: string;
      eventSource: string;
      eventSourceARN: string;
      dynamodb: { Keys: unknown; NewImage?: unknown; OldImage?: unknown; SequenceNumber: string };
    }[];
    expect(records.map((r) => [r.eventName, r.dynamodb.Keys])).toEqual([
      ['INSERT', { pk: { S: 'a' } }],
      ['INSERT', { pk: { S: 'b' } }],
      ['INSERT', { pk: { S: 'c' } }],
      ['MODIFY', { pk: { S: 'a' } }],
    ]);
    expect(records.every((r) => r.eventSource === 'aws:dynamodb' && r.eventSourceARN === streamArn)).toBe(
      true,
    );
    expect(records[3]!.dynamodb).toMatchObject({ NewImage: { n: { N: '2' } }, OldImage: { n: { N: '1' } } });
    const sequences = records.map((r) => BigInt(r.dynamodb.SequenceNumber));
    expect([...sequences].sort((x, y) => (x < y ? -1 : 1))).toEqual(sequences);
    expect(runtime.stats().streams[0]).toMatchObject({ delivered: 4, retries: 0 });
  });

  it('fires a scheduled rule at its rate times the time scale', async () => {
    // Prepare
    const fn = await deploy({});
    const rule = await events.send(
      new PutRuleCommand({ Name: `${fn.name}-tick`, ScheduleExpression: 'rate(1 minute)' }),
    );
    await events.send(
      new PutTargetsCommand({
        Rule: `${fn.name}-tick`,
        Targets: [{ Id: 'fn', Arn: `arn:aws:lambda:us-east-1:123456789012:function:${fn.name}` }],
      }),
    );
    // Act
    runtime = await start(fn.name, { timeScale: 0.005 });
    await waitFor('two scheduled invocations', () => recorder.calls.length >= 2);
    // Assess
    expect(recorder.calls[0]?.event).toMatchObject({
      source: 'aws.events',
      'detail-type': 'Scheduled Event',
      resources: [rule.RuleArn],
    });
    expect(runtime.stats().rules).toEqual([
      expect.objectContaining({ name: `${fn.name}-tick`, schedule: 'rate(1 minute)', periodMs: 300 }),
    ]);
  });

  it('fires a scheduled rule no more often than minRulePeriodMs (the local stack sets one)', async () => {
    // Prepare
    const fn = await deploy({});
    await events.send(new PutRuleCommand({ Name: `${fn.name}-tick`, ScheduleExpression: 'rate(1 minute)' }));
    await events.send(
      new PutTargetsCommand({
        Rule: `${fn.name}-tick`,
        Targets: [{ Id: 'fn', Arn: `arn:aws:lambda:us-east-1:123456789012:function:${fn.name}` }],
      }),
    );
    // Act: 1 minute × 0.005 would be 300 ms.
    runtime = await start(fn.name, { timeScale: 0.005, minRulePeriodMs: 700 });
    await waitFor('a scheduled invocation', () => recorder.calls.length >= 1);
    // Assess
    expect(runtime.stats().rules).toEqual([expect.objectContaining({ periodMs: 700 })]);
  });
});

describe('local runtime rules', () => {
  it('reads rate expressions and refuses cron ones', () => {
    expect(ratePeriodMs('rate(1 minute)')).toBe(60_000);
    expect(ratePeriodMs('rate(5 minutes)')).toBe(300_000);
    expect(ratePeriodMs('rate(2 hours)')).toBe(7_200_000);
    expect(ratePeriodMs('cron(0 12 * * ? *)')).toBeUndefined();
  });

  it.each([
    ['no partial response', { ok: true, payload: null }, true, ['a', 'b', 'c']],
    [
      'listed failures',
      { ok: true, payload: { batchItemFailures: [{ itemIdentifier: 'b' }] } },
      true,
      ['a', 'c'],
    ],
    [
      'an unknown identifier',
      { ok: true, payload: { batchItemFailures: [{ itemIdentifier: 'z' }] } },
      true,
      [],
    ],
    ['an empty identifier', { ok: true, payload: { batchItemFailures: [{ itemIdentifier: '' }] } }, true, []],
    ['a failed invocation', { ok: false }, true, []],
    [
      'failures without ReportBatchItemFailures',
      { ok: true, payload: { batchItemFailures: [] } },
      false,
      ['a', 'b', 'c'],
    ],
  ])('applies the partial batch response rules: %s', (_name, result, report, expected) => {
    expect(succeededMessageIds(['a', 'b', 'c'], result, report)).toEqual(expected);
  });
});
