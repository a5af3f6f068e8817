import { createServer, request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { CloudFormationClient, CreateStackCommand } from '@aws-sdk/client-cloudformation';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import {
  CreateEventSourceMappingCommand,
  CreateFunctionCommand,
  GetEventSourceMappingCommand,
  GetFunctionConcurrencyCommand,
  LambdaClient,
  PutFunctionConcurrencyCommand,
} from '@aws-sdk/client-lambda';
import { CreateSecretCommand, SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import { CreateQueueCommand, GetQueueAttributesCommand, SQSClient } from '@aws-sdk/client-sqs';
import type { Context } from 'aws-lambda';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { CaptchaAiClient } from '../../../functions/captchaai/client.js';
import { type AdjustCapDeps, adjustCap, type CapMetricName } from '../../../functions/pipeline/cap.js';
import type { CapSettings } from '../../../functions/pipeline/cap-policy.js';
import { PipelineControl, type PipelineState } from '../../../functions/pipeline/control.js';
import { laneShape } from '../../../functions/pipeline/lanes.js';
import { readStateItem } from '../../../functions/pipeline/state-item.js';
import { resolveConfig } from '../../../infra/config.js';
import { MOTO_REGION, type MotoServer, startMoto } from '../../../local/emulator/moto.js';
import { writeZip } from '../../../local/emulator/zip.js';
import { type CaptchaStandin, startCaptchaStandin } from '../../../local/standins/captchaai/standin.js';
import { createPkSkTable, recordedState, recordState } from '../../fixtures/aws.js';

/**
 * The cap adjuster against moto's Lambda, SQS and DynamoDB APIs and the CaptchaAI stand-in's
 * threadsinfo. moto enforces an account concurrency quota of 110 here, so at most 10 can be
 * reserved before the "unreserved below its minimum of [100]" error, as on a small real account.
 */
const API_KEY = 'cap-adjuster-test-key-0123456789abcdef';
const ACCOUNT_QUOTA = 110;
const SETTINGS: CapSettings = { reserve: 1, minCap: 1, maxCap: 100 };
const WORKER = 'tg-test-worker';

let moto: MotoServer;
let standin: CaptchaStandin;
let lambda: LambdaClient;
let dynamodb: DynamoDBClient;
let sqs: SQSClient;
let cfn: CloudFormationClient;
let clientConfig: {
  endpoint: string;
  region: string;
  credentials: { accessKeyId: string; secretAccessKey: string };
};

interface World {
  queueArn: string;
  mappingUuid: string;
  /** The slot ledger's table: the state item. */
  ledgerTable: string;
  control: PipelineControl;
}

interface Recorded {
  metrics: { name: CapMetricName; value: number }[];
  warnings: { message: string; extra?: Record<string, unknown> }[];
  infos: string[];
  /** Lambda commands sent, by name (the emulator's own record has no write counter). */
  commands: string[];
}

let recorded: Recorded;

beforeAll(async () => {
  moto = await startMoto({ env: { MOTO_LAMBDA_CONCURRENCY_QUOTA: String(ACCOUNT_QUOTA) } });
  clientConfig = {
    endpoint: moto.endpoint,
    region: MOTO_REGION,
    credentials: { accessKeyId: 'testing', secretAccessKey: 'testing' },
  };
  lambda = new LambdaClient(clientConfig);
  dynamodb = new DynamoDBClient(clientConfig);
  sqs = new SQSClient(clientConfig);
  cfn = new CloudFormationClient(clientConfig);
  lambda.middlewareStack.add(
    (next, context) => async (args) => {
      recorded.commands.push(String(context.commandName));
      return next(args);
    },
    { step: 'initialize', name: 'recordCommands' },
  );
  standin = await startCaptchaStandin({ port: 0, threads: 5, apiKey: API_KEY });
});

afterAll(async () => {
  await standin?.close();
  await moto?.stop();
});

beforeEach(async () => {
  recorded = { metrics: [], warnings: [], infos: [], commands: [] };
  standin.setThreads(5);
  standin.setKeyRevoked(false);
  standin.setPlanActive(true);
  await resetMoto();
});

async function resetMoto(): Promise<void> {
  const res = await fetch(`${moto.endpoint}/moto-api/reset`, { method: 'POST' });
  expect(res.ok).toBe(true);
}

/** A worker function, its SQS mapping and the slot ledger holding the pipeline state, as the stack creates them. */
async function createWorld(
  knobs: { reserved?: number; mappingMaximum?: number; paused?: boolean } = {},
): Promise<World> {
  await cfn.send(
    new CreateStackCommand({
      StackName: 'roles',
      TemplateBody: JSON.stringify({
        Resources: {
          WorkerRole: {
            Type: 'AWS::IAM::Role',
            Properties: {
              RoleName: 'tg-test-worker-role',
              AssumeRolePolicyDocument: {
                Version: '2012-10-17',
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
  const queue = await sqs.send(new CreateQueueCommand({ QueueName: 'tg-test-jobs' }));
  const attrs = await sqs.send(
    new GetQueueAttributesCommand({ QueueUrl: queue.QueueUrl, AttributeNames: ['QueueArn'] }),
  );
  const queueArn = attrs.Attributes!.QueueArn!;
  await lambda.send(
    new CreateFunctionCommand({
      FunctionName: WORKER,
      Runtime: 'nodejs22.x',
      Architectures: ['arm64'],
      Role: 'arn:aws:iam::123456789012:role/tg-test-worker-role',
      Handler: 'index.handler',
      Code: {
        ZipFile: writeZip([
          {
            name: 'index.js',
            data: Buffer.from('exports.handler = async () => ({ batchItemFailures: [] });'),
          },
        ]),
      },
    }),
  );
  if (knobs.reserved !== undefined) {
    await lambda.send(
      new PutFunctionConcurrencyCommand({
        FunctionName: WORKER,
        ReservedConcurrentExecutions: knobs.reserved,
      }),
    );
  }
  const mapping = await lambda.send(
    new CreateEventSourceMappingCommand({
      FunctionName: WORKER,
      EventSourceArn: queueArn,
      BatchSize: 1,
      FunctionResponseTypes: ['ReportBatchItemFailures'],
      Enabled: !knobs.paused,
      ...(knobs.mappingMaximum === undefined
        ? {}
        : { ScalingConfig: { MaximumConcurrency: knobs.mappingMaximum } }),
    }),
  );
  const ledgerTable = await createPkSkTable(dynamodb, 'tg-test-ledger');
  const state: PipelineState = knobs.paused
    ? {
        paused: true,
        reason: 'CaptchaAI answered IP_BANNED',
        code: 'IP_BANNED',
        by: 'worker',
        since: 'earlier',
      }
    : { paused: false };
  await recordState(dynamodb, ledgerTable, state);
  recorded.commands = [];
  return {
    queueArn,
    mappingUuid: mapping.UUID!,
    ledgerTable,
    control: new PipelineControl({
      lambda,
      dynamodb,
      ledgerTable,
      workerFunctionName: WORKER,
      queueArn,
      sleep: async () => {},
    }),
  };
}

function deps(world: World, overrides: Partial<AdjustCapDeps> = {}): AdjustCapDeps {
  const captchaai = new CaptchaAiClient({ apiKey: API_KEY, baseUrl: standin.url, timeScale: 1 });
  return {
    lambda,
    control: world.control,
    workerFunctionName: WORKER,
    readThreads: () => captchaai.threadsInfo(),
    settings: SETTINGS,
    metrics: { addMetric: (name, _unit, value) => recorded.metrics.push({ name, value }) },
    logger: {
      info: (message) => recorded.infos.push(message),
      warn: (message, extra) => recorded.warnings.push({ message, extra }),
    },
    ...overrides,
  };
}

/** The knobs as the emulator reports them. */
async function knobsOf(world: World) {
  const concurrency = await lambda.send(new GetFunctionConcurrencyCommand({ FunctionName: WORKER }));
  const mapping = await lambda.send(new GetEventSourceMappingCommand({ UUID: world.mappingUuid }));
  return {
    reserved: concurrency.ReservedConcurrentExecutions,
    mappingMaximum: mapping.ScalingConfig?.MaximumConcurrency,
    mappingState: mapping.State,
    batchSize: mapping.BatchSize,
  };
}

async function stateOf(world: World): Promise<PipelineState> {
  return recordedState(dynamodb, world.ledgerTable);
}

function metric(name: CapMetricName): number | undefined {
  return recorded.metrics.findLast((m) => m.name === name)?.value;
}

const WRITES = [
  'PutFunctionConcurrencyCommand',
  'DeleteFunctionConcurrencyCommand',
  'UpdateEventSourceMappingCommand',
];
const writes = () => recorded.commands.filter((c) => WRITES.includes(c));

describe('adjustCap against the Lambda API (moto) and threadsinfo (stand-in)', () => {
  it('sets reserved concurrency and the mapping maximum to plan threads minus the reserve', async () => {
    // Prepare: deployed with a cap of 2; the plan has 5 threads.
    const world = await createWorld({ reserved: 2, mappingMaximum: 2 });
    // Act
    const result = await adjustCap(deps(world));
    // Assess
    expect(result).toMatchObject({ outcome: 'changed', cap: 4, planThreads: 5 });
    expect(await knobsOf(world)).toMatchObject({ reserved: 4, mappingMaximum: 4, mappingState: 'Enabled' });
    expect(metric('Cap')).toBe(4);
    expect(metric('PlanThreads')).toBe(5);
    expect(metric('WorkingThreads')).toBe(0);
    expect(metric('PipelinePaused')).toBe(0);
  });

  it('follows the plan down and up again', async () => {
    // Prepare
    const world = await createWorld({ reserved: 4, mappingMaximum: 4 });
    // Act: the plan shrinks to 3 threads.
    standin.setThreads(3);
    await adjustCap(deps(world));
    const shrunk = await knobsOf(world);
    // …and grows to 9.
    standin.setThreads(9);
    await adjustCap(deps(world));
    const grown = await knobsOf(world);
    // Assess
    expect(shrunk).toMatchObject({ reserved: 2, mappingMaximum: 2 });
    expect(grown).toMatchObject({ reserved: 8, mappingMaximum: 8 });
  });

  it('writes nothing when the plan has not changed', async () => {
    // Prepare: already at the cap the plan gives.
    const world = await createWorld({ reserved: 4, mappingMaximum: 4 });
    // Act
    const first = await adjustCap(deps(world));
    const second = await adjustCap(deps(world));
    // Assess
    expect(first.outcome).toBe('unchanged');
    expect(second.outcome).toBe('unchanged');
    expect(writes()).toEqual([]);
    expect(await knobsOf(world)).toMatchObject({ reserved: 4, mappingMaximum: 4 });
    expect(metric('Cap')).toBe(4);
  });

  it('writes only the knob that differs', async () => {
    // Prepare: the reservation is right, the mapping maximum drifted (e.g. a stack update).
    const world = await createWorld({ reserved: 4, mappingMaximum: 7 });
    // Act
    await adjustCap(deps(world));
    // Assess
    expect(writes()).toEqual(['UpdateEventSourceMappingCommand']);
    expect(await knobsOf(world)).toMatchObject({ reserved: 4, mappingMaximum: 4 });
  });

  it('holds a cap of 1 with reserved concurrency 1 and no mapping maximum', async () => {
    // Prepare: 2 threads − reserve 1 = 1, below the mapping's minimum maximum of 2.
    const world = await createWorld({ reserved: 4, mappingMaximum: 4 });
    standin.setThreads(2);
    // Act
    const result = await adjustCap(deps(world));
    // Assess
    expect(result).toMatchObject({ outcome: 'changed', cap: 1 });
    const knobs = await knobsOf(world);
    expect(knobs.reserved).toBe(1);
    expect(knobs.mappingMaximum).toBeUndefined();
    expect(knobs.batchSize).toBe(1);
  });

  it('never goes below minCap or above maxCap', async () => {
    // Prepare
    const world = await createWorld({ reserved: 4, mappingMaximum: 4 });
    standin.setThreads(9);
    // Act
    const capped = await adjustCap(deps(world, { settings: { reserve: 1, minCap: 2, maxCap: 6 } }));
    standin.setThreads(1);
    const floored = await adjustCap(deps(world, { settings: { reserve: 1, minCap: 2, maxCap: 6 } }));
    // Assess
    expect(capped).toMatchObject({ cap: 6 });
    expect(floored).toMatchObject({ cap: 2 });
    expect(await knobsOf(world)).toMatchObject({ reserved: 2, mappingMaximum: 2 });
  });

  it('logs once and counts the threads maxCap leaves idle when the plan is above it', async () => {
    // Prepare: a 1,000-thread plan under an explicit maxCap of 8
    const world = await createWorld({ reserved: 4, mappingMaximum: 4 });
    standin.setThreads(1000);
    // Act
    const result = await adjustCap(deps(world, { settings: { reserve: 1, minCap: 1, maxCap: 8 } }));
    // Assess
    expect(result).toMatchObject({ cap: 8, planThreads: 1000 });
    expect(metric('CapClampedByMax')).toBe(991);
    const clamps = recorded.warnings.filter((w) => w.message.startsWith('clamped by maxCap'));
    expect(clamps).toEqual([
      {
        message: expect.stringMatching(
          /plan 1000 threads − reserve 1 = 999 is above maxCap 8: 991 threads idle; to use them raise maxCap to 999/,
        ),
        extra: { planThreads: 1000, reserve: 1, maxCap: 8, idleThreads: 991 },
      },
    ]);
  });

  it('moves the cap of a paused pipeline but leaves its mapping disabled and its state untouched', async () => {
    // Prepare: the worker paused the pipeline on IP_BANNED.
    const world = await createWorld({ reserved: 2, mappingMaximum: 2, paused: true });
    const before = await stateOf(world);
    // Act
    const result = await adjustCap(deps(world));
    // Assess
    expect(result).toMatchObject({ outcome: 'changed', cap: 4, paused: true });
    expect(await knobsOf(world)).toMatchObject({ reserved: 4, mappingMaximum: 4, mappingState: 'Disabled' });
    expect(await stateOf(world)).toEqual(before);
    expect(metric('PipelinePaused')).toBe(1);
  });

  it('pauses the pipeline when threadsinfo gives a stop-class answer', async () => {
    // Prepare: the key was revoked.
    const world = await createWorld({ reserved: 4, mappingMaximum: 4 });
    standin.setKeyRevoked(true);
    // Act
    const result = await adjustCap(deps(world));
    // Assess
    expect(result).toMatchObject({
      outcome: 'paused',
      code: 'ERROR_KEY_DOES_NOT_EXIST',
      alreadyPaused: false,
    });
    expect(await knobsOf(world)).toMatchObject({ reserved: 4, mappingMaximum: 4, mappingState: 'Disabled' });
    const state = await stateOf(world);
    expect(state).toMatchObject({
      paused: true,
      code: 'ERROR_KEY_DOES_NOT_EXIST',
      by: 'cap-adjuster',
    });
    // Said once: not "… to threadsinfo: CaptchaAI answered ERROR_KEY_DOES_NOT_EXIST: …".
    expect(state.reason).toMatch(/^CaptchaAI answered ERROR_KEY_DOES_NOT_EXIST to threadsinfo: \w/);
    expect(state.reason?.match(/CaptchaAI answered/g)).toHaveLength(1);
    expect(metric('PipelinePaused')).toBe(1);
    expect(metric('StopEvents')).toBe(1);
  });

  it('keeps the first reason when a stop-class answer finds the pipeline already paused', async () => {
    // Prepare
    const world = await createWorld({ reserved: 4, mappingMaximum: 4, paused: true });
    const before = await stateOf(world);
    standin.setKeyRevoked(true);
    // Act
    const result = await adjustCap(deps(world));
    // Assess
    expect(result).toMatchObject({ outcome: 'paused', alreadyPaused: true });
    expect(await stateOf(world)).toEqual(before);
    expect(writes()).toEqual([]);
  });

  it('pauses the pipeline when the plan has no threads (no active plan)', async () => {
    // Prepare
    const world = await createWorld({ reserved: 4, mappingMaximum: 4 });
    standin.setPlanActive(false);
    // Act
    const result = await adjustCap(deps(world));
    // Assess
    expect(result).toMatchObject({ outcome: 'paused', code: 'NO_ACTIVE_PLAN' });
    expect(await knobsOf(world)).toMatchObject({ mappingState: 'Disabled', reserved: 4 });
    expect(await stateOf(world)).toMatchObject({ paused: true, code: 'NO_ACTIVE_PLAN' });
  });

  it('keeps the last cap when threadsinfo cannot be reached', async () => {
    // Prepare: a port nothing listens on.
    const world = await createWorld({ reserved: 3, mappingMaximum: 3 });
    const deadUrl = await closedPortUrl();
    const unreachable = new CaptchaAiClient({ apiKey: API_KEY, baseUrl: deadUrl, timeScale: 1 });
    // Act
    const result = await adjustCap(deps(world, { readThreads: () => unreachable.threadsInfo() }));
    // Assess
    expect(result).toMatchObject({ outcome: 'kept' });
    expect(writes()).toEqual([]);
    expect(await knobsOf(world)).toMatchObject({ reserved: 3, mappingMaximum: 3, mappingState: 'Enabled' });
    expect(await stateOf(world)).toEqual({ paused: false });
    expect(metric('Cap')).toBe(3);
    expect(recorded.warnings.map((w) => w.message)).toContain('threadsinfo failed; keeping the last cap');
  });

  it('keeps the last cap when threadsinfo answers a server error', async () => {
    // Prepare: a CaptchaAI that answers 502 HTML pages.
    const world = await createWorld({ reserved: 3, mappingMaximum: 3 });
    const broken = await startHttp((res) => {
      res.writeHead(502, { 'content-type': 'text/html' }).end('<html>502 Bad Gateway</html>');
    });
    const client = new CaptchaAiClient({ apiKey: API_KEY, baseUrl: broken.url, timeScale: 1 });
    // Act
    const result = await adjustCap(deps(world, { readThreads: () => client.threadsInfo() })).finally(
      broken.close,
    );
    // Assess
    expect(result).toMatchObject({ outcome: 'kept' });
    expect(await knobsOf(world)).toMatchObject({ reserved: 3, mappingMaximum: 3 });
  });

  it('survives ResourceInUse on the mapping and applies the cap on the next run', async () => {
    // Prepare: the mapping is mid-update once, as Lambda answers while an earlier change applies.
    const world = await createWorld({ reserved: 4, mappingMaximum: 4 });
    standin.setThreads(3);
    let busy = 1;
    const busyLambda = new LambdaClient(clientConfig);
    busyLambda.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === 'UpdateEventSourceMappingCommand' && busy-- > 0) {
          throw Object.assign(new Error('The resource you requested is currently in use.'), {
            name: 'ResourceInUseException',
          });
        }
        return next(args);
      },
      { step: 'initialize', name: 'mappingBusyOnce' },
    );
    // Act
    const first = await adjustCap(deps(world, { lambda: busyLambda }));
    const afterFirst = await knobsOf(world);
    const second = await adjustCap(deps(world, { lambda: busyLambda }));
    // Assess: lowering writes the mapping first, so nothing changed on the busy run.
    expect(first).toMatchObject({
      outcome: 'kept',
      reason: expect.stringContaining('ResourceInUseException'),
    });
    expect(afterFirst).toMatchObject({ reserved: 4, mappingMaximum: 4 });
    expect(second).toMatchObject({ outcome: 'changed', cap: 2 });
    expect(await knobsOf(world)).toMatchObject({ reserved: 2, mappingMaximum: 2 });
  });

  it('falls back to the mapping maximum alone when the account cannot reserve the cap', async () => {
    // Prepare: 21 threads − 1 = cap 20, more than this account's quota of 110 leaves reservable (10).
    const world = await createWorld({ reserved: 4, mappingMaximum: 4 });
    standin.setThreads(21);
    // Act
    const result = await adjustCap(deps(world));
    // Assess: the smaller reservation is dropped so it cannot throttle below the mapping maximum.
    expect(result).toMatchObject({ outcome: 'changed', cap: 20, reservedFallback: true });
    const knobs = await knobsOf(world);
    expect(knobs.reserved).toBeUndefined();
    expect(knobs.mappingMaximum).toBe(20);
    expect(metric('ReservedConcurrencyFallback')).toBe(1);
    expect(
      recorded.warnings.find((w) => w.message.includes('cannot reserve concurrency'))?.extra,
    ).toMatchObject({
      cap: 20,
      error: expect.stringContaining('below its minimum value of [100]'),
    });
  });

  it('keeps a cap of 1 at the mapping minimum of 2 when nothing can be reserved', async () => {
    // Prepare: another function holds the whole reservable budget, so even 1 cannot be reserved.
    const world = await createWorld({ mappingMaximum: 4 });
    await lambda.send(
      new CreateFunctionCommand({
        FunctionName: 'someone-else',
        Runtime: 'nodejs22.x',
        Role: 'arn:aws:iam::123456789012:role/tg-test-worker-role',
        Handler: 'index.handler',
        Code: { ZipFile: writeZip([{ name: 'index.js', data: Buffer.from('exports.handler=async()=>1') }]) },
      }),
    );
    await lambda.send(
      new PutFunctionConcurrencyCommand({ FunctionName: 'someone-else', ReservedConcurrentExecutions: 10 }),
    );
    standin.setThreads(2);
    // Act
    const result = await adjustCap(deps(world));
    // Assess
    expect(result).toMatchObject({ cap: 1, reservedFallback: true });
    expect(await knobsOf(world)).toMatchObject({ reserved: undefined, mappingMaximum: 2 });
    expect(
      recorded.warnings.find((w) => w.message.includes('cannot reserve concurrency'))?.extra,
    ).toMatchObject({
      note: expect.stringContaining('cannot be held by the mapping alone'),
    });
  });

  it('returns to reserved concurrency once the account can reserve again', async () => {
    // Prepare: a fallback left no reservation and the mapping maximum at 4; the plan drops to 2.
    const world = await createWorld({ mappingMaximum: 4 });
    standin.setThreads(2);
    // Act
    const result = await adjustCap(deps(world));
    // Assess: cap 1 is reserved again, so the mapping maximum goes.
    expect(result).toMatchObject({ cap: 1, reservedFallback: false });
    const knobs = await knobsOf(world);
    expect(knobs.reserved).toBe(1);
    expect(knobs.mappingMaximum).toBeUndefined();
  });

  it('estimates threads busy outside the pipeline and warns when they exceed the reserve', async () => {
    // Prepare: our cap is 2 and 4 of the plan's 5 threads are busy, so at least 2 are someone else's.
    const world = await createWorld({ reserved: 2, mappingMaximum: 2 });
    const busy = await startCaptchaStandin({
      port: 0,
      threads: 5,
      apiKey: API_KEY,
      latency: { recaptcha_v2: { minMs: 60_000, maxMs: 60_000 } },
    });
    try {
      for (let i = 0; i < 4; i++) await submitTask(busy.url);
      const client = new CaptchaAiClient({ apiKey: API_KEY, baseUrl: busy.url, timeScale: 1 });
      // Act
      const result = await adjustCap(deps(world, { readThreads: () => client.threadsInfo() }));
      // Assess
      expect(result).toMatchObject({ workingThreads: 4, externalThreadsBusy: 2 });
      expect(metric('ExternalThreadsBusy')).toBe(2);
      expect(recorded.warnings.map((w) => w.message)).toContain(
        'more threads are busy outside this pipeline than the reserve allows for',
      );
    } finally {
      await busy.close();
    }
  });
});

describe('adjustCap with lanes: the knobs hold r, the shape is published beside the state', () => {
  let clock = 1_000_000;
  /** The control of a stack deployed with lanes 4 and initialCap 8: its first shape is 2 × 4. */
  const lanesControl = (world: World) =>
    new PipelineControl({
      lambda,
      dynamodb,
      ledgerTable: world.ledgerTable,
      workerFunctionName: WORKER,
      queueArn: world.queueArn,
      firstShape: { ...laneShape(8, 4), since: 0 },
      sleep: async () => {},
    });
  const lanesDeps = (world: World): AdjustCapDeps =>
    deps(
      { ...world, control: lanesControl(world) },
      { lanes: { lanes: 4, workerTimeoutMs: 600_000, settleMs: 4_000, now: () => clock } },
    );
  /** The shape as the workers read it: the published one, or the first until one is. */
  const shapeOf = (world: World) => lanesControl(world).readShape();

  it('publishes {cap, r, L} and sets both knobs to r', async () => {
    // Prepare: 13 threads − 1 = cap 12 → 3 invocations of 4 lanes
    const world = await createWorld({ reserved: 2, mappingMaximum: 2 });
    standin.setThreads(13);
    // Act
    const result = await adjustCap(lanesDeps(world));
    // Assess
    expect(result).toMatchObject({
      outcome: 'changed',
      cap: 12,
      inForce: 12,
      shape: { cap: 12, r: 3, L: 4 },
    });
    expect(await knobsOf(world)).toMatchObject({ reserved: 3, mappingMaximum: 3 });
    expect(await shapeOf(world)).toMatchObject({ cap: 12, r: 3, L: 4, since: clock });
    expect(metric('LanesPerInvocation')).toBe(4);
  });

  it('runs a 1,000-thread plan within 2 % of plan − reserve with the deploy defaults and lanes 16', async () => {
    // Prepare: the cap settings a stack deployed with the defaults and lanes 16 gives the adjuster
    const { reserve, minCap, maxCap } = resolveConfig({ lanes: 16 });
    const world = await createWorld({ reserved: 2, mappingMaximum: 2 });
    standin.setThreads(1000);
    // Act
    const result = await adjustCap({
      ...lanesDeps(world),
      settings: { reserve, minCap, maxCap },
      lanes: { lanes: 16, workerTimeoutMs: 600_000, settleMs: 4_000, now: () => clock },
    });
    // Assess: 999 carried by 62 invocations of 16 lanes (992 solves at once)
    const wanted = 1000 - reserve;
    expect(result).toMatchObject({ outcome: 'changed', cap: wanted, shape: { cap: wanted, r: 62, L: 16 } });
    expect(result.outcome !== 'paused' && result.inForce).toBeGreaterThanOrEqual(0.98 * wanted);
    expect(await knobsOf(world)).toMatchObject({ mappingMaximum: 62 });
    expect(metric('CapClampedByMax')).toBe(0);
    expect(recorded.warnings.map((w) => w.message)).not.toContainEqual(expect.stringMatching(/maxCap/));
  });

  it('on a fall, lowers the knobs first and publishes a drain for the invocations started before it', async () => {
    // Prepare: at cap 12 (3 × 4)
    const world = await createWorld({ reserved: 3, mappingMaximum: 3 });
    standin.setThreads(13);
    await adjustCap(lanesDeps(world));
    recorded.commands = [];
    // Act: 7 threads − 1 = cap 6 → 2 × 3; the 3 older invocations keep 2 lanes each
    standin.setThreads(7);
    clock += 60_000;
    await adjustCap(lanesDeps(world));
    // Assess
    expect(await knobsOf(world)).toMatchObject({ reserved: 2, mappingMaximum: 2 });
    expect(await shapeOf(world)).toMatchObject({
      cap: 6,
      r: 2,
      L: 3,
      drain: { L: 2, fromR: 3, until: clock + 600_000 },
    });
    expect(writes()).toEqual(['UpdateEventSourceMappingCommand', 'PutFunctionConcurrencyCommand']);
  });

  it('on a grow that needs fewer lanes, publishes the smaller L first and raises r on a later run', async () => {
    // Prepare: cap 8 with lanes 4 (2 × 4)
    const world = await createWorld({ reserved: 2, mappingMaximum: 2 });
    standin.setThreads(9);
    await adjustCap(lanesDeps(world));
    expect(await shapeOf(world)).toMatchObject({ cap: 8, r: 2, L: 4 });
    // Act 1: 11 threads − 1 = cap 10 → 3 × 3: L falls from 4 to 3, r must wait
    standin.setThreads(11);
    clock += 60_000;
    await adjustCap(lanesDeps(world));
    const first = { knobs: await knobsOf(world), shape: await shapeOf(world) };
    // Act 2: the next run
    clock += 60_000;
    await adjustCap(lanesDeps(world));
    // Assess
    expect(first.shape).toMatchObject({ cap: 10, r: 2, L: 3 });
    expect(first.knobs).toMatchObject({ reserved: 2, mappingMaximum: 2 });
    expect(await shapeOf(world)).toMatchObject({ cap: 10, r: 3, L: 3 });
    expect(await knobsOf(world)).toMatchObject({ reserved: 3, mappingMaximum: 3 });
  });

  it('publishes the shape attribute alone: a state an operator recorded stays as it was, and the first shape stands until then', async () => {
    // Prepare: a resume recorded by the operator; no shape published yet (the first one, 2 × 4, stands)
    const world = await createWorld({ reserved: 2, mappingMaximum: 2 });
    const resumed: PipelineState = {
      paused: false,
      reason: 'resumed by operator',
      since: 'then',
      by: 'operator',
    };
    await recordState(dynamodb, world.ledgerTable, resumed);
    expect(await shapeOf(world)).toEqual({ ...laneShape(8, 4), since: 0 });
    standin.setThreads(13);
    // Act
    await adjustCap(lanesDeps(world));
    // Assess: one item holds both, each as its writer left it
    const item = await readStateItem(dynamodb, world.ledgerTable, ['state', 'shape']);
    expect(JSON.parse(item.state ?? '{}')).toEqual(resumed);
    expect(JSON.parse(item.shape ?? '{}')).toMatchObject({ cap: 12, r: 3, L: 4, since: clock });
  });
});

describe('cap adjuster handler', () => {
  it('reads its environment and the API key secret, then moves the cap', async () => {
    // Prepare
    const world = await createWorld({ reserved: 2, mappingMaximum: 2 });
    const secrets = new SecretsManagerClient(clientConfig);
    await secrets.send(
      new CreateSecretCommand({
        Name: 'tg-test/captchaai',
        SecretString: JSON.stringify({ apiKey: API_KEY }),
      }),
    );
    const saved = { ...process.env };
    Object.assign(process.env, moto.awsEnv, {
      WORKER_FUNCTION_NAME: WORKER,
      QUEUE_ARN: world.queueArn,
      LEDGER_TABLE: world.ledgerTable,
      CAPTCHAAI_URL: standin.url,
      CAPTCHAAI_SECRET_NAME: 'tg-test/captchaai',
      TIME_SCALE: '0.01',
      RESERVE: '2',
      MIN_CAP: '1',
      MAX_CAP: '50',
      POWERTOOLS_SERVICE_NAME: 'tg-test',
      POWERTOOLS_METRICS_NAMESPACE: 'Threadgate',
      POWERTOOLS_DEV: 'false',
    });
    const stdout = captureStdout();
    try {
      const { handler } = await import('../../../functions/cap-adjuster.js');
      // Act
      const result = await handler({ time: '2026-01-01T00:00:00Z' }, {
        functionName: 'tg-test-cap-adjuster',
        awsRequestId: 'adjuster-req-1',
      } as Context);
      // Assess
      expect(result).toMatchObject({ outcome: 'changed', cap: 3 });
      const logLines = stdout
        .lines()
        .filter((l) => l.startsWith('{') && !l.includes('"_aws"'))
        .map((l) => JSON.parse(l) as Record<string, unknown>);
      const messages = logLines.map((l) => l.message);
      expect(messages).toContain('cap changed');
      expect(messages).toContain('cap adjuster run');
      for (const line of logLines) {
        expect(line).toMatchObject({
          function_request_id: 'adjuster-req-1',
          function_name: 'tg-test-cap-adjuster',
        });
      }
      const again = await handler({ time: '2026-01-01T00:01:00Z' }, {
        functionName: 'tg-test-cap-adjuster',
        awsRequestId: 'adjuster-req-2',
      } as Context);
      expect(again).toMatchObject({ outcome: 'unchanged' });
      expect(await knobsOf(world)).toMatchObject({ reserved: 3, mappingMaximum: 3 });
      // The run that changed nothing logs at debug, below the default INFO level.
      const runs = stdout.lines().filter((l) => l.includes('"cap adjuster run"'));
      expect(runs).toHaveLength(1);
      expect(runs[0]).toContain('"changed"');
      const emf = stdout.lines().filter((l) => l.includes('"_aws"'));
      expect(emf.join('\n')).toContain('"PlanThreads"');
      expect(emf.join('\n')).toContain('"CapClampedByMax"');
      expect(stdout.lines().join('\n')).not.toContain(API_KEY);
    } finally {
      stdout.stop();
      process.env = saved;
    }
  });
});

async function closedPortUrl(): Promise<string> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return `http://127.0.0.1:${port}`;
}

async function startHttp(
  answer: (res: import('node:http').ServerResponse) => void,
): Promise<{ url: string; close: () => Promise<void> }> {
  const server = createServer((_req, res) => answer(res));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

/** Starts a reCAPTCHA v2 task at a stand-in, as another client of the same key would. */
function submitTask(baseUrl: string): Promise<void> {
  const body = new URLSearchParams({
    key: API_KEY,
    method: 'userrecaptcha',
    googlekey: '6Le-test-sitekey',
    pageurl: 'https://forms.example.com/a',
    json: '1',
  }).toString();
  return new Promise((resolve, reject) => {
    const req = request(`${baseUrl}/in.php`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
    });
    req.on('response', (res) => {
      res.resume();
      res.on('end', () =>
        res.statusCode === 200 ? resolve() : reject(new Error(`in.php ${res.statusCode}`)),
      );
    });
    req.on('error', reject);
    req.end(body);
  });
}

function captureStdout(): { lines: () => string[]; stop: () => void } {
  const chunks: string[] = [];
  const original = process.stdout.write.bind(process.stdout);
  process.stdout.write = ((chunk: string | Uint8Array, ...rest: unknown[]) => {
    chunks.push(typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString('utf8'));
    const callback = rest.find((r) => typeof r === 'function') as (() => void) | undefined;
    callback?.();
    return true;
  }) as typeof process.stdout.write;
  return {
    lines: () => chunks.join('').split('\n'),
    stop: () => {
      process.stdout.write = original;
    },
  };
}
