import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { PACKAGE_ROOT } from '../../../infra/package-root.js';

/** docs/python.md is what `npm run docs:python` renders from threadgate_producer itself. */
describe('docs/python.md', () => {
  it('is what `npm run docs:python` renders from the package', () => {
    const rendered = execFileSync('python3', [`${PACKAGE_ROOT}python/reference.py`, '--print'], {
      encoding: 'utf8',
    });
    expect(
      readFileSync(`${PACKAGE_ROOT}docs/python.md`, 'utf8'),
      'docs/python.md is stale: npm run docs:python',
    ).toBe(rendered);
  });

  it('documents every name the package exports', () => {
    const names: string[] = JSON.parse(
      execFileSync(
        'python3',
        ['-c', 'import json, threadgate_producer as tg; print(json.dumps(tg.__all__))'],
        {
          cwd: `${PACKAGE_ROOT}python`,
          encoding: 'utf8',
        },
      ),
    );
    const doc = readFileSync(`${PACKAGE_ROOT}docs/python.md`, 'utf8');
    for (const name of names) expect(doc, name).toMatch(new RegExp(`(### |\\| )\`${name}\``));
  });
});
