import { readFileSync } from 'node:fs';
import { basename } from 'node:path';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

/**
 * The files that wait out a lease window (WAITS_OUT_LEASES: most of their 200-300 s with nothing
 * to do but wait) first, so its wait overlaps the others' work from the start instead
 * of running late, alone, at the tail. Then the e2e files that share one deployed stack
 * (test/e2e/harness.ts `sharedE2eStack`) back to back, the rest after them in vitest's own
 * order (slowest first). A worker reuses its process, and so its stack, only when the next file
 * in the queue is one of them (vitest.config.ts runs the e2e project without isolation);
 * interleaved with other files, each would deploy a stack of its own again.
 *
 * Next the longest file outside e2e, the install test (about 4 min, much of it waiting on npm and
 * the disk), so that it starts when the first e2e worker frees up. In vitest's order (larger files
 * first, in a fresh clone) it started a minute later and ran on alone at the tail, the unit files
 * after it: in a fresh-clone run at c8b4f64 the two cores were 17-75 % idle for a minute while its
 * `npm ci` ran, and the run's last minute was its and the unit files'.
 */
export default class SharedStackFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    const first = sorted.filter(waitsOutLeases);
    const sharing = sorted.filter((f) => !first.includes(f) && sharesStack(f));
    // isLongest is an integration file: none of the e2e files above.
    const placed = [...first, ...sharing, ...sorted.filter(isLongest)];
    return [...placed, ...sorted.filter((f) => !placed.includes(f))];
  }
}

/** The longest file outside e2e (test/integration/package/install.test.ts). */
export function isLongest(file: TestSpecification): boolean {
  return file.project.name === 'integration' && basename(file.moduleId) === 'install.test.ts';
}

/**
 * The e2e files whose records wait out a claim's lease (crashes: their messages come back after
 * it). crash-cap.test.ts's kills at time scale 0.1 wait out a lease of about 4 minutes: started
 * last, it ran on alone at the tail of a fresh-clone run for minutes.
 */
const WAITS_OUT_LEASES = ['lease-expiry.test.ts', 'crash-cap.test.ts'];

/** Whether a file's records wait out a claim's lease (test/e2e/lease-expiry.test.ts). */
export function waitsOutLeases(file: TestSpecification): boolean {
  return file.project.name === 'e2e' && WAITS_OUT_LEASES.includes(basename(file.moduleId));
}

/** Whether a test file takes the shared stack (the one-line adoption the harness documents). */
export function sharesStack(file: TestSpecification): boolean {
  if (file.project.name !== 'e2e') return false;
  try {
    return readFileSync(file.moduleId, 'utf8').includes('sharedE2eStack(');
  } catch {
    return false;
  }
}
