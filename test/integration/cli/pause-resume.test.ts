import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { GetEventSourceMappingCommand, LambdaClient } from '@aws-sdk/client-lambda';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type CaptchaStandin, startCaptchaStandin } from '../../../local/standins/captchaai/standin.js';
import { recordedState as stateIn } from '../../fixtures/aws.js';
import { type CliStack, cliEnv, cliRuns, runCli, startCliStack } from '../../fixtures/cli.js';

const API_KEY = 'pause-suite-key-0b7e61d94c2a83f5';

let stack: CliStack;
let standin: CaptchaStandin;
let lambda: LambdaClient;
let dynamodb: DynamoDBClient;

async function mappingState(): Promise<string | undefined> {
  const out = await lambda.send(new GetEventSourceMappingCommand({ UUID: stack.outputs.MappingUuid }));
  return out.State;
}

/** The pipeline state in the stack's state item. */
function recordedState() {
  return stateIn(dynamodb, stack.outputs.LedgerTableName!);
}

beforeAll(async () => {
  standin = await startCaptchaStandin({ port: 0, threads: 5, apiKey: API_KEY });
  stack = await startCliStack({ captchaAiUrl: standin.url });
  lambda = new LambdaClient(stack.clientConfig);
  dynamodb = new DynamoDBClient(stack.clientConfig);
  const secret = await runCli(['secret', 'set'], { env: cliEnv(stack.moto), stdin: API_KEY });
  expect(secret.code).toBe(0);
});

afterEach(() => {
  standin.setKeyRevoked(false);
  standin.setPlanActive(true);
});

afterAll(async () => {
  await stack?.stop();
  await standin?.close();
});

describe('threadgate pause', () => {
  it('disables the mapping and records the reason in the state item', async () => {
    // Act
    const run = await runCli(['pause', '--reason', 'partner portal maintenance'], {
      env: cliEnv(stack.moto),
    });

    // Assess
    expect(run.code).toBe(0);
    expect(run.stdout).toContain('paused ThreadgateCliTest');
    expect(await mappingState()).toBe('Disabled');
    expect(await recordedState()).toMatchObject({
      paused: true,
      reason: 'partner portal maintenance',
      by: 'operator',
    });
  });

  it('says that a second pause replaces the first reason, and which one it was', async () => {
    // Prepare
    await runCli(['pause', '--reason', 'first reason'], { env: cliEnv(stack.moto) });

    // Act
    const run = await runCli(['pause', '--reason', 'second reason'], { env: cliEnv(stack.moto) });
    const json = await runCli(['pause', '--reason', 'third reason', '--json'], { env: cliEnv(stack.moto) });

    // Assess
    expect(run.code).toBe(0);
    expect(run.stdout).toMatch(
      /already paused; this reason replaces the earlier one: "first reason" \(by operator since \d{4}-/,
    );
    expect(JSON.parse(json.stdout)).toMatchObject({
      reason: 'third reason',
      replaced: { paused: true, reason: 'second reason', by: 'operator' },
    });
    expect(await recordedState()).toMatchObject({ reason: 'third reason' });
  });

  it('prints the recorded state as JSON with --json', async () => {
    // Act
    const run = await runCli(['pause', '--json'], { env: cliEnv(stack.moto) });

    // Assess
    expect(run.code).toBe(0);
    expect(JSON.parse(run.stdout)).toMatchObject({
      paused: true,
      reason: 'paused by operator',
      mapping: { uuid: stack.outputs.MappingUuid, state: 'Disabled' },
    });
  });
});

describe('threadgate resume', () => {
  it('enables the mapping and records the resume when CaptchaAI answers threadsinfo', async () => {
    // Prepare
    await runCli(['pause', '--reason', 'before resume'], { env: cliEnv(stack.moto) });

    // Act
    const run = await runCli(['resume', '--json'], { env: cliEnv(stack.moto) });

    // Assess
    expect(run.code).toBe(0);
    expect(JSON.parse(run.stdout)).toMatchObject({ paused: false, plan: { threads: 5 } });
    expect(await mappingState()).toBe('Enabled');
    expect(await recordedState()).toMatchObject({ paused: false, by: 'operator' });
  });

  it('refuses while threadsinfo answers stop-class (revoked key), leaving the pause in place', async () => {
    // Prepare
    await runCli(['pause', '--reason', 'CaptchaAI answered ERROR_KEY_DOES_NOT_EXIST'], {
      env: cliEnv(stack.moto),
    });
    standin.setKeyRevoked(true);

    // Act
    const run = await runCli(['resume'], { env: cliEnv(stack.moto) });

    // Assess
    expect(run.code).toBe(3);
    expect(run.stderr).toContain('not resuming');
    expect(run.stderr).toContain('ERROR_KEY_DOES_NOT_EXIST');
    expect(run.stderr).toContain('--force');
    expect(await mappingState()).toBe('Disabled');
    expect(await recordedState()).toMatchObject({ paused: true });
  });

  it('refuses while the plan reports no threads (no active plan)', async () => {
    // Prepare
    await runCli(['pause'], { env: cliEnv(stack.moto) });
    standin.setPlanActive(false);

    // Act
    const run = await runCli(['resume'], { env: cliEnv(stack.moto) });

    // Assess
    expect(run.code).toBe(3);
    expect(run.stderr).toContain('no active plan');
    expect(await mappingState()).toBe('Disabled');
  });

  it('resumes anyway with --force', async () => {
    // Prepare
    await runCli(['pause'], { env: cliEnv(stack.moto) });
    standin.setKeyRevoked(true);

    // Act
    const run = await runCli(['resume', '--force'], { env: cliEnv(stack.moto) });

    // Assess
    expect(run.code).toBe(0);
    expect(await mappingState()).toBe('Enabled');
    expect(await recordedState()).toMatchObject({ paused: false, reason: 'resumed by operator (forced)' });
  });

  it('leaves a running pipeline alone and says there is nothing to resume', async () => {
    // Prepare
    await runCli(['resume', '--force'], { env: cliEnv(stack.moto) });
    const before = await recordedState();

    // Act
    const run = await runCli(['resume'], { env: cliEnv(stack.moto) });

    // Assess
    expect(run.code).toBe(0);
    expect(run.stdout).toContain('is not paused');
    expect(await recordedState()).toEqual(before);
  });

  it('shows examples in --help', async () => {
    // Act
    const pause = await runCli(['pause', '--help'], { env: cliEnv(undefined) });
    const resume = await runCli(['resume', '--help'], { env: cliEnv(undefined) });

    // Assess
    expect(pause.stdout).toContain('$ threadgate pause --reason');
    expect(resume.stdout).toContain('$ threadgate resume --force');
  });

  it('never prints the API key', async () => {
    // Prepare: runs that read the key (on top of every earlier run of this file).
    await runCli(['pause', '--json'], { env: cliEnv(stack.moto) });
    await runCli(['resume', '--json'], { env: cliEnv(stack.moto) });
    await runCli(['pause'], { env: cliEnv(stack.moto) });
    await runCli(['resume'], { env: cliEnv(stack.moto) });

    // Assess: every CLI run of this file.
    for (const run of cliRuns) {
      expect(run.stdout).not.toContain(API_KEY);
      expect(run.stderr).not.toContain(API_KEY);
    }
  });
});
