import { existsSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import type { BenchReport } from '../../../bench/report/types.js';
import { PACKAGE_ROOT } from '../../../infra/package-root.js';

/**
 * docs/benchmark.md is the user's page (what it costs, how to size it, how to reproduce each
 * figure), short; the lab notes are docs/benchmark-notes.md. Each command of its reproduce table
 * names a report whose settings it repeats.
 */
const read = (path: string) => readFileSync(`${PACKAGE_ROOT}${path}`, 'utf8');
const PAGE = read('docs/benchmark.md');

/** `npx threadgate bench …` commands of the reproduce table, each with the flags it sets. */
function commands(): { name: string; flags: Map<string, string> }[] {
  const table = PAGE.slice(PAGE.indexOf('## How to reproduce each figure'));
  return [...table.matchAll(/`(?:[A-Z_]+=\S+ )*npx threadgate bench ([^`]*--name ([\w.-]+))`/g)].map((m) => {
    const flags = new Map<string, string>();
    for (const f of (m[1] as string).matchAll(/--([\w-]+)(?: ([^-\s]\S*))?/g))
      flags.set(f[1] as string, f[2] ?? '');
    return { name: m[2] as string, flags };
  });
}

describe('docs/benchmark.md', () => {
  it('is under 200 lines, and links the sizing table instead of copying it', () => {
    expect(PAGE.split('\n').length).toBeLessThan(200);
    expect(PAGE).toContain('(deploying.md#choosing-lanes-and-sizing)');
    expect(PAGE).not.toContain('| plan threads | `lanes` |');
  });

  it("reproduces each run with its report's threads, records, time scale and lanes", () => {
    const listed = commands();
    expect(listed.length).toBeGreaterThanOrEqual(5);
    for (const { name, flags } of listed) {
      const path = `bench/results/${name}.json`;
      expect(existsSync(`${PACKAGE_ROOT}${path}`), path).toBe(true);
      const c = (JSON.parse(read(path)) as BenchReport).config;
      expect(
        {
          threads: Number(flags.get('threads')),
          records: Number(flags.get('records')),
          timeScale: Number(flags.get('time-scale')),
          lanes: Number(flags.get('lanes') ?? 1),
        },
        name,
      ).toEqual({
        threads: c.threads,
        records: c.records,
        timeScale: c.time_scale,
        lanes: c.lanes?.setting ?? 1,
      });
    }
  });
});
