import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type CaptchaStandin,
  keyFingerprint,
  startCaptchaStandin,
} from '../../../local/standins/captchaai/standin.js';
import { runCli } from '../../fixtures/cli.js';

/**
 * `threadgate local --captchaai-url URL` (key from CAPTCHAAI_API_KEY) and `--mix`, as a user
 * runs them: the CLI as a child process against a second CaptchaAI stand-in
 * this test starts on another loopback port with its own key, over real HTTP. Deploys the
 * stack to moto: an integration suite.
 */

const KEY = randomBytes(16).toString('hex');

/** The environment without the caller's AWS/threadgate/CaptchaAI settings, plus `extra`. */
function cleanEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env))
    if (!k.startsWith('AWS_') && !k.startsWith('THREADGATE_') && !k.startsWith('CAPTCHAAI_')) env[k] = v;
  return { ...env, ...extra };
}

/** `threadgate local ARGS` as a child process, to its end. */
function runLocal(args: string[], env: NodeJS.ProcessEnv, timeoutMs = 240_000) {
  return runCli(['local', ...args], { env, timeoutMs });
}

describe('threadgate local --captchaai-url: the records go to the given server', () => {
  let server: CaptchaStandin;
  beforeAll(async () => {
    // Two threads and --reserve 0: the memory guard's plan (test/e2e/memory-guard.test.ts), so the
    // deploy reuses that synth. The default reserve (2) would leave a cap of 0: nothing solved.
    server = await startCaptchaStandin({ threads: 2, apiKey: KEY, timeScale: 0.01 });
  });
  afterAll(async () => {
    await server?.close();
  });

  it("solves every record at that server with its key, in the types of --mix, and rates efficiency from the worker's timings", async () => {
    // Act
    const run = await runLocal(
      [
        '--captchaai-url',
        server.url,
        '--time-scale',
        '0.01',
        '--reserve',
        '0',
        '--records',
        '12',
        '--mix',
        'turnstile=1,recaptcha_v3=2',
        '--json',
      ],
      cleanEnv({ CAPTCHAAI_API_KEY: KEY }),
    );

    // Assess: the run and its summary
    expect(run.code, run.stderr).toBe(0);
    const summary = JSON.parse(run.stdout);
    expect(summary).toMatchObject({
      records: 12,
      outcomes: { submitted: 12 },
      dlq: 0,
      complete: true,
      plan_threads: 2,
      cap: 2,
      captcha_submits: null,
      zero_balance: null,
      max_in_flight_source: 'worker_invocations',
      target_rejections: {},
    });
    expect(summary.max_in_flight).toBeLessThanOrEqual(2);
    expect(summary.efficiency).toMatchObject({ source: 'worker_timings', plan_threads: 2, solves: 12 });
    expect(summary.efficiency.value).toBeGreaterThan(0);
    expect(summary.efficiency.value).toBeLessThanOrEqual(1);
    expect(run.stderr).toContain(`asking ${server.url} for its plan (threadsinfo)`);
    // Assess: the server saw every task, by the mix's types, only with its key, never above the cap
    const stats = server.stats();
    expect(stats.submits).toBe(12);
    expect(stats.solved).toBe(12);
    expect(stats.submitsByType).toEqual({ turnstile: 4, recaptcha_v3: 8 });
    expect(Object.keys(stats.requestsByKey)).toEqual([keyFingerprint(KEY)]);
    expect(stats.maxInFlight).toBeLessThanOrEqual(2);
    expect(stats.zeroBalance).toBe(0);
    expect(run.stdout + run.stderr).not.toContain(KEY);
    // A whole `threadgate local` run (deploy included): 36 s with two test files at a time, past
    // vitest's 60 s default once with three.
  }, 180_000);
});

describe('threadgate local --captchaai-url: refused before anything starts', () => {
  it.each([
    [
      'no key in the environment',
      ['--captchaai-url', 'http://127.0.0.1:9'],
      {},
      /CAPTCHAAI_API_KEY: not set/,
    ],
    [
      'a host that is not loopback',
      ['--captchaai-url', 'https://ocr.captchaai.com'],
      { CAPTCHAAI_API_KEY: KEY },
      /not a loopback address.*--allow-remote-captchaai/,
    ],
    [
      'a remote host with generated records',
      ['--captchaai-url', 'https://ocr.captchaai.com', '--allow-remote-captchaai'],
      { CAPTCHAAI_API_KEY: KEY },
      /give --records FILE/,
    ],
    [
      'a remote host at a time scale below 1',
      ['--captchaai-url', 'https://ocr.captchaai.com', '--allow-remote-captchaai', '--time-scale', '0.1'],
      { CAPTCHAAI_API_KEY: KEY },
      /--time-scale must be 1 with a remote CaptchaAI server/,
    ],
    [
      '--threads beside a server that has its own plan',
      ['--captchaai-url', 'http://127.0.0.1:9', '--threads', '4'],
      { CAPTCHAAI_API_KEY: KEY },
      /threadsinfo gives it/,
    ],
    ['--allow-remote-captchaai alone', ['--allow-remote-captchaai'], {}, /only goes with --captchaai-url/],
    ['--mix with a records file', ['--records', 'package.json', '--mix', 'turnstile=1'], {}, /--mix chooses/],
    ['an unknown --mix type', ['--mix', 'hcaptcha=1'], {}, /unknown or unsupported CAPTCHA type "hcaptcha"/],
  ])('%s: a usage error that says why', async (_what, args, extra, message) => {
    const run = await runLocal(args, cleanEnv(extra), 30_000);
    expect(run.code).toBe(64);
    expect(run.stderr).toMatch(message);
    expect(run.stderr).not.toContain('deploying');
    expect(run.stderr).not.toContain(KEY);
  });
});
