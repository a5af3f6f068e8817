import { readFileSync } from 'node:fs';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

/**
 * The e2e files that share one deployed stack (test/e2e/harness.ts `sharedE2eStack`) first and
 * back to back, the rest after them in vitest's own order (slowest first). A worker reuses its
 * process, and so its stack, only when the next file in the queue is one of them
 * (vitest.config.ts runs the e2e project without isolation); interleaved with other files,
 * each would deploy a stack of its own again.
 */
export default class SharedStackFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    const sharing = sorted.filter(sharesStack);
    return [...sharing, ...sorted.filter((f) => !sharing.includes(f))];
  }
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
