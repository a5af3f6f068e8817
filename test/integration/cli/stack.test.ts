import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CloudFormationClient, DescribeStacksCommand } from '@aws-sdk/client-cloudformation';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type MotoServer, startMoto } from '../../../local/emulator/moto.js';
import { cliEnv, clientConfigFor, createStack, runCli, STACK_NAME } from '../../fixtures/cli.js';

let moto: MotoServer;

/** A loopback port nothing listens on: bind an ephemeral one, then close it. */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  if (address === null || typeof address === 'string') throw new Error('no port');
  return address.port;
}

/** Creates the test stack unless it is there already. */
async function ensureStack(): Promise<void> {
  const cfn = new CloudFormationClient(clientConfigFor(moto));
  const exists = await cfn.send(new DescribeStacksCommand({ StackName: STACK_NAME })).then(
    () => true,
    () => false,
  );
  if (!exists) await createStack(moto);
}

beforeAll(async () => {
  moto = await startMoto();
});

afterAll(async () => {
  await moto?.stop();
});

describe('finding the stack', () => {
  it('says how to deploy when no stack is there at all', async () => {
    // Prepare: an empty emulator.
    await fetch(`${moto.endpoint}/moto-api/reset`, { method: 'POST' });

    // Act
    const run = await runCli(['status'], { env: cliEnv(moto) });

    // Assess
    expect(run.code).toBe(1);
    expect(run.stderr).toContain(`no stack named "${STACK_NAME}" at ${moto.endpoint} (AWS_ENDPOINT_URL)`);
    expect(run.stderr).toContain('npx cdk deploy');
    expect(run.stderr).toContain('--stack NAME');
  });

  it('names the threadgate stacks that are there when --stack names another', async () => {
    // Prepare
    await ensureStack();

    // Act
    const run = await runCli(['outcomes', '--stack', 'Elsewhere'], { env: cliEnv(moto) });

    // Assess
    expect(run.code).toBe(1);
    expect(run.stderr).toContain('no stack named "Elsewhere"');
    expect(run.stderr).toContain(`Threadgate stacks found there: ${STACK_NAME}`);
  });

  it('takes the endpoint from --endpoint-url and the stack from --stack', async () => {
    // Prepare
    await ensureStack();
    const env = cliEnv(moto);
    delete env.AWS_ENDPOINT_URL;
    delete env.THREADGATE_STACK;

    // Act
    const run = await runCli(
      ['status', '--json', '--no-outcomes', '--endpoint-url', moto.endpoint, '--stack', STACK_NAME],
      { env },
    );

    // Assess
    expect(run.code).toBe(0);
    expect(JSON.parse(run.stdout).stack).toBe(STACK_NAME);
  });
});

describe('the SDK resolves the endpoint', () => {
  /** A shared config file with one profile that points at the emulator, and its credentials. */
  function profileFiles(profile: string, endpoint: string): { config: string; credentials: string } {
    const dir = mkdtempSync(join(tmpdir(), 'threadgate-profile-'));
    const config = join(dir, 'config');
    const credentials = join(dir, 'credentials');
    writeFileSync(
      config,
      `[profile ${profile}]\nregion = ${moto.awsEnv.AWS_REGION}\nendpoint_url = ${endpoint}\n`,
    );
    writeFileSync(
      credentials,
      `[${profile}]\naws_access_key_id = ${moto.awsEnv.AWS_ACCESS_KEY_ID}\naws_secret_access_key = ${moto.awsEnv.AWS_SECRET_ACCESS_KEY}\n`,
    );
    return { config, credentials };
  }

  /** The environment of a shell with nothing but the shared config files set. */
  function profileOnlyEnv(files: { config: string; credentials: string }): NodeJS.ProcessEnv {
    const env = cliEnv(moto, {
      AWS_CONFIG_FILE: files.config,
      AWS_SHARED_CREDENTIALS_FILE: files.credentials,
    });
    for (const name of [
      'AWS_ENDPOINT_URL',
      'AWS_REGION',
      'AWS_DEFAULT_REGION',
      'AWS_ACCESS_KEY_ID',
      'AWS_SECRET_ACCESS_KEY',
    ]) {
      delete env[name];
    }
    return env;
  }

  it('uses the endpoint_url, region and credentials of the profile named by --profile', async () => {
    // Prepare
    await ensureStack();
    const env = profileOnlyEnv(profileFiles('tg-emulator', moto.endpoint));

    // Act: the global option before the command, and after it.
    const before = await runCli(['--profile', 'tg-emulator', 'status', '--json', '--no-outcomes'], { env });
    const after = await runCli(['status', '--json', '--no-outcomes', '--profile', 'tg-emulator'], { env });

    // Assess
    expect(before.stderr).toBe('');
    expect(before.code).toBe(0);
    expect(JSON.parse(before.stdout).stack).toBe(STACK_NAME);
    expect(after.code).toBe(0);
    expect(JSON.parse(after.stdout).stack).toBe(STACK_NAME);
  });

  it('uses the endpoint_url of AWS_PROFILE and names it when it cannot reach it', async () => {
    // Prepare
    const endpoint = `http://localhost:${await closedPort()}`;
    const env = { ...profileOnlyEnv(profileFiles('tg-closed', endpoint)), AWS_PROFILE: 'tg-closed' };

    // Act
    const run = await runCli(['pause'], { env });

    // Assess
    expect(run.code).toBe(4);
    expect(run.stderr).toContain(
      `cannot reach the AWS endpoint ${endpoint} (from endpoint_url of AWS profile "tg-closed")`,
    );
  });
});

describe('AWS errors that say what to do next', () => {
  it('names the endpoint it cannot reach', async () => {
    // Prepare
    const endpoint = `http://localhost:${await closedPort()}`;

    // Act
    const run = await runCli(['pause'], { env: cliEnv(moto, { AWS_ENDPOINT_URL: endpoint }) });

    // Assess
    expect(run.code).toBe(4);
    expect(run.stderr).toContain(`cannot reach the AWS endpoint ${endpoint} (from AWS_ENDPOINT_URL)`);
    expect(run.stderr).toContain('npm run local');
  });

  it('says how to provide credentials when there are none', async () => {
    // Prepare: no keys, no profile files, no instance metadata.
    const env = cliEnv(moto, {
      AWS_CONFIG_FILE: '/nonexistent/threadgate/config',
      AWS_SHARED_CREDENTIALS_FILE: '/nonexistent/threadgate/credentials',
      AWS_EC2_METADATA_DISABLED: 'true',
    });
    delete env.AWS_ACCESS_KEY_ID;
    delete env.AWS_SECRET_ACCESS_KEY;

    // Act
    const run = await runCli(['status'], { env });

    // Assess
    expect(run.code).toBe(1);
    expect(run.stderr).toContain('no AWS credentials found');
    expect(run.stderr).toContain('AWS_ACCESS_KEY_ID');
  });

  it('asks for a region when none is set', async () => {
    // Prepare
    const env = cliEnv(moto, { AWS_CONFIG_FILE: '/nonexistent/threadgate/config' });
    delete env.AWS_REGION;
    delete env.AWS_DEFAULT_REGION;

    // Act
    const run = await runCli(['redrive'], { env });

    // Assess
    expect(run.code).toBe(64);
    expect(run.stderr).toContain('no AWS region: set AWS_REGION');
  });
});
