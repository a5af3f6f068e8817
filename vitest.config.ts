import { configDefaults, defineConfig } from 'vitest/config';
import SharedStackFirst from './test/e2e/sequencer.js';

/** Unit files that need a module graph of their own: their vi.mock factories record what loads. */
const ISOLATED_UNIT = ['test/unit/cli/lazy-commands.test.ts'];

/**
 * Projects, one per folder of test/ (unit's few files that need isolation in a second one):
 *   - `unit` (test/unit/): plain unit tests and tests over real HTTP against the in-process
 *     stand-ins; no emulator. `npm run test:unit`. Not isolated: a worker keeps the modules it
 *     imported (the AWS SDK, aws-cdk-lib) from one file to the next instead of importing them
 *     again for each of the 66 files (on this machine: 40 s and 67 s of CPU against 69 s and
 *     130 s isolated). A unit test that changes module state (process.env, a spy) puts it back
 *     itself; one whose vi.mock must see the modules load afresh is in `unit-isolated`.
 *   - `integration` (test/integration/): suites that start moto's server, deploy the stack, or
 *     run the CLI as a child process. Isolated: their time is moto's and the child processes',
 *     not imports (without isolation the project took 287 s and 486 s of CPU, against 259 s and
 *     460 s), and two of them import a Lambda handler after setting process.env.
 *   - `e2e` (test/e2e/): the whole pipeline on the local stack, with the invariants counted at the
 *     stand-ins. Not isolated: a worker keeps its process (and the harness module) from one file
 *     to the next, so the files that call `sharedE2eStack` deploy one stack per worker, not one
 *     each (test/e2e/harness.ts); the sequencer queues them first and back to back.
 * Each folder mirrors the product's layout (test/unit/functions/captchaai/client.test.ts tests
 * functions/captchaai/client.ts).
 */
export default defineConfig({
  test: {
    // Three files at a time on two cores: with two, the cores sat idle a third of the run while
    // a file waited (lease-expiry.test.ts waits out a lease window, worker.test.ts its tests'
    // deadlines and cool-downs). Suites that start moto's server or deploy the stack share one
    // emulator per file, so more than three would skew the timing-scaled stand-ins; four also
    // took longer (a fresh-clone .ci/run: 642 s and 1,198 s of CPU, against 598-605 s and
    // 1,050-1,068 s with three: more stacks idle side by side).
    maxWorkers: 3,
    testTimeout: 60_000,
    hookTimeout: 240_000,
    allowOnly: false,
    sequence: { sequencer: SharedStackFirst },
    // The CLI bundled once for the suites that start it as a child process (test/fixtures/cli-bundle.ts).
    globalSetup: ['test/fixtures/cli-bundle.ts', 'test/fixtures/moto-zygote.ts'],
    // Node 20 is the project's chosen runtime; the AWS SDK's Node 22 notice would print once per test file.
    env: { AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' },
    projects: [
      {
        extends: true,
        test: {
          name: 'unit',
          include: ['test/unit/**/*.test.ts'],
          exclude: [...configDefaults.exclude, ...ISOLATED_UNIT],
          isolate: false,
        },
      },
      { extends: true, test: { name: 'unit-isolated', include: ISOLATED_UNIT } },
      { extends: true, test: { name: 'integration', include: ['test/integration/**/*.test.ts'] } },
      { extends: true, test: { name: 'e2e', include: ['test/e2e/**/*.test.ts'], isolate: false } },
    ],
  },
});
