import { readdirSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { PACKAGE_ROOT } from '../../../infra/package-root.js';
import { deploymentCounts } from '../../../infra/reference.js';

/**
 * Every count of functions, alarms or outcome statuses a page states is the count of a default
 * deployment (docs/construct.md gives them, generated): a function, an alarm or a status added
 * or removed without the prose fails here.
 */
const WORDS = ['zero', 'one', 'two', 'three', 'four', 'five', 'six', 'seven', 'eight', 'nine', 'ten'];
const COUNTED =
  /\b(zero|one|two|three|four|five|six|seven|eight|nine|ten|\d+) (?:Lambda )?(functions|handlers|alarms|(?:outcome )?statuses)\b/gi;

/**
 * A bill rendered from a bench report (docs/benchmark.md's `<!-- bill: … -->` block) counts the
 * alarms of the template that run deployed: test/unit/bench/bill-markdown.test.ts keeps it that
 * report's, and the next bench run counts today's.
 */
function withoutRecordedBills(text: string): string {
  return text.replace(/<!-- bill: bench\/results\/[\w.-]+\.json -->[\s\S]*?<!-- bill: end -->/g, '');
}

function pages(): string[] {
  const folders = readdirSync(PACKAGE_ROOT, { withFileTypes: true })
    .filter((e) => e.isDirectory() && !['node_modules', 'dist', 'cdk.out', '.git'].includes(e.name))
    .map((e) => `${e.name}/README.md`);
  const docs = readdirSync(`${PACKAGE_ROOT}docs`)
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`);
  return ['README.md', ...docs, ...folders].filter((p) => {
    try {
      readFileSync(`${PACKAGE_ROOT}${p}`);
      return true;
    } catch {
      return false;
    }
  });
}

describe('counts the pages state', () => {
  const counts = deploymentCounts();
  const stated = pages().flatMap((page) =>
    [...withoutRecordedBills(readFileSync(`${PACKAGE_ROOT}${page}`, 'utf8')).matchAll(COUNTED)].map((m) => {
      const word = (m[1] as string).toLowerCase();
      const n = WORDS.includes(word) ? WORDS.indexOf(word) : Number(word);
      const what = (m[2] as string).toLowerCase();
      const kind = what.endsWith('statuses') ? 'statuses' : what === 'alarms' ? 'alarms' : 'functions';
      return { page, text: m[0], n, kind } as const;
    }),
  );

  it('finds the counts it checks (the pattern still matches the prose)', () => {
    expect(new Set(stated.map((s) => s.kind))).toEqual(new Set(['functions', 'alarms', 'statuses']));
  });

  it.each(stated)('$page: "$text" is the count of a default deployment', ({ n, kind }) => {
    expect(n).toBe(counts[kind]);
  });
});
