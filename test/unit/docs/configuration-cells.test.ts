import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { PACKAGE_ROOT } from '../../../infra/package-root.js';

/** docs/configuration.md's tables stay one line a cell: the why lives in docs/design.md, linked. */
const MAX_CELL = 300;
const DOC = readFileSync(`${PACKAGE_ROOT}docs/configuration.md`, 'utf8');

/** Every cell of every table row, with its line number. */
function cells(): { line: number; cell: string }[] {
  return DOC.split('\n').flatMap((text, i) =>
    text.startsWith('|')
      ? text
          .split(/(?<!\\)\|/)
          .slice(1, -1)
          .map((cell) => ({ line: i + 1, cell: cell.trim() }))
      : [],
  );
}

describe('docs/configuration.md', () => {
  it('has tables to check', () => {
    expect(cells().length).toBeGreaterThan(100);
  });

  it(`has no table cell over ${MAX_CELL} characters`, () => {
    const long = cells()
      .filter(({ cell }) => [...cell].length > MAX_CELL)
      .map(({ line, cell }) => `line ${line}: ${[...cell].length} characters: ${cell.slice(0, 60)}…`);
    expect(long).toEqual([]);
  });
});
