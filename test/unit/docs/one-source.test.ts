import { readdirSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { PACKAGE_ROOT } from '../../../infra/package-root.js';

/**
 * A fact is written once and linked elsewhere: the order in which threadgate looks for the
 * Python that runs moto is docs/local-stack.md's "Python" section; every other page that names
 * the Python links there instead of restating it.
 */
const PAGES = [
  'README.md',
  ...readdirSync(`${PACKAGE_ROOT}docs`).flatMap((f) => (f.endsWith('.md') ? [`docs/${f}`] : [])),
];
const read = (path: string) => readFileSync(`${PACKAGE_ROOT}${path}`, 'utf8');

describe("moto's Python lookup order", () => {
  it('is written in docs/local-stack.md, THREADGATE_PYTHON first', () => {
    const section = read('docs/local-stack.md').split('## Python')[1] ?? '';
    expect(section).toMatch(/1\. `THREADGATE_PYTHON`, if set/);
    expect(section).toContain("2. the checkout's own virtual environment, `.local-stack/python`");
  });

  it.each(PAGES.filter((p) => p !== 'docs/local-stack.md'))(
    'is not restated in %s, which links to it',
    (page) => {
      const text = read(page);
      expect(text).not.toMatch(/\.local-stack\/python/);
      if (/moto/.test(text) && /THREADGATE_PYTHON|needs a Python/.test(text)) {
        expect(text).toMatch(/local-stack\.md(#python|, "Python")/);
      }
    },
  );
});
