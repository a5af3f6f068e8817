import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, it, type TestContext } from 'vitest';
import {
  type CaptchaStandin,
  type StandinOptions,
  startCaptchaStandin,
} from '../../../local/standins/captchaai/standin.js';

/*
 * Runs the real CLI process (`node bin/threadgate.js solve …`) against a stand-in in this
 * process. The child is spawned asynchronously so the stand-in keeps answering meanwhile.
 * Process start-up dominates, so the tests run concurrently, each with its own stand-in.
 */

const BIN = fileURLToPath(new URL('../../../bin/threadgate.js', import.meta.url));
const KEY = 'c0ffeec0ffeec0ffeec0ffeec0ffee00';
const PAGE = 'https://staging.example.com/signup';
const SCALE = '0.01';
const TOKEN_PATTERN = /0\.[\w-]{100,}|03A[\w-]{100,}/;

/** A stand-in for one test, closed when the test ends; never-finishing tasks hold their thread for good. */
async function standin(ctx: TestContext, o: Partial<StandinOptions> = {}): Promise<CaptchaStandin> {
  const s = await startCaptchaStandin({
    threads: 2,
    apiKey: KEY,
    timeScale: Number(SCALE),
    abandonAfterMs: 1e9,
    ...o,
  });
  ctx.onTestFinished(() => s.close());
  return s;
}

/** Fills one plan thread with a task that never finishes, then clears faults and stats. */
async function occupyThread(s: CaptchaStandin): Promise<void> {
  s.setFaults({ neverFinish: 1 });
  await fetch(`${s.url}/in.php`, {
    method: 'POST',
    body: new URLSearchParams({
      key: KEY,
      method: 'turnstile',
      sitekey: 'x',
      pageurl: 'https://occupant.example/',
    }),
  });
  s.setFaults({ neverFinish: 0 });
  s.resetStats();
}

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

function threadgate(args: string[], env: Record<string, string | undefined>): Promise<Run> {
  return new Promise((resolve) => {
    const childEnv = { ...process.env, CAPTCHAAI_API_KEY: undefined, CAPTCHAAI_URL: undefined, ...env };
    execFile(process.execPath, [BIN, ...args], { env: childEnv, timeout: 90_000 }, (err, stdout, stderr) => {
      const code = err ? (typeof err.code === 'number' ? err.code : -1) : 0;
      resolve({ code, stdout, stderr });
    });
  });
}

const solveArgs = (extra: string[] = []) => [
  'solve',
  '--type',
  'turnstile',
  '--sitekey',
  'ts-site-key',
  '--pageurl',
  PAGE,
  '--time-scale',
  SCALE,
  ...extra,
];
/** 10 s per HTTP call at this scale: a loaded machine must not turn a plain answer into a timeout. */
const envFor = (s: CaptchaStandin, key = KEY) => ({
  CAPTCHAAI_API_KEY: key,
  CAPTCHAAI_URL: s.url,
  CAPTCHAAI_HTTP_TIMEOUT_MS: '1000000',
});

describe.concurrent('threadgate solve', { timeout: 120_000 }, () => {
  it('exits 0 when solved and prints outcome, token length and timing but not the token', async (ctx) => {
    const { expect } = ctx;
    // Prepare
    const s = await standin(ctx);

    // Act
    const run = await threadgate(solveArgs(), envFor(s));

    // Assess
    expect(run.code).toBe(0);
    expect(run.stdout).toMatch(/^solved turnstile in \d+\.\d s \(task \d+, 1 submit\), token length \d+\n$/);
    expect(run.stdout + run.stderr).not.toMatch(TOKEN_PATTERN);
  });

  it('prints a usable token only with --show-token, as JSON with --json', async (ctx) => {
    const { expect } = ctx;
    // Prepare: time scale 1 with an instant solve, so the token outlives a slow process exit.
    const s = await standin(ctx, { timeScale: 1, latency: { turnstile: { minMs: 0, maxMs: 0 } } });

    // Act
    const run = await threadgate(solveArgs(['--json', '--show-token']), envFor(s));

    // Assess
    expect(run.code).toBe(0);
    const report = JSON.parse(run.stdout) as {
      outcome: string;
      token: string;
      tokenLength: number;
      submits: number;
    };
    expect(report).toMatchObject({ outcome: 'solved', submits: 1, tokenLength: report.token.length });
    const verified = await fetch(`${s.url}/verify`, {
      method: 'POST',
      body: JSON.stringify({ token: report.token, sitekey: 'ts-site-key', pageurl: PAGE }),
    });
    expect(await verified.json()).toEqual({ success: true });
  });

  it('exits 2 for a bad task', async (ctx) => {
    const { expect } = ctx;
    // Prepare
    const s = await standin(ctx);

    // Act
    const run = await threadgate(
      ['solve', '--type', 'recaptcha_v2', '--sitekey', 'k', '--pageurl', 'not-a-url', '--json'],
      envFor(s),
    );

    // Assess
    expect(run.code).toBe(2);
    expect(JSON.parse(run.stdout)).toMatchObject({ outcome: 'bad_task', code: 'ERROR_PAGEURL', submits: 1 });
  });

  it('exits 2 for an unsolvable CAPTCHA after its one resubmission', async (ctx) => {
    const { expect } = ctx;
    // Prepare
    const s = await standin(ctx, { faults: { unsolvable: 1 } });

    // Act
    const run = await threadgate(solveArgs(['--json']), envFor(s));

    // Assess
    expect(run.code).toBe(2);
    expect(JSON.parse(run.stdout)).toMatchObject({ outcome: 'unsolvable', submits: 2 });
    expect(s.stats().submits).toBe(2);
  });

  it('exits 64 for a usage error without contacting CaptchaAI', async (ctx) => {
    const { expect } = ctx;
    // Prepare
    const s = await standin(ctx);

    // Act
    const [missingOption, missingKey] = await Promise.all([
      threadgate(['solve', '--type', 'turnstile', '--pageurl', PAGE], envFor(s)),
      threadgate(solveArgs(), { CAPTCHAAI_URL: s.url }),
    ]);

    // Assess
    expect(missingOption.code).toBe(64);
    expect(missingOption.stderr).toContain('--sitekey');
    expect(missingKey.code).toBe(64);
    expect(missingKey.stderr).toContain('CAPTCHAAI_API_KEY');
    expect(s.stats().submits).toBe(0);
  });

  it('exits 3 for a stop-class error (wrong key) after one request, without printing the key', async (ctx) => {
    const { expect } = ctx;
    // Prepare
    const s = await standin(ctx);
    const wrongKey = 'not-the-right-key';

    // Act
    const run = await threadgate(solveArgs(), envFor(s, wrongKey));

    // Assess
    expect(run.code).toBe(3);
    expect(run.stderr).toContain('ERROR_WRONG_USER_KEY');
    expect(run.stdout + run.stderr).not.toContain(wrongKey);
    expect(s.stats().submits).toBe(1);
  });

  it('exits 4 for a transient error (every plan thread busy) after two retries', async (ctx) => {
    const { expect } = ctx;
    // Prepare
    const s = await standin(ctx, { threads: 1 });
    await occupyThread(s);

    // Act
    const run = await threadgate(solveArgs(['--json']), envFor(s));

    // Assess
    expect(run.code).toBe(4);
    expect(JSON.parse(run.stdout)).toMatchObject({
      outcome: 'transient',
      code: 'ERROR_ZERO_BALANCE',
      submits: 3,
    });
  });

  it('exits 4 for a poll timeout and does not resubmit', async (ctx) => {
    const { expect } = ctx;
    // Prepare
    const s = await standin(ctx, { faults: { neverFinish: 1 } });

    // Act
    const run = await threadgate(solveArgs(['--json']), envFor(s));

    // Assess
    expect(run.code).toBe(4);
    expect(JSON.parse(run.stdout)).toMatchObject({
      outcome: 'poll_timeout',
      code: 'POLL_TIMEOUT',
      submits: 1,
    });
    expect(s.stats().submits).toBe(1);
  });

  it('--help shows an example and the exit codes', async (ctx) => {
    const { expect } = ctx;
    // Act
    const run = await threadgate(['solve', '--help'], {});

    // Assess
    expect(run.code).toBe(0);
    expect(run.stdout).toContain('Example:');
    expect(run.stdout).toContain('Exit codes: 0 solved; 2 bad task');
  });
});

describe.concurrent('threadgate threads', { timeout: 120_000 }, () => {
  it('prints plan threads, working threads and the cap after the reserve', async (ctx) => {
    const { expect } = ctx;
    // Prepare
    const s = await standin(ctx, { threads: 5 });
    await occupyThread(s);

    // Act
    const run = await threadgate(['threads', '--reserve', '2', '--json'], envFor(s));

    // Assess
    expect(run.code).toBe(0);
    expect(JSON.parse(run.stdout)).toEqual({ threads: 5, workingThreads: 1, reserve: 2, cap: 3 });
  });
});

describe.concurrent('threadgate standin', { timeout: 120_000 }, () => {
  it('prints its URL, serves the API with the given threads and key, and stops on SIGINT', async (ctx) => {
    const { expect } = ctx;
    // Prepare
    const child = execFile(process.execPath, [
      BIN,
      'standin',
      '--port',
      '0',
      '--threads',
      '3',
      '--key',
      KEY,
      '--time-scale',
      SCALE,
    ]);
    ctx.onTestFinished(() => {
      if (child.exitCode === null) child.kill('SIGKILL');
    });
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    const url = await new Promise<string>((resolve, reject) => {
      let out = '';
      child.stdout?.on('data', (chunk: Buffer) => {
        out += chunk.toString();
        const line = out.split('\n')[0];
        if (out.includes('\n') && line) resolve(line);
      });
      child.on('exit', () => reject(new Error(`standin exited early: ${out}`)));
    });

    // Act
    const info = await (
      await fetch(`${url}/res.php`, {
        method: 'POST',
        body: new URLSearchParams({ key: KEY, action: 'threadsinfo' }),
      })
    ).json();
    child.kill('SIGINT');
    const code = await exited;

    // Assess
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(info).toEqual({ threads: '3', working_threads: 0 });
    expect(code).toBe(0);
  });
});
