import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { GetSecretValueCommand, SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addAwsFaults } from '../../../local/emulator/fault-client.js';
import { type CliStack, cliEnv, cliRuns, runCli, SECRET_NAME, startCliStack } from '../../fixtures/cli.js';

const FIRST_KEY = 'first-key-3e9d0c1a77b24f68a5d2';
const SECOND_KEY = 'second-key-81fb2c4d6e0a93b715c';
const ARGUMENT_KEY = 'argument-key-5a1c9e3f7b2d4068';
const TYPED_KEY = 'typed-key-c4e8a2f60d1b9375e7';

/**
 * Runs the CLI on a pseudo-terminal (python3's pty module; python3 is already needed for
 * moto), types the key read from this driver's stdin once the prompt shows, and prints
 * everything the terminal displayed.
 */
const PTY_DRIVER = `
import os, pty, select, sys, time
key = sys.stdin.readline().strip()
pid, fd = pty.fork()
if pid == 0:
    os.execvp(sys.argv[1], sys.argv[1:])
out, typed, deadline = b"", False, time.time() + 50
while time.time() < deadline:
    ready, _, _ = select.select([fd], [], [], 0.5)
    if fd not in ready:
        continue
    try:
        chunk = os.read(fd, 4096)
    except OSError:
        break
    if not chunk:
        break
    out += chunk
    if not typed and b"input hidden" in out:
        os.write(fd, key.encode() + b"\\r")
        typed = True
_, status = os.waitpid(pid, 0)
sys.stdout.buffer.write(out)
sys.exit(os.waitstatus_to_exitcode(status))
`;

function runOnTerminal(
  args: string[],
  env: NodeJS.ProcessEnv,
  typed: string,
): Promise<{ code: number | null; screen: string }> {
  const bin = fileURLToPath(new URL('../../../bin/threadgate.js', import.meta.url));
  return new Promise((resolve, reject) => {
    const child = spawn('python3', ['-c', PTY_DRIVER, process.execPath, bin, ...args], { env });
    let screen = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      screen += chunk;
    });
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, screen }));
    child.stdin.end(`${typed}\n`);
  });
}

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
    // Prepare
    await runCli(['secret', 'set'], { env: cliEnv(stack.moto), stdin: FIRST_KEY });

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

  it('names the refused action when AWS denies the rotation (AccessDenied answered on the wire)', async () => {
    // Prepare: the secret exists, and the emulator refuses the next PutSecretValue as IAM would,
    // with a message that does not name the action (as SQS's and Lambda's do not).
    await runCli(['secret', 'set'], { env: cliEnv(stack.moto), stdin: FIRST_KEY });
    await addAwsFaults(stack.moto.endpoint, [
      {
        service: 'secretsmanager',
        operation: 'PutSecretValue',
        error: 'AccessDeniedException',
        message: 'Access denied',
      },
    ]);

    // Act
    const run = await runCli(['secret', 'set'], { env: cliEnv(stack.moto), stdin: SECOND_KEY });

    // Assess
    expect(run.code).toBe(1);
    expect(run.stderr).toContain(
      'AWS refused secretsmanager:PutSecretValue (AccessDeniedException: Access denied)',
    );
    expect(run.stderr).toContain('grantOperate(role) covers every operator command');
    expect(await storedKey(SECRET_NAME)).toBe(FIRST_KEY);
  });

  it('refuses a key given as an argument without repeating it, and stores nothing', async () => {
    // Prepare
    await runCli(['secret', 'set'], { env: cliEnv(stack.moto), stdin: FIRST_KEY });

    // Act
    const run = await runCli(['secret', 'set', ARGUMENT_KEY], { env: cliEnv(stack.moto) });

    // Assess
    expect(run.code).toBe(64);
    expect(run.stderr).toContain('read from standard input only');
    expect(await storedKey(SECRET_NAME)).toBe(FIRST_KEY);
  });

  it('refuses empty standard input', async () => {
    // Act
    const run = await runCli(['secret', 'set'], { env: cliEnv(stack.moto), stdin: '\n\n' });

    // Assess
    expect(run.code).toBe(64);
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

  it('prompts on a terminal and does not echo the typed key', async () => {
    // Act
    const run = await runOnTerminal(['secret', 'set'], cliEnv(stack.moto), TYPED_KEY);

    // Assess
    expect(run.code).toBe(0);
    expect(run.screen).toContain('CaptchaAI API key (input hidden):');
    expect(run.screen).toMatch(new RegExp(`(created|rotated) secret ${SECRET_NAME}`));
    expect(run.screen).not.toContain(TYPED_KEY);
    expect(await storedKey(SECRET_NAME)).toBe(TYPED_KEY);
  });

  it('never echoes a key in any output', () => {
    // Assess: every run of this file, including the refused argument.
    expect(cliRuns.length).toBeGreaterThanOrEqual(7);
    for (const run of cliRuns) {
      for (const key of [FIRST_KEY, SECOND_KEY, ARGUMENT_KEY, TYPED_KEY]) {
        expect(run.stdout).not.toContain(key);
        expect(run.stderr).not.toContain(key);
      }
    }
  });
});
