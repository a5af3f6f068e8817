import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CreateQueueCommand, ListQueuesCommand, SQSClient } from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  MOTO_ZYGOTE_ENV,
  type MotoServer,
  MotoUnavailableError,
  type MotoZygote,
  startMoto,
  startMotoZygote,
} from '../../../../local/emulator/moto.js';

/**
 * Starting moto's launcher (local/emulator/moto.ts `startMoto`) with a python3 that logs each of
 * its runs: with moto installed, one Python process, the launcher; without it, the launcher says
 * so, one install attempt follows, and the error says what to run. With a zygote
 * (local/emulator/zygote.py), no Python process per server at all.
 */
let dir: string;

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'threadgate-launch-'));
});
afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

/** A python3 that appends its arguments to `log` and runs the real one with `flags` first. */
function loggingPython(name: string, flags: string): { python: string; runs: () => string[] } {
  const log = join(dir, `${name}.log`);
  writeFileSync(log, '');
  const python = join(dir, name);
  writeFileSync(python, `#!/bin/sh\necho "$*" >> '${log}'\nexec python3 ${flags} "$@"\n`);
  chmodSync(python, 0o755);
  return { python, runs: () => readFileSync(log, 'utf8').split('\n').filter(Boolean) };
}

describe('startMoto', () => {
  it('runs one Python process, the launcher, when moto is installed', async () => {
    // Prepare
    const { python, runs } = loggingPython('python-with-moto', '');
    // Act
    const moto = await startMoto({ python });
    const answer = await fetch(`${moto.endpoint}/moto-api/`);
    await moto.stop();
    // Assess
    expect(answer.status).toBe(200);
    expect(runs()).toHaveLength(1);
    expect(runs()[0]).toMatch(/moto_server\.py --port 0$/);
  });

  it('tries one install when python3 cannot import moto, and says what to run when that fails', async () => {
    // Prepare: -S leaves site-packages out, so neither moto nor pip can be imported.
    const { python, runs } = loggingPython('python-without-moto', '-S');
    // Act
    const started = startMoto({ python });
    // Assess
    await expect(started).rejects.toThrow(MotoUnavailableError);
    await expect(started).rejects.toThrow(
      /Install it yourself with: .* -m pip install 'moto\[server\]>=5,<6'/,
    );
    const kinds = runs().map((args) => (args.includes('moto_server.py') ? 'launcher' : args.split(' ')[0]));
    expect(kinds).toEqual(['launcher', '-c', '-m', '-c']);
  });
});

describe('startMoto with a zygote (MOTO_ZYGOTE_ENV)', () => {
  let zygote: MotoZygote;
  let runs: () => string[];
  const suiteZygote = process.env[MOTO_ZYGOTE_ENV];
  const servers: MotoServer[] = [];

  beforeAll(async () => {
    const logged = loggingPython('python-zygote', '');
    runs = logged.runs;
    zygote = await startMotoZygote(logged.python);
    process.env[MOTO_ZYGOTE_ENV] = zygote.socket;
  });
  afterAll(async () => {
    await Promise.all(servers.map((s) => s.stop()));
    if (suiteZygote === undefined) delete process.env[MOTO_ZYGOTE_ENV];
    else process.env[MOTO_ZYGOTE_ENV] = suiteZygote;
    await zygote?.stop();
  });

  const sqs = (moto: MotoServer) =>
    new SQSClient({
      endpoint: moto.endpoint,
      region: moto.awsEnv.AWS_REGION,
      credentials: { accessKeyId: 'testing', secretAccessKey: 'testing' },
    });

  it('forks servers that each keep their own state and hand out their own ids, with no Python process per server', async () => {
    // Act
    const [a, b] = await Promise.all([startMoto(), startMoto()]);
    servers.push(a as MotoServer, b as MotoServer);
    const created = await Promise.all(
      [a, b].map((m, i) => sqs(m as MotoServer).send(new CreateQueueCommand({ QueueName: `only-in-${i}` }))),
    );
    const listed = await Promise.all([a, b].map((m) => sqs(m as MotoServer).send(new ListQueuesCommand({}))));
    // Assess: one Python process (the zygote) for both; each server sees only its own queue.
    expect(runs()).toHaveLength(1);
    expect(runs()[0]).toMatch(/zygote\.py /);
    expect(a?.port).not.toBe(b?.port);
    expect(listed.map((l) => l.QueueUrls?.map((u) => u.split('/').pop()))).toEqual([
      ['only-in-0'],
      ['only-in-1'],
    ]);
    // moto's request ids come from its own generator, which each fork reseeds.
    expect(created[0]?.$metadata.requestId).not.toBe(created[1]?.$metadata.requestId);
  });

  it('stops a forked server, and a server whose zygote has gone keeps serving until it is stopped', async () => {
    // Prepare
    const moto = await startMoto();
    const kept = await startMoto();
    servers.push(kept);
    // Act
    await moto.stop();
    await zygote.stop();
    const stopped = await fetch(`${moto.endpoint}/moto-api/`).then(
      (r) => r.status,
      () => 'refused',
    );
    const still = await fetch(`${kept.endpoint}/moto-api/`);
    // Assess
    expect(stopped).toBe('refused');
    expect(still.status).toBe(200);
  });

  it('says how to go without the zygote when its socket does not answer', async () => {
    // Prepare: the zygote above has stopped and removed its socket.
    // Act
    const started = startMoto();
    // Assess
    await expect(started).rejects.toThrow(MotoUnavailableError);
    await expect(started).rejects.toThrow(
      new RegExp(`cannot reach the moto zygote .*unset ${MOTO_ZYGOTE_ENV}`),
    );
  });
});
