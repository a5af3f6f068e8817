import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, normalize } from 'node:path';
import { describe, expect, it } from 'vitest';
import { PACKAGE_ROOT } from '../../../infra/package-root.js';

/**
 * Every relative link in README.md and docs/*.md names a file that exists and, with a
 * `#fragment`, a heading of that page (GitHub's slugs): a page or a heading renamed without
 * its links fails here.
 */
const PAGES = [
  'README.md',
  ...readdirSync(`${PACKAGE_ROOT}docs`)
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`),
];

/** GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens. */
function slug(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, '')
    .replace(/\s/g, '-');
}

function anchors(page: string): Set<string> {
  const text = readFileSync(join(PACKAGE_ROOT, page), 'utf8').replace(/```[\s\S]*?```/g, '');
  return new Set([...text.matchAll(/^#{1,6} (.+)$/gm)].map((m) => slug(m[1] as string)));
}

const LINKS = PAGES.flatMap((page) =>
  [...readFileSync(join(PACKAGE_ROOT, page), 'utf8').matchAll(/\]\(([^)\s]+)\)/g)]
    .map((m) => m[1] as string)
    .filter((href) => !/^[a-z]+:/.test(href))
    .map((href) => ({ page, href })),
);

describe('links between the docs', () => {
  it('finds the links it checks', () => {
    expect(LINKS.length).toBeGreaterThan(50);
  });

  it.each(LINKS)('$page → $href', ({ page, href }) => {
    const [path = '', fragment] = href.split('#');
    const target = path ? normalize(join(dirname(page), path)) : page;
    expect(existsSync(join(PACKAGE_ROOT, target)), target).toBe(true);
    if (fragment && target.endsWith('.md')) expect([...anchors(target)]).toContain(fragment);
  });
});
