import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MotoUnavailableError, startMoto } from '../../../../local/emulator/moto.js';

/**
 * Starting moto's launcher (local/emulator/moto.ts `startMoto`) with a python3 that logs each of
 * its runs: with moto installed, one Python process, the launcher; without it, the launcher says
 * so, one install attempt follows, and the error says what to run.
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
