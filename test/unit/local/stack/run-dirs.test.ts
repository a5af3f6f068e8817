import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { newRunDir, pruneRuns, runsKept } from '../../../../local/stack/run-dirs.js';

let root: string | undefined;
afterEach(() => {
  if (root) rmSync(root, { recursive: true, force: true });
});

/** A finished run folder: its owner pid is a process that has exited. */
function finishedRun(runs: string, name: string): void {
  const deadPid = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], {
    encoding: 'utf8',
  }).stdout;
  mkdirSync(join(runs, name), { recursive: true });
  writeFileSync(join(runs, name, 'owner.pid'), deadPid);
  writeFileSync(join(runs, name, 'worker.log'), 'x'.repeat(1000));
}

describe('local run folders', () => {
  it('keeps the newest runs, the new one included, and removes the oldest', () => {
    // Prepare
    root = mkdtempSync(join(tmpdir(), 'tg-runs-'));
    for (const t of ['01', '02', '03', '04']) finishedRun(root, `2026-12-01T08-${t}-00-000Z-aaaaaa`);

    // Act
    const dir = newRunDir(root, 3);

    // Assess
    expect(readdirSync(root).sort()).toEqual(
      ['2026-12-01T08-03-00-000Z-aaaaaa', '2026-12-01T08-04-00-000Z-aaaaaa', dir.split('/').pop()].sort(),
    );
  });

  it('never removes the folder of a run that is still going', () => {
    // Prepare: the oldest belongs to this (live) process.
    root = mkdtempSync(join(tmpdir(), 'tg-runs-'));
    mkdirSync(join(root, '2026-01-01T00-00-00-000Z-live00'));
    writeFileSync(join(root, '2026-01-01T00-00-00-000Z-live00', 'owner.pid'), String(process.pid));
    finishedRun(root, '2026-12-01T08-01-00-000Z-bbbbbb');

    // Act
    const removed = pruneRuns(root, 0);

    // Assess
    expect(removed).toEqual(['2026-12-01T08-01-00-000Z-bbbbbb']);
    expect(readdirSync(root)).toEqual(['2026-01-01T00-00-00-000Z-live00']);
  });

  it('reads THREADGATE_LOCAL_RUNS_KEPT, default 5, and names the variable when it is wrong', () => {
    expect(runsKept({})).toBe(5);
    expect(runsKept({ THREADGATE_LOCAL_RUNS_KEPT: '2' })).toBe(2);
    expect(() => runsKept({ THREADGATE_LOCAL_RUNS_KEPT: '0' })).toThrow(/THREADGATE_LOCAL_RUNS_KEPT must be/);
  });
});
