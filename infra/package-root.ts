import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * The folder holding threadgate's package.json, found by walking up from this module: the
 * repository root when running from the sources (infra/), the package root when running the
 * compiled code of the installed package (dist/infra/). Ends with a slash.
 */
export function findPackageRoot(from: string = fileURLToPath(import.meta.url)): string {
  let dir = dirname(from);
  for (;;) {
    const manifest = join(dir, 'package.json');
    if (existsSync(manifest) && JSON.parse(readFileSync(manifest, 'utf8')).name === 'threadgate') {
      return `${dir}/`;
    }
    const parent = dirname(dir);
    if (parent === dir) throw new Error(`threadgate: no threadgate package.json above ${from}`);
    dir = parent;
  }
}

export const PACKAGE_ROOT = findPackageRoot();

/** The package's version: one number for the npm package, the Python package and the stack description. */
export const VERSION: string = JSON.parse(readFileSync(`${PACKAGE_ROOT}package.json`, 'utf8')).version;
