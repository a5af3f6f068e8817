import { GetSecretValueCommand, SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type CliStack, cliEnv, cliRuns, runCli, SECRET_NAME, startCliStack } from './cli-fixture.js';

const FIRST_KEY = 'first-key-3e9d0c1a77b24f68a5d2';
const SECOND_KEY = 'second-key-81fb2c4d6e0a93b715c';
const ARGUMENT_KEY = 'argument-key-5a1c9e3f7b2d4068';

let stack: CliStack;
let secrets: SecretsManagerClient;

async function storedKey(name: string): Promise<string | undefined> {
  const out = await secrets.send(new GetSecretValueCommand({ SecretId: name }));
  return (JSON.parse(out.SecretString ?? '{}') as { apiKey?: string }).apiKey;
}

beforeAll(async () => {
  stack = await startCliStack();
  secrets = new SecretsManagerClient(stack.clientConfig);
});

afterAll(async () => {
  await stack?.stop();
});

describe('threadgate secret set', () => {
  it("creates the stack's secret from standard input", async () => {
    // Act
    const run = await runCli(['secret', 'set'], { env: cliEnv(stack.moto), stdin: `${FIRST_KEY}\n` });

    // Assess
    expect(run.code).toBe(0);
    expect(run.stdout).toContain(`created secret ${SECRET_NAME}`);
    expect(await storedKey(SECRET_NAME)).toBe(FIRST_KEY);
  });

  it('rotates an existing secret and says so in JSON with --json', async () => {
    // Act
    const run = await runCli(['secret', 'set', '--json'], {
      env: cliEnv(stack.moto),
      stdin: `  ${SECOND_KEY}  \r\n`,
    });

    // Assess
    expect(run.code).toBe(0);
    expect(JSON.parse(run.stdout)).toMatchObject({ secretName: SECRET_NAME, action: 'rotated' });
    expect(await storedKey(SECRET_NAME)).toBe(SECOND_KEY);
  });

  it('refuses a key given as an argument without repeating it, and stores nothing', async () => {
    // Act
    const run = await runCli(['secret', 'set', ARGUMENT_KEY], { env: cliEnv(stack.moto) });

    // Assess
    expect(run.code).toBe(2);
    expect(run.stderr).toContain('read from standard input only');
    expect(await storedKey(SECRET_NAME)).toBe(SECOND_KEY);
  });

  it('refuses empty standard input', async () => {
    // Act
    const run = await runCli(['secret', 'set'], { env: cliEnv(stack.moto), stdin: '\n\n' });

    // Assess
    expect(run.code).toBe(2);
    expect(run.stderr).toContain('no API key on standard input');
  });

  it('writes the default secret name when the stack is not deployed yet', async () => {
    // Act
    const run = await runCli(['secret', 'set', '--stack', 'NotDeployedYet'], {
      env: cliEnv(stack.moto),
      stdin: FIRST_KEY,
    });

    // Assess
    expect(run.code).toBe(0);
    expect(run.stdout).toContain('created secret threadgate/captchaai-api-key');
    expect(run.stdout).toContain('not deployed yet');
    expect(await storedKey('threadgate/captchaai-api-key')).toBe(FIRST_KEY);
  });

  it('writes the secret named by --secret-name', async () => {
    // Act
    const run = await runCli(['secret', 'set', '--secret-name', 'team-b/captchaai'], {
      env: cliEnv(stack.moto),
      stdin: SECOND_KEY,
    });

    // Assess
    expect(run.code).toBe(0);
    expect(await storedKey('team-b/captchaai')).toBe(SECOND_KEY);
  });

  it('shows an example in --help', async () => {
    // Act
    const run = await runCli(['secret', 'set', '--help'], { env: cliEnv(undefined) });

    // Assess
    expect(run.code).toBe(0);
    expect(run.stdout).toContain('$ threadgate secret set < captchaai-key.txt');
  });

  it('never echoes a key in any output', () => {
    // Assess: every run of this file, including the refused argument.
    expect(cliRuns.length).toBeGreaterThanOrEqual(7);
    for (const run of cliRuns) {
      for (const key of [FIRST_KEY, SECOND_KEY, ARGUMENT_KEY]) {
        expect(run.stdout).not.toContain(key);
        expect(run.stderr).not.toContain(key);
      }
    }
  });
});
