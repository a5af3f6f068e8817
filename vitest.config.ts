import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { defineConfig } from 'vitest/config';

/**
 * Two projects: `unit` (plain unit tests and tests over real HTTP against the in-process
 * stand-ins; `npm run test:unit`) and `integration` (suites that start moto's server, deploy
 * the stack, or run the CLI as a child process). A suite is an integration suite when it
 * imports the moto launcher or a fixture that starts it, or runs bin/threadgate.js, so a new
 * suite lands in the right project without a list to edit.
 */
const INTEGRATION = /from '[./]*(local\/moto|cli-fixture|fixtures\/aws|harness)\.js'|bin\/threadgate\.js/;

function testFiles(dir: string): string[] {
  return readdirSync(dir, { recursive: true, encoding: 'utf8' })
    .filter((file) => file.endsWith('.test.ts'))
    .map((file) => join(dir, file).replaceAll('\\', '/'));
}

const integrationSuites = testFiles('test').filter((file) => INTEGRATION.test(readFileSync(file, 'utf8')));

export default defineConfig({
  test: {
    // Suites that start moto's server or deploy the stack share one emulator per file;
    // two cores cannot run many of them at once without skewing the timing-scaled stand-ins.
    maxWorkers: 2,
    testTimeout: 60_000,
    hookTimeout: 240_000,
    allowOnly: false,
    // Node 20 is the project's chosen runtime; the AWS SDK's Node 22 notice would print once per test file.
    env: { AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' },
    projects: [
      { extends: true, test: { name: 'unit', include: ['test/**/*.test.ts'], exclude: integrationSuites } },
      { extends: true, test: { name: 'integration', include: integrationSuites } },
    ],
  },
});
