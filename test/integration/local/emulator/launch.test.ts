import { execFileSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
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
import { ensureMoto, motoPython, venvPython } from '../../../../local/emulator/python-env.js';

/**
 * Starting moto's launcher (local/emulator/moto.ts `startMoto`) with a python3 that logs each of
 * its runs: with moto installed, one Python process, the launcher; without it, the launcher says
 * so, a virtual environment of the project's own is made and given moto from the package index
 * (local/emulator/python-env.ts), and where no index has moto the error says what to run. With a zygote
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

/**
 * A package index (a find-links folder) holding one stub wheel named moto 5.0.0 with the modules
 * the launcher's probe imports (moto.moto_server.threaded_moto_server, flask): enough for pip to
 * install "moto[server]>=5,<6" into a virtual environment without reaching any real index.
 */
function stubMotoIndex(): string {
  const index = join(dir, 'index');
  execFileSync('python3', ['-c', STUB_WHEEL, join(index, 'moto-5.0.0-py3-none-any.whl')]);
  return index;
}
const STUB_WHEEL = `
import os, sys, zipfile
path = sys.argv[1]
os.makedirs(os.path.dirname(path), exist_ok=True)
files = {
  'moto/__init__.py': '', 'moto/moto_server/__init__.py': '', 'moto/moto_server/threaded_moto_server.py': '',
  'flask.py': '',
  'moto-5.0.0.dist-info/METADATA': 'Metadata-Version: 2.1\\nName: moto\\nVersion: 5.0.0\\nProvides-Extra: server\\n',
  'moto-5.0.0.dist-info/WHEEL': 'Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n',
}
with zipfile.ZipFile(path, 'w') as z:
  for name, text in files.items(): z.writestr(name, text)
  z.writestr('moto-5.0.0.dist-info/RECORD', ''.join(n + ',,\\n' for n in files) + 'moto-5.0.0.dist-info/RECORD,,\\n')
`;

/** Runs `body` with pip's index set to `findLinks` alone (none: an empty folder), as on a machine without moto's index. */
async function withIndex<T>(findLinks: string, body: () => Promise<T>): Promise<T> {
  const saved = { PIP_NO_INDEX: process.env.PIP_NO_INDEX, PIP_FIND_LINKS: process.env.PIP_FIND_LINKS };
  process.env.PIP_NO_INDEX = '1';
  process.env.PIP_FIND_LINKS = findLinks;
  try {
    return await body();
  } finally {
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  }
}

const kind = (args: string) =>
  args.includes('moto_server.py') ? 'launcher' : args.split(' ').slice(0, 2).join(' ');

describe('startMoto', () => {
  it('runs one Python process, the launcher, when python3 has moto (no virtual environment)', async () => {
    // Prepare
    const { python, runs } = loggingPython('python-with-moto', '');
    const venv = join(dir, 'venv-unused');
    // Act
    const moto = await startMoto({ pythonEnv: { base: python, venv } });
    const answer = await fetch(`${moto.endpoint}/moto-api/`);
    await moto.stop();
    // Assess
    expect(answer.status).toBe(200);
    expect(runs()).toHaveLength(1);
    expect(runs()[0]).toMatch(/moto_server\.py --port 0$/);
    expect(existsSync(venv)).toBe(false);
  });

  it('without moto in python3 and without an index that has it, makes the virtual environment and names the command to run', async () => {
    // Prepare: -S leaves site-packages out, so neither moto nor pip can be imported.
    const { python, runs } = loggingPython('python-without-moto', '-S');
    const venv = join(dir, 'venv-no-index');
    const empty = join(dir, 'empty-index');
    mkdirSync(empty);
    // Act
    const started = withIndex(empty, () => startMoto({ pythonEnv: { base: python, venv } }));
    // Assess
    await expect(started).rejects.toThrow(MotoUnavailableError);
    const message = await started.catch((err: Error) => err.message);
    expect(message).toContain(`run \`${venvPython(venv)} -m pip install 'moto[server]>=5,<6'\``);
    expect(message).toContain('or set THREADGATE_PYTHON to a python3');
    expect(runs().map(kind)).toEqual(['launcher', '-c import', `-m venv`]);
    expect(existsSync(venvPython(venv))).toBe(true);
  });

  it('with THREADGATE_PYTHON lacking moto, installs nothing and names the command for that Python', async () => {
    // Prepare
    const { python, runs } = loggingPython('python-fixed-without-moto', '-S');
    // Act
    const started = startMoto({ python });
    // Assess
    await expect(started).rejects.toThrow(
      `THREADGATE_PYTHON=${python} cannot import moto's server: run \`${python} -m pip install 'moto[server]>=5,<6'\``,
    );
    expect(runs().map(kind)).toEqual(['launcher', '-c import']);
  });
});

describe('ensureMoto', () => {
  it('installs moto[server] 5.x into the project virtual environment from an index that has it, and uses it from then on', async () => {
    // Prepare
    const { python, runs } = loggingPython('python-base', '-S');
    const venv = join(dir, 'venv-installed');
    // Act
    const found = await withIndex(stubMotoIndex(), async () => ensureMoto({ base: python, venv }));
    // Assess
    expect(found).toBe(venvPython(venv));
    expect(motoPython({ base: python, venv })).toBe(venvPython(venv));
    expect(runs().map(kind)).toEqual(['-c import', '-m venv']);
    const installed = execFileSync(venvPython(venv), ['-m', 'pip', 'show', 'moto'], { encoding: 'utf8' });
    expect(installed).toMatch(/^Version: 5\.0\.0$/m);
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
