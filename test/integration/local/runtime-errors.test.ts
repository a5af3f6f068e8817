import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CreateEventSourceMappingCommand, CreateFunctionCommand } from '@aws-sdk/client-lambda';
import { CreateQueueCommand, GetQueueAttributesCommand, SendMessageBatchCommand } from '@aws-sdk/client-sqs';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { clientConfig } from '../../../local/emulator/deploy.js';
import { addAwsFaults, awsFaults, clearAwsFaults } from '../../../local/emulator/fault-client.js';
import { MOTO_ACCOUNT, MOTO_REGION, type MotoServer } from '../../../local/emulator/moto.js';
import { writeZip } from '../../../local/emulator/zip.js';
import { EmulatorCloudWatch } from '../../../local/runtime/cloudwatch/client.js';
import { lambdaNode } from '../../../local/runtime/lambda-node.js';
import { LocalRuntime } from '../../../local/runtime/local-runtime.js';
import { type AwsClients, clientsFor, createRole, startMoto } from '../../fixtures/aws.js';

/**
 * What Lambda counts as a function's errors, on the local runtime against moto, with a
 * hand-made function: its AWS/Lambda metrics in the emulator's CloudWatch and the alarms the
 * runtime evaluates on them (local/runtime/cloudwatch/), an environment killed from outside
 * (`killEnvironments`), and one killed for passing its memory size (process isolation).
 */

const HANDLER = `
exports.handler = async (event) => {
  const body = event.Records[0].body;
  if (body === 'throw') throw new Error('boom');
  if (body === 'hold') await new Promise((resolve) => setTimeout(resolve, 60000));
  if (body === 'grow') {
    // 4 MiB written at a time (written, so the pages are resident), kept, up to 512 MiB.
    const kept = [];
    for (let mb = 0; mb < 512; mb += 4) {
      kept.push(Buffer.allocUnsafe(4 << 20).fill(1));
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    return { grew: kept.length };
  }
  return {};
};
`;
/** Lambda's Node for Linux (process isolation): npm installs it on Linux x64 and arm64 only. */
const LAMBDA_NODE = lambdaNode();
const KILLED = 'Runtime exited with error: signal: killed';

let moto: MotoServer;
let clients: AwsClients;
let cloudwatch: EmulatorCloudWatch;
let roleArn: string;
let workDir: string;
let runtime: LocalRuntime | undefined;
let counter = 0;

beforeAll(async () => {
  moto = await startMoto();
  clients = clientsFor(moto);
  cloudwatch = new EmulatorCloudWatch(clientConfig(moto.awsEnv));
  roleArn = await createRole(moto, 'runtime-errors');
  workDir = mkdtempSync(join(tmpdir(), 'threadgate-runtime-errors-'));
  mkdirSync(join(workDir, 'code'));
  writeFileSync(join(workDir, 'code', 'index.js'), HANDLER);
});

afterEach(async () => {
  await runtime?.stop();
  runtime = undefined;
  await clearAwsFaults(moto.endpoint);
});

afterAll(async () => {
  await moto?.stop();
  rmSync(workDir, { recursive: true, force: true });
});

/** The function with a queue mapping; its runtime runs it (and only it) from the code directory. */
async function deploy(memorySize = 128) {
  const name = `errors-${++counter}`;
  const queue = await clients.sqs.send(
    new CreateQueueCommand({ QueueName: `${name}-jobs`, Attributes: { VisibilityTimeout: '120' } }),
  );
  await clients.lambda.send(
    new CreateFunctionCommand({
      FunctionName: name,
      Runtime: 'nodejs22.x',
      Role: roleArn,
      Handler: 'index.handler',
      Code: { ZipFile: writeZip([{ name: 'index.js', data: Buffer.from(HANDLER) }]) },
      Timeout: 60,
      MemorySize: memorySize,
    }),
  );
  await clients.lambda.send(
    new CreateEventSourceMappingCommand({
      FunctionName: name,
      EventSourceArn: `arn:aws:sqs:${MOTO_REGION}:${MOTO_ACCOUNT}:${name}-jobs`,
      BatchSize: 1,
    }),
  );
  const logDir = join(workDir, name);
  const start = (isolation: 'thread' | 'process' = 'thread') =>
    LocalRuntime.start({
      awsEnv: moto.awsEnv,
      logDir,
      functionNames: [name],
      codeDirs: { [name]: join(workDir, 'code') },
      refreshMs: 200,
      isolation,
    });
  return {
    name,
    queueUrl: queue.QueueUrl!,
    start,
    send: (bodies: string[]) =>
      clients.sqs.send(
        new SendMessageBatchCommand({
          QueueUrl: queue.QueueUrl,
          Entries: bodies.map((MessageBody, i) => ({ Id: String(i), MessageBody })),
        }),
      ),
    log: (file: string) => readFileSync(join(logDir, file), 'utf8'),
  };
}

/** The sum of a function's AWS/Lambda metric over the last ten minutes (undefined: no datapoint). */
async function lambdaSum(functionName: string, metric: string): Promise<number | undefined> {
  const now = Math.floor(Date.now() / 1000) + 1;
  const points = await cloudwatch.statistics(
    {
      Namespace: 'AWS/Lambda',
      MetricName: metric,
      Dimensions: [{ Name: 'FunctionName', Value: functionName }],
    },
    { start: now - 600, end: now, period: 600, statistics: ['Sum'] },
  );
  return points[0]?.Sum;
}

async function stateOf(alarmName: string): Promise<string | undefined> {
  return (await cloudwatch.metricAlarms()).find((a) => a.AlarmName === alarmName)?.StateValue;
}

async function waitFor(what: string, check: () => boolean | Promise<boolean>, timeoutMs = 30_000) {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    if (await check()) return;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`timed out waiting for ${what}`);
}

const statsOf = (name: string) => runtime?.stats().functions[name];

describe("the local runtime's Lambda metrics and alarms", () => {
  it('counts Invocations and Errors in AWS/Lambda, and an alarm on Errors goes to ALARM; a math alarm is left alone, named once', async () => {
    // Prepare: an Errors alarm as the stack's worker-errors, and one on a math expression.
    const fn = await deploy();
    const errorsAlarm = {
      AlarmName: `${fn.name}-errors`,
      Namespace: 'AWS/Lambda',
      MetricName: 'Errors',
      Dimensions: [{ Name: 'FunctionName', Value: fn.name }],
      Statistic: 'Sum',
      Period: 300,
      EvaluationPeriods: 1,
      Threshold: 1,
      ComparisonOperator: 'GreaterThanOrEqualToThreshold',
      TreatMissingData: 'notBreaching',
    };
    await cloudwatch.call('PutMetricAlarm', errorsAlarm);
    await cloudwatch.call('PutMetricAlarm', {
      AlarmName: `${fn.name}-math`,
      EvaluationPeriods: 1,
      Threshold: 1,
      ComparisonOperator: 'GreaterThanThreshold',
      Metrics: [
        { Id: 'e', Expression: 'm / 2', ReturnData: true },
        {
          Id: 'm',
          MetricStat: { Metric: { Namespace: 'AWS/Lambda', MetricName: 'Errors' }, Period: 60, Stat: 'Sum' },
          ReturnData: false,
        },
      ],
    });
    runtime = await fn.start();
    await runtime.evaluateAlarms();
    const before = await stateOf(errorsAlarm.AlarmName);

    // Act: two clean invocations and one that throws
    await fn.send(['ok', 'ok', 'throw']);
    await waitFor(
      'three invocations',
      () => (statsOf(fn.name)?.invocations ?? 0) >= 3 && statsOf(fn.name)?.inFlight === 0,
    );
    await runtime.evaluateAlarms();

    // Assess (the state read back: the runtime's own 10 s evaluation may have made the change)
    expect(before).toBe('OK');
    expect(await stateOf(errorsAlarm.AlarmName)).toBe('ALARM');
    expect(await stateOf(`${fn.name}-math`)).toBe('OK');
    expect(await lambdaSum(fn.name, 'Invocations')).toBe(3);
    expect(await lambdaSum(fn.name, 'Errors')).toBe(1);
    expect(
      fn.log('runtime.log').split(`alarm ${fn.name}-math not evaluated: its metric is a math expression`),
    ).toHaveLength(2);
  });

  it('a PutMetricData that fails is logged and its counts go with the next one, the invocations unharmed; stop sends the last', async () => {
    // Prepare
    const fn = await deploy();
    runtime = await fn.start();
    await addAwsFaults(moto.endpoint, [{ operation: 'PutMetricData', times: 1 }]);

    // Act: two invocations whose first PutMetricData fails, then one more published by the stop
    await fn.send(['ok', 'ok']);
    await waitFor(
      'two invocations',
      () => statsOf(fn.name)?.invocations === 2 && statsOf(fn.name)?.inFlight === 0,
    );
    await runtime.metrics.flush();
    await runtime.metrics.flush();
    const afterRetry = await lambdaSum(fn.name, 'Invocations');
    await fn.send(['ok']);
    await waitFor(
      'the third invocation',
      () => statsOf(fn.name)?.invocations === 3 && statsOf(fn.name)?.inFlight === 0,
    );
    await runtime.stop();

    // Assess (whichever flush met the fault, the runtime's own every 5 s or the test's)
    expect((await awsFaults(moto.endpoint)).map((r) => r.failed)).toEqual([1]);
    expect(afterRetry).toBe(2);
    expect(await lambdaSum(fn.name, 'Invocations')).toBe(3);
    expect(await lambdaSum(fn.name, 'Errors')).toBe(0);
    expect(fn.log('runtime.log')).toMatch(
      /Lambda metrics not published \(sent again with the next\): .*PutMetricData: 500/,
    );
  });
});

describe('environments killed from outside', () => {
  it('killEnvironments ends a busy environment as Lambda reports a killed one: Runtime.ExitError, an Error, its message left to come back', async () => {
    // Prepare: one invocation holding its environment
    const fn = await deploy();
    runtime = await fn.start();
    await fn.send(['hold']);
    await waitFor('the invocation to hold its environment', () => statsOf(fn.name)?.inFlight === 1);

    // Act
    const idleKilled = await runtime.killEnvironments(fn.name, { busy: false });
    const busyKilled = await runtime.killEnvironments(fn.name, { busy: true });
    await waitFor('the invocation to end', () => statsOf(fn.name)?.inFlight === 0);
    await runtime.evaluateAlarms();

    // Assess
    expect({ idleKilled, busyKilled }).toEqual({ idleKilled: 0, busyKilled: 1 });
    expect(statsOf(fn.name)).toMatchObject({ invocations: 1, errors: 1, timeouts: 0 });
    expect(fn.log(`${fn.name}.log`)).toContain(`ERROR Runtime.ExitError: ${KILLED}`);
    expect(await lambdaSum(fn.name, 'Errors')).toBe(1);
    const queue = await clients.sqs.send(
      new GetQueueAttributesCommand({
        QueueUrl: fn.queueUrl,
        AttributeNames: ['ApproximateNumberOfMessagesNotVisible'],
      }),
    );
    expect(queue.Attributes?.ApproximateNumberOfMessagesNotVisible).toBe('1');
  });

  it.skipIf('missing' in LAMBDA_NODE)(
    'a process environment whose memory passes the memory size is killed as Lambda kills it: Runtime.ExitError, Max Memory Used = the size, an Error',
    async () => {
      // Prepare
      const fn = await deploy(128);
      runtime = await fn.start('process');

      // Act: an invocation that keeps what it allocates
      await fn.send(['grow']);
      await waitFor(
        'the invocation to end',
        () => statsOf(fn.name)?.invocations === 1 && statsOf(fn.name)?.inFlight === 0,
      );
      await runtime.metrics.flush();

      // Assess
      const log = fn.log(`${fn.name}.log`);
      expect(statsOf(fn.name)).toMatchObject({ invocations: 1, errors: 1, timeouts: 0 });
      expect(log).toContain(`ERROR Runtime.ExitError: ${KILLED}`);
      expect(log).toMatch(/memory: peak RSS 1\d\d\.\d MB passed the memory size 128 MB: killed/);
      expect(log).toMatch(/REPORT RequestId: \S+ Memory Size: 128 MB Max Memory Used: 128 MB/);
      const peak = statsOf(fn.name)?.memory.environments[0]?.peakRss ?? 0;
      expect(peak).toBeGreaterThan(128 * 1024 * 1024);
      expect(await lambdaSum(fn.name, 'Errors')).toBe(1);
    },
  );
});
