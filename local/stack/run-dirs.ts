import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * Log folders of local runs (`.local-stack/runs/<time>-<random>`). A run leaves megabytes of
 * logs, so only the newest few are kept: THREADGATE_LOCAL_RUNS_KEPT (default 5) including the
 * new one. A folder whose run is still going (its `owner.pid` names a live process, e.g. a
 * second local stack or a test suite next to this one) is never removed.
 */
export const DEFAULT_RUNS_KEPT = 5;
const OWNER_FILE = 'owner.pid';

export function runsKept(env: NodeJS.ProcessEnv = process.env): number {
  const raw = env.THREADGATE_LOCAL_RUNS_KEPT;
  if (raw === undefined || raw === '') return DEFAULT_RUNS_KEPT;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 1) {
    throw new Error(`THREADGATE_LOCAL_RUNS_KEPT must be a whole number >= 1, got "${raw}"`);
  }
  return n;
}

function running(dir: string): boolean {
  const file = join(dir, OWNER_FILE);
  if (!existsSync(file)) return false;
  const pid = Number(readFileSync(file, 'utf8').trim());
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Removes the oldest finished run folders so that at most `keep` remain; returns the removed names. */
export function pruneRuns(runsDir: string, keep: number): string[] {
  if (!existsSync(runsDir)) return [];
  // Names start with an ISO time, so name order is age order.
  const names = readdirSync(runsDir, { withFileTypes: true })
    .filter((e) => e.isDirectory())
    .map((e) => e.name)
    .sort();
  const removed: string[] = [];
  for (const name of names.slice(0, Math.max(0, names.length - keep))) {
    const dir = join(runsDir, name);
    if (running(dir)) continue;
    rmSync(dir, { recursive: true, force: true });
    removed.push(name);
  }
  return removed;
}

/** Makes a new run folder owned by this process, after pruning to leave room for it. */
export function newRunDir(runsDir: string, keep = runsKept()): string {
  pruneRuns(runsDir, keep - 1);
  const stamp = new Date().toISOString().replace(/[:.]/g, '-');
  const dir = join(runsDir, `${stamp}-${randomBytes(3).toString('hex')}`);
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, OWNER_FILE), `${process.pid}\n`);
  return dir;
}
