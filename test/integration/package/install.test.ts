import { type SpawnOptions, spawn } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { paginateQuery } from '@aws-sdk/lib-dynamodb';
import { App } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BATCH_INDEX_NAME } from '../../../functions/records/store.js';
import { PACKAGE_ROOT, VERSION } from '../../../infra/package-root.js';
import { ThreadgateStack } from '../../../infra/threadgate-stack.js';
import type { LocalStack } from '../../../local/stack/local-stack.js';
import { goodRecord } from '../../../local/stack/records.js';
import { startE2eStack, uniquePrefix } from '../../e2e/harness.js';
import { deliveryInvariants, type TemplateJson } from '../../fixtures/template-invariants.js';

/**
 * The packages as a user gets them, outside the checkout: the npm tarball installed into an
 * empty project (with only aws-cdk-lib, constructs and cdk-nag beside it), a consumer's CDK
 * app synthesized from it, its `threadgate` program run against the stack deployed to moto,
 * and the Python wheel installed into a fresh virtualenv sending and waiting for a batch.
 */
const LIBS = ['aws-cdk-lib', 'constructs', 'cdk-nag'].map(
  (name) =>
    `${name}@${JSON.parse(readFileSync(`${PACKAGE_ROOT}node_modules/${name}/package.json`, 'utf8')).version}`,
);

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

function run(command: string, args: string[], options: SpawnOptions & { input?: string } = {}): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { stdio: ['pipe', 'pipe', 'pipe'], ...options });
    let stdout = '';
    let stderr = '';
    child.stdout?.on('data', (d) => {
      stdout += d;
    });
    child.stderr?.on('data', (d) => {
      stderr += d;
    });
    child.stdin?.end(options.input ?? '');
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

async function ok(command: string, args: string[], options: SpawnOptions = {}): Promise<Run> {
  const result = await run(command, args, options);
  if (result.code !== 0)
    throw new Error(`${command} ${args.join(' ')} exited ${result.code}:\n${result.stderr}`);
  return result;
}

/** An environment without the checkout: no NODE_PATH, no npm_* variables of the test run. */
function cleanEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (k !== 'NODE_PATH' && !k.startsWith('npm_') && !k.startsWith('VITEST')) env[k] = v;
  }
  return { ...env, ...extra };
}

const CONSUMER_APP = `import { App, Stack, Validations } from 'aws-cdk-lib';
import * as iam from 'aws-cdk-lib/aws-iam';
import { AwsSolutionsChecks } from 'cdk-nag';
import { Threadgate } from 'threadgate/cdk';

const app = new App({ outdir: 'cdk.out' });
const stack = new Stack(app, 'ConsumerStack');
const gate = new Threadgate(stack, 'Gate', { allowedHosts: ['forms.example.com'] });
const jobs = new iam.Role(stack, 'JobRole', {
  assumedBy: new iam.ServicePrincipal('ecs-tasks.amazonaws.com'),
});
gate.grantSendJobs(jobs);
Validations.of(app).addPlugins(new AwsSolutionsChecks(app));
app.synth();
`;

describe('the packages, installed outside the checkout', () => {
  let work: string;
  let project: string;
  let stack: LocalStack;
  let venvPython: string;

  beforeAll(async () => {
    work = mkdtempSync(join(tmpdir(), 'threadgate-install-'));
    project = join(work, 'consumer');
    mkdirSync(project);
    // The deployment starts while the packages build (synth cached; it needs no package).
    const started = startE2eStack('install');
    await ok('npm', ['pack', '--pack-destination', work, '--prefer-offline'], { cwd: PACKAGE_ROOT });
    const tarball = join(work, `threadgate-${VERSION}.tgz`);
    writeFileSync(
      join(project, 'package.json'),
      JSON.stringify({ name: 'consumer', private: true, type: 'module' }),
    );
    await ok('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', ...LIBS, tarball], {
      cwd: project,
      env: cleanEnv(),
    });
    // The wheel from a copy of python/ (setuptools writes build/ beside the sources).
    const source = join(work, 'python');
    cpSync(join(PACKAGE_ROOT, 'python'), source, { recursive: true });
    await ok('python3', ['-m', 'pip', 'wheel', '--no-deps', '--quiet', '-w', join(work, 'wheels'), source]);
    const venv = join(work, 'venv');
    await ok('python3', ['-m', 'venv', '--system-site-packages', venv]);
    venvPython = join(venv, 'bin', 'python');
    const wheel = readdirSync(join(work, 'wheels')).find((f) => f.endsWith('.whl'));
    await ok(venvPython, [
      '-m',
      'pip',
      'install',
      '--no-deps',
      '--no-index',
      '--quiet',
      join(work, 'wheels', wheel!),
    ]);
    stack = await started;
  }, 600_000);

  afterAll(async () => {
    await stack?.stop();
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it('synthesizes a consumer app with the Threadgate construct under cdk-nag, with the invariants of this repository', async () => {
    // Act
    await ok(process.execPath, ['--input-type=module', '-e', CONSUMER_APP], {
      cwd: project,
      env: cleanEnv(),
    });
    // Assess: nag found nothing (synth would have failed) and the template holds what ours does.
    const template = JSON.parse(
      readFileSync(join(project, 'cdk.out', 'ConsumerStack.template.json'), 'utf8'),
    );
    const ours = new ThreadgateStack(new App({ context: { 'aws:cdk:bundling-stacks': [] } }), 'Threadgate', {
      settings: { allowedHosts: ['forms.example.com'] },
    });
    expect(deliveryInvariants(template as TemplateJson)).toEqual(
      deliveryInvariants(Template.fromStack(ours).toJSON() as TemplateJson),
    );
    // The role may send jobs, nothing else.
    const policy = Object.values(
      template.Resources as Record<string, { Type: string; Properties: Record<string, unknown> }>,
    ).find((r) => r.Type === 'AWS::IAM::Policy' && JSON.stringify(r.Properties.Roles).includes('JobRole'));
    expect(JSON.stringify(policy?.Properties.PolicyDocument)).toContain('sqs:SendMessage');
    // The prebundled functions, not a bundling step, made the assets.
    expect(readdirSync(join(project, 'cdk.out')).filter((f) => f.startsWith('asset.'))).toHaveLength(3);
  }, 120_000);

  it('runs the installed threadgate: --version, --help and status against the deployed stack', async () => {
    const bin = join(project, 'node_modules', '.bin', 'threadgate');
    const env = cleanEnv({ ...stack.awsEnv, THREADGATE_STACK: stack.stackName });
    // Act
    const version = await run(bin, ['--version'], { cwd: project, env });
    const help = await run(bin, ['--help'], { cwd: project, env });
    const status = await run(bin, ['status', '--json'], { cwd: project, env });
    const local = await run(bin, ['local'], { cwd: project, env });
    // Assess
    expect(version).toMatchObject({ code: 0, stdout: `${VERSION}\n` });
    expect(help.code).toBe(0);
    for (const command of ['enqueue', 'status', 'outcomes', 'wait', 'pause', 'resume', 'redrive', 'secret']) {
      expect(help.stdout).toContain(`  ${command} `);
    }
    expect(status.stderr).toBe('');
    expect(status.code).toBe(0);
    expect(JSON.parse(status.stdout).resources.queueUrl).toBe(stack.outputs.QueueUrl);
    expect(local.code).not.toBe(0);
    expect(local.stderr).toMatch(/development command: it runs from a checkout/);
  }, 120_000);

  it('sends a batch from the installed Python package (duplicates, invalid records), waits for it and reads it back', async () => {
    // Prepare: six records, two of them sent twice in the call and once more after, two invalid.
    const batch = uniquePrefix('wheel');
    const good = Array.from({ length: 6 }, (_, i) =>
      JSON.parse(goodRecord(stack.site.url, stack.site.sitekey, `${batch}-${i}`, i)),
    );
    const invalid = [
      { ...good[0], record_key: `${batch} spaced` },
      { ...good[1], record_key: `${batch}-nosubmit`, submit_url: undefined },
    ].map((r) => JSON.parse(JSON.stringify(r)));
    const program = `
import json, sys
import threadgate_producer as tg
good, invalid, batch, stack = json.loads(sys.stdin.read())
out = tg.stack_outputs(stack)
first = tg.send(out["QueueUrl"], good + good[:2] + invalid, batch_id=batch)
again = tg.send(out["QueueUrl"], good[4:], batch_id=batch)
done = tg.wait(out["TableName"], batch, expect=len(first.keys), timeout_s=300, interval_s=1,
               state_parameter=out["PipelineStateParameter"])
keys = tg.key_outcomes(out["TableName"], [r["record_key"] for r in good] + [invalid[1]["record_key"]])
print(json.dumps({"version": tg.__version__, "file": tg.__file__,
  "sent": [first.sent, again.sent], "keys": sorted(first.keys),
  "refused": [[r.index, r.record_key, r.reasons] for r in first.refused],
  "counts": done.counts, "end": done.end, "exit": done.exit_code,
  "batch": sorted(r["record_key"] for r in tg.batch_outcomes(out["TableName"], batch)), "byKey": sorted(keys)}))
`;
    // Act: from outside the checkout, so only the installed wheel can be imported.
    const result = await run(venvPython, ['-c', program], {
      cwd: work,
      env: cleanEnv(stack.awsEnv),
      input: JSON.stringify([good, invalid, batch, stack.stackName]),
    });
    // Assess
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    const out = JSON.parse(result.stdout);
    expect(out.version).toBe(VERSION);
    expect(out.file).toContain(join(work, 'venv'));
    expect(out.sent).toEqual([8, 2]);
    const schema = JSON.parse(readFileSync(`${PACKAGE_ROOT}schema/job.schema.json`, 'utf8'));
    expect(out.refused).toEqual([
      [8, `${batch} spaced`, [`record_key: must match ${schema.properties.record_key.pattern}`]],
      [9, `${batch}-nosubmit`, [schema.required.includes('submit_url') ? 'submit_url: is required' : '?']],
    ]);
    const keys = good.map((r) => r.record_key as string).sort();
    expect(out.keys).toEqual(keys);
    expect(out.batch).toEqual(keys);
    expect(out.byKey).toEqual(keys); // the refused record never reached the queue
    // The counts wait() gives are the table's, and the exit code follows them.
    const table: Record<string, number> = {};
    for await (const page of paginateQuery(
      { client: stack.documents },
      {
        TableName: stack.outputs.TableName,
        IndexName: BATCH_INDEX_NAME,
        KeyConditionExpression: 'batch_id = :b',
        ExpressionAttributeValues: { ':b': batch },
      },
    )) {
      for (const row of page.Items ?? []) table[row.status] = (table[row.status] ?? 0) + 1;
    }
    expect(out.counts).toEqual(table);
    expect(out.end).toBe('done');
    expect(out.exit).toBe((table.failed ?? 0) + (table.rejected ?? 0) > 0 ? 2 : 0);
  }, 360_000);
});
