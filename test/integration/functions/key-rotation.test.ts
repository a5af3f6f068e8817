import { randomBytes } from 'node:crypto';
import { CreateSecretCommand, PutSecretValueCommand } from '@aws-sdk/client-secrets-manager';
import { DeleteMessageCommand } from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { RotatingCaptchaAiClient } from '../../../functions/captchaai/rotating-client.js';
import { StopClassError } from '../../../functions/common/errors.js';
import { ApiKeySource } from '../../../functions/pipeline/secret.js';
import { processBatch } from '../../../functions/worker/batch-loop.js';
import { readWorkerConfig } from '../../../functions/worker/config.js';
import { createWorkerDeps } from '../../../functions/worker.js';
import type { MotoServer } from '../../../local/emulator/moto.js';
import {
  type CaptchaStandin,
  keyFingerprint,
  startCaptchaStandin,
} from '../../../local/standins/captchaai/standin.js';
import { startTargetStandin, type TargetStandin } from '../../../local/standins/target.js';
import {
  type AwsClients,
  clientsFor,
  createWorkerResources,
  mappingState,
  receiveAll,
  recordedState,
  recordState,
  sendJobs,
  sqsEvent,
  startMoto,
} from '../../fixtures/aws.js';
import { catalogResolver } from '../../fixtures/job-catalog.js';
import { captureOutput, type LogCapture } from '../../fixtures/log-capture.js';
import { TEST_TIME_SCALE } from '../../fixtures/solve.js';

/** A CaptchaAI-shaped key: 32 hex characters. */
const newApiKey = () => randomBytes(16).toString('hex');
const TASK = { type: 'recaptcha_v2', sitekey: 'site-key', pageurl: 'https://forms.example.com/a' } as const;

let moto: MotoServer;
let clients: AwsClients;
let captcha: CaptchaStandin;
let target: TargetStandin;
let logs: LogCapture;
let keyA: string;

beforeAll(async () => {
  logs = captureOutput();
  moto = await startMoto();
  clients = clientsFor(moto);
  keyA = newApiKey();
  captcha = await startCaptchaStandin({
    threads: 5,
    apiKey: keyA,
    timeScale: TEST_TIME_SCALE,
    latency: { recaptcha_v2: { minMs: 100, maxMs: 200 } },
  });
  target = await startTargetStandin({ captchaUrl: captcha.url });
});
afterAll(async () => {
  logs?.stop();
  await target?.close();
  await captcha?.close();
  await moto?.stop();
});
beforeEach(() => {
  // Every test starts with key A valid at the stand-in.
  captcha.setApiKey(keyA);
  captcha.resetStats();
});

async function newSecret(value: string): Promise<string> {
  const name = `threadgate/rotation-${randomBytes(4).toString('hex')}`;
  await clients.secrets.send(new CreateSecretCommand({ Name: name, SecretString: value }));
  return name;
}

const putSecret = (name: string, key: string) =>
  clients.secrets.send(
    new PutSecretValueCommand({ SecretId: name, SecretString: JSON.stringify({ apiKey: key }) }),
  );

const requestsWith = (key: string) => captcha.stats().requestsByKey[keyFingerprint(key)] ?? 0;

/** Counts GetSecretValue calls made through the shared client. */
function countSecretReads(): { count: () => number; stop: () => void } {
  let n = 0;
  const name = `count-reads-${randomBytes(3).toString('hex')}`;
  clients.secrets.middlewareStack.add(
    (next, context) => async (args) => {
      if (context.commandName === 'GetSecretValueCommand') n += 1;
      return next(args);
    },
    { step: 'initialize', name },
  );
  return { count: () => n, stop: () => clients.secrets.middlewareStack.remove(name) };
}

describe('ApiKeySource against moto Secrets Manager', () => {
  it('keeps a key for its max age, then reads the rotated one', async () => {
    // Prepare
    const name = await newSecret(keyA);
    let now = 1_000_000;
    const keys = new ApiKeySource({
      client: clients.secrets,
      secretName: name,
      maxAgeMs: 60_000,
      now: () => now,
    });
    expect(await keys.get()).toBe(keyA);
    const keyB = newApiKey();
    await putSecret(name, keyB);
    // Act + Assess: still the cached key just before the max age, the new one at it.
    now += 59_999;
    expect(await keys.get()).toBe(keyA);
    now += 1;
    expect(await keys.get()).toBe(keyB);
  });

  it('reads once for concurrent callers, and again after forget()', async () => {
    const name = await newSecret(JSON.stringify({ apiKey: keyA }));
    const keys = new ApiKeySource({ client: clients.secrets, secretName: name });
    const reads = countSecretReads();
    try {
      expect(await Promise.all([keys.get(), keys.get(), keys.get()])).toEqual([keyA, keyA, keyA]);
      expect(reads.count()).toBe(1);
      keys.forget();
      await keys.get();
      expect(reads.count()).toBe(2);
    } finally {
      reads.stop();
    }
  });

  it('does not keep a failed read: the next call reads again', async () => {
    const keys = new ApiKeySource({ client: clients.secrets, secretName: 'threadgate/does-not-exist' });
    await expect(keys.get()).rejects.toMatchObject({ name: 'ResourceNotFoundException' });
    await expect(keys.get()).rejects.toMatchObject({ name: 'ResourceNotFoundException' });
  });
});

describe('the CaptchaAI stand-in switches its valid key', () => {
  it('POST /control {"apiKey"} makes that key valid and the old one ERROR_KEY_DOES_NOT_EXIST', async () => {
    const keyB = newApiKey();
    const ask = async (key: string) =>
      (
        await fetch(`${captcha.url}/res.php`, {
          method: 'POST',
          body: new URLSearchParams({ key, action: 'threadsinfo', json: '1' }),
        })
      ).json();
    expect(await ask(keyA)).toMatchObject({ threads: '5' });
    const switched = await fetch(`${captcha.url}/control`, {
      method: 'POST',
      body: JSON.stringify({ apiKey: keyB }),
    });
    expect(switched.status).toBe(200);
    expect(await ask(keyA)).toEqual({ status: 0, request: 'ERROR_KEY_DOES_NOT_EXIST' });
    expect(await ask(keyB)).toMatchObject({ threads: '5' });
    expect(requestsWith(keyA)).toBe(2);
    expect(requestsWith(keyB)).toBe(1);
    // The stats name keys by fingerprint only.
    expect(JSON.stringify(captcha.stats())).not.toContain(keyA);
    const refused = await fetch(`${captcha.url}/control`, {
      method: 'POST',
      body: JSON.stringify({ apiKey: 'short' }),
    });
    expect(refused.status).toBe(400);
  });
});

describe('RotatingCaptchaAiClient over real HTTP', () => {
  async function rotating(secretValue = keyA) {
    const name = await newSecret(secretValue);
    const keys = new ApiKeySource({ client: clients.secrets, secretName: name });
    return {
      name,
      client: new RotatingCaptchaAiClient(keys, { baseUrl: captcha.url, timeScale: TEST_TIME_SCALE }),
    };
  }

  it('on a stop-class answer reads the secret again and solves once with the new key', async () => {
    // Prepare: the client has key A cached; the operator rotated to B at CaptchaAI and in the secret.
    const { name, client } = await rotating();
    await client.threadsInfo();
    const keyB = newApiKey();
    captcha.setApiKey(keyB);
    await putSecret(name, keyB);
    // Act
    const solved = await client.solve(TASK);
    // Assess: one in.php with A (refused), one with B (solved); the attempts count both.
    expect(solved.token).not.toBe('');
    expect(captcha.stats().submits).toBe(2);
    expect(solved.submits).toBe(2);
    expect(captcha.stats().errors.ERROR_KEY_DOES_NOT_EXIST).toBe(1);
  });

  it('asks beforeSubmit before the repeat with the new key: a batch cancelled meanwhile sends no in.php with it', async () => {
    // Prepare: as above; the caller's check passes before the first in.php and refuses the repeat.
    const { name, client } = await rotating();
    await client.threadsInfo();
    const keyB = newApiKey();
    captcha.setApiKey(keyB);
    await putSecret(name, keyB);
    const cancelled = new Error('the batch is cancelled');
    const asked: number[] = [];
    // Act
    const err = await client
      .solve(TASK, {
        beforeSubmit: async () => {
          asked.push(captcha.stats().submits);
          if (asked.length > 1) throw cancelled;
        },
      })
      .catch((e: unknown) => e);
    // Assess: one in.php (key A, refused), asked before it and before the repeat; none with key B.
    expect(err).toBe(cancelled);
    expect(asked).toEqual([0, 1]);
    expect(captcha.stats().submits).toBe(1);
    expect(requestsWith(keyB)).toBe(0);
  });

  it('keeps the stop-class error when the secret still holds the refused key', async () => {
    const { client } = await rotating();
    captcha.setKeyRevoked(true);
    await expect(client.solve(TASK)).rejects.toBeInstanceOf(StopClassError);
    expect(captcha.stats().submits).toBe(1);
  });

  it('does not submit a second task when the stop came while polling an existing one', async () => {
    // Prepare: the first poll comes 750 ms after the submit, so the key changes while the task exists.
    const { name, client } = await rotating();
    const keyB = newApiKey();
    const solving = client.solve(TASK);
    await vitestWait(() => captcha.stats().submits === 1);
    captcha.setApiKey(keyB);
    await putSecret(name, keyB);
    // Act + Assess: the old task may still hold a plan thread, so no replacement is submitted.
    await expect(solving).rejects.toMatchObject({ name: 'StopClassError', code: 'ERROR_KEY_DOES_NOT_EXIST' });
    expect(captcha.stats().submits).toBe(1);
  });

  it('after a change of the pipeline state sends no request with the key it had cached', async () => {
    const { name, client } = await rotating();
    client.noteState({ paused: true, since: '2026-12-01T10:00:00.000Z' });
    await client.threadsInfo();
    const keyB = newApiKey();
    captcha.setApiKey(keyB);
    await putSecret(name, keyB);
    captcha.resetStats();
    // Act: the operator resumed.
    client.noteState({ paused: false, since: '2026-12-01T10:05:00.000Z' });
    await client.threadsInfo();
    await client.solve(TASK);
    // Assess
    expect(requestsWith(keyA)).toBe(0);
    expect(requestsWith(keyB)).toBeGreaterThanOrEqual(3);
  });

  it('threadsinfo follows a rotated key too', async () => {
    const { name, client } = await rotating();
    await client.threadsInfo();
    const keyB = newApiKey();
    captcha.setApiKey(keyB);
    await putSecret(name, keyB);
    expect(await client.threadsInfo()).toMatchObject({ threads: 5 });
    expect(requestsWith(keyA)).toBe(2);
    expect(requestsWith(keyB)).toBe(1);
  });
});

describe('worker with a rotated key (moto + stand-ins)', () => {
  it('after pause, new key and resume: solves with the new key, never sends the old one, and does not pause again', async () => {
    // Prepare: one warm instance that solved with key A.
    const res = await createWorkerResources(moto, clients, {
      apiKey: keyA,
      captchaUrl: captcha.url,
      allowedHosts: '127.0.0.1',
    });
    const config = readWorkerConfig({
      ...res.env,
      TIME_SCALE: String(TEST_TIME_SCALE),
      COOLDOWN_MS: '0',
      TARGET_TIMEOUT_MS: '5000',
    });
    const deps = createWorkerDeps(config, clients, { resolver: catalogResolver });
    const job = (key: string) =>
      JSON.stringify({
        record_key: key,
        sitekey: target.sitekey,
        pageurl: `${target.url}/form/${key}`,
        submit_url: `${target.url}/form/${key}`,
      });
    const run = async () => {
      const batch = await receiveAll(clients.sqs, res.queueUrl, 1);
      const out = await processBatch(sqsEvent(batch, res.queueArn), deps);
      const failed = new Set(out.batchItemFailures.map((f) => f.itemIdentifier));
      for (const m of batch.filter((m) => !failed.has(m.MessageId!))) {
        await clients.sqs.send(
          new DeleteMessageCommand({ QueueUrl: res.queueUrl, ReceiptHandle: m.ReceiptHandle }),
        );
      }
    };
    await sendJobs(clients.sqs, res.queueUrl, [job(`rot-${randomBytes(3).toString('hex')}-1`)]);
    await run();
    expect(requestsWith(keyA)).toBeGreaterThan(0);
    // The key is revoked: the next record pauses the pipeline.
    const keyB = newApiKey();
    captcha.setApiKey(keyB);
    await sendJobs(clients.sqs, res.queueUrl, [job(`rot-${randomBytes(3).toString('hex')}-2`)]);
    await run();
    expect(await mappingState(clients.lambda, res.mappingUuid)).toBe('Disabled');
    // The operator stores key B and resumes (the state the CLI writes).
    await putSecret(res.secretName, keyB);
    await recordState(clients.ddb, res.ledgerTable, {
      paused: false,
      since: new Date().toISOString(),
      by: 'operator',
    });
    captcha.resetStats();
    // Act: the same warm instance takes the next record.
    const third = `rot-${randomBytes(3).toString('hex')}-3`;
    await sendJobs(clients.sqs, res.queueUrl, [job(third)]);
    await run();
    // Assess
    expect(requestsWith(keyA)).toBe(0);
    expect(captcha.stats().submits).toBe(1);
    expect((await recordedState(clients.ddb, res.ledgerTable)).paused).toBe(false);
    expect(logs.text()).not.toContain(keyA);
    expect(logs.text()).not.toContain(keyB);
  });
});

async function vitestWait(check: () => boolean, timeoutMs = 5_000): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > until) throw new Error('timed out');
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}
