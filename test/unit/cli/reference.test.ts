import { readFileSync } from 'node:fs';
import { dirname, join, normalize, relative } from 'node:path';
import { describe, expect, it } from 'vitest';
import { COMMAND_NAMES, DEVELOPMENT_COMMANDS } from '../../../cli/commands/index.js';
import { REFERENCE_PATH, renderCliReference } from '../../../cli/reference.js';
import { PACKAGE_ROOT } from '../../../infra/package-root.js';

/**
 * docs/cli-reference.md is the program's own help, and the installed package holds exactly the
 * commands that run without a checkout: a command that reaches local/ or bench/ (the local
 * stack, the benchmark) is a development command, left out of the tarball and said to be so.
 */
function reachesCheckoutOnlyCode(file: string, seen = new Set<string>()): string | undefined {
  if (seen.has(file)) return undefined;
  seen.add(file);
  const path = relative(PACKAGE_ROOT, file);
  if (path.startsWith('local/') || path.startsWith('bench/')) return path;
  const text = readFileSync(file, 'utf8');
  for (const m of text.matchAll(/(?:from|import\()\s*'(\.{1,2}\/[^']+)\.js'/g)) {
    const found = reachesCheckoutOnlyCode(normalize(join(dirname(file), `${m[1]}.ts`)), seen);
    if (found) return found;
  }
  return undefined;
}

describe('CLI reference and development commands', () => {
  it('docs/cli-reference.md is what `npm run docs:cli` renders from the code', async () => {
    // A command's --help changed: run `npm run docs:cli` and commit docs/cli-reference.md.
    expect(readFileSync(REFERENCE_PATH, 'utf8'), 'docs/cli-reference.md is stale: npm run docs:cli').toBe(
      await renderCliReference(),
    );
  }, 30_000);

  it.each(COMMAND_NAMES)('%s is a development command exactly when it needs local/ or bench/', (name) => {
    const reaches = reachesCheckoutOnlyCode(`${PACKAGE_ROOT}cli/commands/${name}.ts`);
    expect(Boolean(reaches), `${name} reaches ${reaches}`).toBe(
      (DEVELOPMENT_COMMANDS as readonly string[]).includes(name),
    );
  });

  it('leaves every development command out of the package', () => {
    const files: string[] = JSON.parse(readFileSync(`${PACKAGE_ROOT}package.json`, 'utf8')).files;
    for (const name of DEVELOPMENT_COMMANDS) expect(files).toContain(`!dist/cli/commands/${name}.*`);
    expect(files).toEqual(expect.arrayContaining(['!dist/local/', '!dist/bench/']));
  });
});
