import { defineConfig } from 'vitest/config';
import SharedStackFirst from './test/e2e/sequencer.js';

/**
 * Three projects, one per folder of test/:
 *   - `unit` (test/unit/): plain unit tests and tests over real HTTP against the in-process
 *     stand-ins; no emulator. `npm run test:unit`.
 *   - `integration` (test/integration/): suites that start moto's server, deploy the stack, or
 *     run the CLI as a child process.
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
    // emulator per file, so more than three would skew the timing-scaled stand-ins.
    maxWorkers: 3,
    testTimeout: 60_000,
    hookTimeout: 240_000,
    allowOnly: false,
    sequence: { sequencer: SharedStackFirst },
    // The CLI bundled once for the suites that start it as a child process (test/fixtures/cli-bundle.ts).
    globalSetup: ['test/fixtures/cli-bundle.ts'],
    // Node 20 is the project's chosen runtime; the AWS SDK's Node 22 notice would print once per test file.
    env: { AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' },
    projects: [
      { extends: true, test: { name: 'unit', include: ['test/unit/**/*.test.ts'] } },
      { extends: true, test: { name: 'integration', include: ['test/integration/**/*.test.ts'] } },
      { extends: true, test: { name: 'e2e', include: ['test/e2e/**/*.test.ts'], isolate: false } },
    ],
  },
});
