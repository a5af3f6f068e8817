import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { checkLayout, MAX_FUNCTION_LINES } from '../../../scripts/check-layout.js';

const REPO = fileURLToPath(new URL('../../..', import.meta.url));
const roots: string[] = [];
afterEach(() => {
  for (const root of roots.splice(0)) rmSync(root, { recursive: true, force: true });
});

/** A temporary tree of the given files (path → content). */
function tree(files: Record<string, string>): string {
  const root = mkdtempSync(join(tmpdir(), 'layout-'));
  roots.push(root);
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(dirname(join(root, path)), { recursive: true });
    writeFileSync(join(root, path), text);
  }
  return root;
}

/** A function of exactly `lines` lines. */
function fn(name: string, lines: number): string {
  return [
    `export function ${name}(): number {`,
    ...Array.from({ length: lines - 3 }, () => '  1;'),
    '  return 1;',
    '}',
    '',
  ].join('\n');
}

describe('check-layout', () => {
  it('passes a tree within the rules and reports its longest function', () => {
    const root = tree({ 'src/a.ts': fn('short', 10), 'src/b.ts': fn('exact', MAX_FUNCTION_LINES) });
    const report = checkLayout(root);
    expect(report.failures).toEqual([]);
    expect(report.functions[0]).toMatchObject({ name: 'exact', lines: MAX_FUNCTION_LINES, file: 'src/b.ts' });
  });

  it('fails on a function over 100 lines, a file over 500 lines, 13 files in a folder and a prefix triple', () => {
    const many = Object.fromEntries(
      Array.from({ length: 13 }, (_, i) => [`crowded/f${i}.ts`, 'export {};\n']),
    );
    const root = tree({
      'src/long.ts': fn('tooLong', MAX_FUNCTION_LINES + 1),
      'src/big.py': 'x = 1\n'.repeat(501),
      'stack/local-stack.ts': 'export {};\n',
      'stack/local-stack-run.ts': 'export {};\n',
      'stack/local-records.ts': 'export {};\n',
      ...many,
    });
    const failures = checkLayout(root).failures;
    expect(failures).toContainEqual(expect.stringMatching(/^src\/long\.ts:1 tooLong has 101 lines/));
    expect(failures).toContainEqual(expect.stringMatching(/^src\/big\.py has 501 lines/));
    expect(failures).toContainEqual(expect.stringMatching(/^crowded\/ holds 13 source files/));
    expect(failures).toContainEqual(expect.stringMatching(/^stack\/ has 3 files named "local-…"/));
    expect(failures).toHaveLength(4);
  });

  it('leaves test/, node_modules and cli/commands/ crowding alone, and tolerates a pending breach no larger than listed', () => {
    const commands = Object.fromEntries(
      Array.from({ length: 13 }, (_, i) => [`cli/commands/c${i}.ts`, 'export {};\n']),
    );
    const root = tree({
      'test/unit/x.test.ts': fn('longTest', 300),
      'node_modules/dep/index.js': fn('longDep', 300),
      'src/old.ts': fn('legacy', 120),
      'src/grown.ts': fn('grown', 130),
      ...commands,
    });
    const pending = [
      { file: 'src/old.ts', name: 'legacy', lines: 120 },
      { file: 'src/grown.ts', name: 'grown', lines: 120 },
    ];
    const report = checkLayout(root, pending);
    expect(report.failures).toEqual([expect.stringMatching(/^src\/grown\.ts:1 grown has 130 lines/)]);
    expect(report.tolerated).toEqual(['src/old.ts legacy (120 lines)']);
  });

  it("fails `biome lint` with the project's settings on an import circle of type-only imports", () => {
    const { $schema: _schema, ...config } = JSON.parse(readFileSync(join(REPO, 'biome.json'), 'utf8'));
    const files = {
      'biome.json': JSON.stringify(config),
      'a.ts': "import type { B } from './b.js';\nexport interface A {\n  b?: B;\n}\n",
      'b.ts': "import type { A } from './a.js';\nexport interface B {\n  a?: A;\n}\n",
    };
    const lint = (root: string) =>
      spawnSync(join(REPO, 'node_modules', '.bin', 'biome'), ['lint', '.'], { cwd: root, encoding: 'utf8' });
    const circle = lint(tree(files));
    expect(circle.status).not.toBe(0);
    expect(`${circle.stdout}${circle.stderr}`).toContain('noImportCycles');
    const oneWay = lint(tree({ ...files, 'b.ts': 'export interface B {\n  n?: number;\n}\n' }));
    expect(oneWay.status).toBe(0);
  });
});
