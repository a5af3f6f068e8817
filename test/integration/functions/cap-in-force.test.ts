import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import {
  DeleteFunctionConcurrencyCommand,
  LambdaClient,
  PutFunctionConcurrencyCommand,
  UpdateEventSourceMappingCommand,
} from '@aws-sdk/client-lambda';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TransientError } from '../../../functions/common/errors.js';
import { adjustCap } from '../../../functions/pipeline/cap.js';
import { capInForce } from '../../../functions/pipeline/cap-policy.js';
import { PipelineControl } from '../../../functions/pipeline/control.js';
import { LocalRuntime } from '../../../local/runtime/local-runtime.js';
import { type CliStack, cliEnv, runCli, startCliStack } from '../../fixtures/cli.js';

/**
 * One definition of the cap in force (functions/pipeline/cap-policy.ts capInForce), seen by the
 * three tools that show or enforce it, on one deployment in moto: `threadgate status` (a real
 * CLI process), the local runtime's SQS poller (the concurrency it polls with) and the cap
 * adjuster (the cap it reports when it keeps the knobs as they are).
 */
interface Scenario {
  name: string;
  reserved: number | undefined;
  maximum: number | undefined;
  paused: boolean;
  cap: number;
}

const SCENARIOS: Scenario[] = [
  { name: 'reservation and mapping maximum both set', reserved: 5, maximum: 3, paused: false, cap: 3 },
  { name: 'only a reservation', reserved: 5, maximum: undefined, paused: false, cap: 5 },
  { name: 'only a mapping maximum', reserved: undefined, maximum: 4, paused: false, cap: 4 },
  {
    name: 'a cap of 1 (reservation 1, no mapping maximum)',
    reserved: 1,
    maximum: undefined,
    paused: false,
    cap: 1,
  },
  { name: 'a paused pipeline', reserved: 5, maximum: 5, paused: true, cap: 0 },
];

let stack: CliStack;
let lambda: LambdaClient;
let control: PipelineControl;
let runtime: LocalRuntime;
let workDir: string;

beforeAll(async () => {
  stack = await startCliStack();
  lambda = new LambdaClient(stack.clientConfig);
  control = new PipelineControl({
    lambda,
    dynamodb: new DynamoDBClient(stack.clientConfig),
    ledgerTable: stack.outputs.LedgerTableName!,
    workerFunctionName: stack.outputs.WorkerFunctionName!,
    queueArn: stack.outputs.QueueArn!,
  });
  workDir = mkdtempSync(join(tmpdir(), 'threadgate-cap-in-force-'));
  const code = join(workDir, 'code');
  mkdirSync(code);
  writeFileSync(join(code, 'index.js'), 'exports.handler = async () => ({ batchItemFailures: [] });\n');
  writeFileSync(join(code, 'package.json'), '{"type":"commonjs"}\n');
  runtime = await LocalRuntime.start({
    awsEnv: stack.moto.awsEnv,
    logDir: join(workDir, 'logs'),
    functionNames: [stack.outputs.WorkerFunctionName!],
    codeDirs: { [stack.outputs.WorkerFunctionName!]: code },
    // Long enough that only the explicit refresh below reads the knobs.
    refreshMs: 60_000,
  });
});

afterAll(async () => {
  await runtime?.stop();
  await stack?.stop();
  if (workDir) rmSync(workDir, { recursive: true, force: true });
});

async function deploy(s: Scenario): Promise<void> {
  const FunctionName = stack.outputs.WorkerFunctionName!;
  if (s.reserved === undefined) await lambda.send(new DeleteFunctionConcurrencyCommand({ FunctionName }));
  else
    await lambda.send(
      new PutFunctionConcurrencyCommand({ FunctionName, ReservedConcurrentExecutions: s.reserved }),
    );
  await lambda.send(
    new UpdateEventSourceMappingCommand({
      UUID: stack.outputs.MappingUuid!,
      ScalingConfig: s.maximum === undefined ? {} : { MaximumConcurrency: s.maximum },
    }),
  );
  if (s.paused) await control.pause('cap-in-force test', 'operator');
  else if ((await control.readState()).paused || !(await control.readMapping()).enabled) {
    await control.resume('operator');
  }
}

async function cliCap(): Promise<number | null> {
  const run = await runCli(['status', '--json', '--no-outcomes'], { env: cliEnv(stack.moto) });
  expect(run.code, run.stderr).toBe(0);
  return (JSON.parse(run.stdout) as { cap: number | null }).cap;
}

async function runtimeCap(): Promise<number | undefined> {
  await runtime.refresh();
  return runtime.stats().mappings.find((m) => m.uuid === stack.outputs.MappingUuid)?.limit;
}

async function adjusterCap(): Promise<number | undefined> {
  // threadsinfo fails transiently: the adjuster keeps the knobs and reports the cap in force.
  const result = await adjustCap({
    lambda,
    control,
    workerFunctionName: stack.outputs.WorkerFunctionName!,
    readThreads: () => Promise.reject(new TransientError('ERROR_SERVER_ERROR')),
    settings: { reserve: 2, minCap: 1, maxCap: 1000 },
  });
  expect(result.outcome).toBe('kept');
  return result.inForce;
}

describe('the cap in force', () => {
  it.each(SCENARIOS)('is the same for the CLI, the local runtime and the adjuster with $name', async (s) => {
    // Prepare
    await deploy(s);

    // Act
    const seen = { cli: await cliCap(), runtime: await runtimeCap(), adjuster: await adjusterCap() };

    // Assess
    expect(seen).toEqual({ cli: s.cap, runtime: s.cap, adjuster: s.cap });
  });

  it('is undefined (no limit) with neither knob set, and 0 whenever paused', () => {
    expect(capInForce({ reservedConcurrency: undefined, mappingMaximum: undefined })).toBeUndefined();
    expect(capInForce({ reservedConcurrency: undefined, mappingMaximum: undefined }, true)).toBe(0);
    expect(capInForce({ reservedConcurrency: 0, mappingMaximum: 10 })).toBe(0);
  });
});
